"""TRL's own trainers accept the exported files as they are: one GRPO step and one SFT step on a
tiny random-weight Llama (skipped when `trl` is not installed)."""

from __future__ import annotations

import pytest

from tests.train.test_export import root  # noqa: F401  (module fixture: a small dataset)
from train.export import export_trl
from train.reward import answer_reward

trl = pytest.importorskip("trl")
pytestmark = pytest.mark.slow  # a real TRL train step (~1 min on 2 cores)


@pytest.fixture(scope="module")
def files(root, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("trl")
    export_trl("w", out, root, kinds=("trajectories", "tasks"), test_fraction=0.0)
    return out


def test_grpo_trainer_reads_prompt_and_reward_columns(files, tiny_llama_dir, tmp_path):
    import datasets

    seen = {}

    def spy_reward(completions, answer, aliases, hop_count, qtype, **kw):
        seen.update(n=len(completions), answer=list(answer), hop_count=list(hop_count))
        return answer_reward(completions, answer, aliases)

    ds = datasets.load_dataset("parquet", data_files=str(files / "grpo_train.parquet"))["train"].select(range(2))
    args = trl.GRPOConfig(output_dir=str(tmp_path / "grpo"), use_cpu=True, max_steps=1, num_generations=2,
                          per_device_train_batch_size=2, max_completion_length=8, report_to=[],
                          logging_steps=1, save_strategy="no", bf16=False)
    trainer = trl.GRPOTrainer(model=str(tiny_llama_dir), reward_funcs=spy_reward, args=args, train_dataset=ds)
    trainer.train()
    assert seen["n"] == 2 and set(seen["answer"]) <= set(ds["answer"]) and set(seen["hop_count"]) <= set(ds["hop_count"])


def test_sft_trainer_reads_messages(files, tiny_llama_dir, tmp_path):
    import datasets

    ds = datasets.load_dataset("parquet", data_files=str(files / "sft_train.parquet"))["train"].select(range(2))
    args = trl.SFTConfig(output_dir=str(tmp_path / "sft"), use_cpu=True, max_steps=1, per_device_train_batch_size=2,
                         max_length=512, report_to=[], save_strategy="no", bf16=False)
    trainer = trl.SFTTrainer(model=str(tiny_llama_dir), train_dataset=ds, args=args)
    out = trainer.train()
    assert out.global_step == 1 and out.training_loss > 0
