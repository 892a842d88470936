"""Training tests reuse the model fixtures of the generator tests (tiny random Llama, embedded model)."""

from tests.generators.conftest import embedded_dir, embedded_tokenizer_dir, model_cache, tiny_llama_dir  # noqa: F401
