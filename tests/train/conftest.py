"""Training tests reuse the model fixtures of the generator tests (tiny random Llama, embedded
model) and share one small world (dataset "w" of 120 entities, seed 3), which they only read."""

import pytest

from tests.generators.conftest import embedded_dir, embedded_tokenizer_dir, model_cache, tiny_llama_dir  # noqa: F401


@pytest.fixture(scope="session")
def world_root(tmp_path_factory):
    from generators.corpus.build import WorldConfig, write

    root = tmp_path_factory.mktemp("world")
    write(WorldConfig(seed=3, entities=120), root, "w")
    return root
