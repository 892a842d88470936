"""The verl side of tests/train/test_verl_objective.py, run with verl's own environment
(.venv-verl), where forgeplay is not installed: forgeplay's objectives registered in verl by
`import verl` (VERL_USE_EXTERNAL_MODULES), applied by verl's own functions to a batch built as
verl's trainer builds it, and the dry-run overrides composed by verl's config loader. Prints one
JSON object. Not a pytest module (no test_ prefix).

    PYTHONPATH=EXPORT VERL_USE_EXTERNAL_MODULES=forgeplay_verl.train.verl_objective \
        .venv-verl/bin/python tests/train/verl_objective_side.py EXPORT TOKENIZER CASES.json

CASES.json: {"groups": [{"id": the row's extra_info.id, "responses": [text, ...]}], "vote_weights":
[w, ...], "overrides": [verl overrides] (optional)}. The batch: the groups' rows read by verl's
RLHFDataset and collated, one uid per prompt, repeated rollout.n times interleaved (DataProto.repeat,
as the trainer does), the responses tokenized and right-padded with their response_mask, and
token_level_rewards the custom reward (verl's loader, reward.py) on each decoded response at its
last token. Advantages come from verl's compute_advantage (ray_trainer) with the registered
estimator, the columns handed over as the forgeplay trainer hands them; each row's advantage is
read at its first response token.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
import uuid

import numpy as np
import torch


def dataset_rows(export: str, tokenizer) -> dict:
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    cfg = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": 100_000, "return_raw_chat": True,
                            "filter_overlong_prompts": False, "cache_dir": tempfile.mkdtemp(prefix="verl-cache-")})
    ds = RLHFDataset([f"{export}/train.parquet", f"{export}/test.parquet"], tokenizer, cfg)
    return {row["extra_info"]["id"]: row for row in (ds[i] for i in range(len(ds)))}


def build_batch(export: str, tokenizer, groups: list[dict], reward_fn):
    from verl import DataProto
    from verl.utils.dataset.rl_dataset import collate_fn

    rows = dataset_rows(export, tokenizer)
    n = len(groups[0]["responses"])
    data = DataProto.from_single_dict(collate_fn([rows[g["id"]] for g in groups]))
    data.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in groups], dtype=object)
    data = data.repeat(repeat_times=n, interleave=True)
    texts = [t for g in groups for t in g["responses"]]
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] or [tokenizer.eos_token_id] for t in texts]
    width = max(map(len, ids))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    responses = torch.tensor([x + [pad] * (width - len(x)) for x in ids])
    mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids])
    scores, rewards = [], torch.zeros(responses.shape, dtype=torch.float32)
    for i, x in enumerate(ids):
        text = tokenizer.decode(x, skip_special_tokens=True)
        got = reward_fn(data.non_tensor_batch["data_source"][i], text,
                        data.non_tensor_batch["reward_model"][i]["ground_truth"], data.non_tensor_batch["extra_info"][i])
        scores.append(got)
        rewards[i, len(x) - 1] = got["score"]
    data.batch["responses"], data.batch["response_mask"] = responses, mask
    data.batch["token_level_scores"] = data.batch["token_level_rewards"] = rewards
    return data, scores


def advantages(data, name: str, tokenizer) -> list[float]:
    from forgeplay_verl.train import verl_objective as vo
    from verl.trainer.ppo.ray_trainer import compute_advantage

    texts = vo.decoded(tokenizer, data.batch["responses"], data.batch["response_mask"])
    columns = {"extra_info": list(data.non_tensor_batch["extra_info"]), vo.ANSWER: vo.answers(texts)}
    with vo.handing(columns):
        out = compute_advantage(data, adv_estimator=name, num_repeat=1, config=None)
    adv, mask = out.batch["advantages"], out.batch["response_mask"]
    assert torch.equal(adv, adv[:, :1] * mask), "one advantage per response, on its mask"
    return adv[:, 0].tolist()


def compose(overrides: list[str]) -> dict:
    """verl's ppo_trainer config with the overrides, as `python -m verl.trainer.main_ppo` composes it."""
    import os

    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf
    from verl.trainer.config import AlgoConfig
    from verl.utils.config import omega_conf_to_dataclass

    with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"),
                               version_base=None):
        cfg = hydra_compose(config_name="ppo_trainer", overrides=overrides)
    algo = omega_conf_to_dataclass(cfg.algorithm)
    assert isinstance(algo, AlgoConfig)
    pick = ("algorithm.adv_estimator", "trainer.v1.trainer_mode", "actor_rollout_ref.rollout.n",
            "data.train_files", "reward.custom_reward_function.path", "actor_rollout_ref.rollout.multi_turn.enable",
            "ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES", "actor_rollout_ref.actor.kl_loss_type")
    return {k: OmegaConf.select(cfg, k) for k in pick}


def main(export: str, tokenizer_dir: str, cases_path: str) -> None:
    cases = json.loads(open(cases_path).read())
    import verl  # imports VERL_USE_EXTERNAL_MODULES: the estimators register
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
    from verl.trainer.ppo.reward import get_custom_reward_fn

    out = {"verl": verl.__version__, "forgeplay_importable": [m for m in ("generators", "train", "storage", "flows", "acquire")
                                    if importlib.util.find_spec(m) is not None],
           "registered": sorted(k for k in ADV_ESTIMATOR_REGISTRY if k.startswith("forgeplay"))}
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    reward_fn = get_custom_reward_fn(OmegaConf.create({"reward": {"custom_reward_function": {
        "path": f"{export}/reward.py", "name": "compute_score"}}}))
    data, out["scores"] = build_batch(export, tok, cases["groups"], reward_fn)
    out["extra_info"] = [dict(e) for e in data.non_tensor_batch["extra_info"][::len(cases["groups"][0]["responses"])]]
    out["hrpo"] = advantages(data, "forgeplay_hrpo", tok)
    out["labels"] = {}
    for w in cases["vote_weights"]:
        for e in data.non_tensor_batch["extra_info"]:
            e["vote_weight"] = w
        out["labels"][str(w)] = advantages(data, "forgeplay_labels", tok)
    from verl.trainer.ppo.ray_trainer import compute_advantage

    try:  # verl's own call hands a registered estimator no columns: outside the forgeplay trainer, one line
        compute_advantage(data, adv_estimator="forgeplay_hrpo", num_repeat=1, config=None)
    except ValueError as e:
        out["without_columns"] = str(e)
    if cases.get("overrides"):
        out["config"] = compose(cases["overrides"])
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main(*sys.argv[1:4])
