"""One SFT training step on one conversation of LENGTH tokens, in a fresh process, printing its
peak memory as JSON (tests/train/test_memory.py runs it in a subprocess, so each length gets
its own peak):

    python -m tests.train.step_memory MODEL_DIR LENGTH [packed|padded] [off|on|auto]

`packed` (default): the training path (a row of four packed conversations, packed attention); `padded`: a padded
batch of two rows with an attention mask, the path before packing. Activation checkpointing
as given (default off), switched by the memory plan as in training. Prints {"length", "before_mb", "peak_mb", "step_mb"}: resident memory before
the step, the peak during it (the process's peak is reset just before the step where Linux
allows it, so loading the model does not count) and their difference.
"""

from __future__ import annotations

import json
import sys

import torch
from transformers import AutoModelForCausalLM

from train.configs import TrainConfig
from train.memory import Workload, make_plan, peak_memory_gb, rss_bytes
from train.packing import IGNORE, use_packed_attention
from train.sft import make_step


def reset_peak() -> bool:
    """Reset this process's peak resident memory (Linux: /proc/self/clear_refs); False if not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def high_water_mark() -> float:
    """Peak resident bytes since the last reset (VmHWM)."""
    with open("/proc/self/status") as f:
        kb = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
    return float(kb) * 1024


def main(model_dir: str, length: int, mode: str = "packed", checkpointing: str = "off") -> dict:
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    packed = mode == "packed"
    if packed:
        use_packed_attention(model)
    ids = torch.randint(5, 4000, (length,), generator=torch.Generator().manual_seed(1)).tolist()
    n = length // 4 if packed else length  # packed: four conversations in the row
    convs = [ids[a:a + n] for a in range(0, length, n)]
    data = [{"input_ids": c, "labels": [IGNORE] * (len(c) - len(c) // 10) + c[len(c) - len(c) // 10:]} for c in convs]
    if not packed:  # a second, shorter row: padding and a mask
        data.append({"input_ids": ids[:length // 2], "labels": [IGNORE] * (length // 4) + ids[length // 4:length // 2]})
    plan = make_plan(model, Workload(length, length // 10, "", ""), TrainConfig(activation_checkpointing=checkpointing),
                     limit=1e12)
    plan.apply(model)
    step = make_step(0, packed)
    model.train()
    loss, _ = step(model, [{"input_ids": ids[:64], "labels": ids[:64]}])  # warm-up: lazy initialisation
    loss.backward()
    model.zero_grad(set_to_none=True)
    before = rss_bytes()
    reset = reset_peak()  # so the peak is the step's, not the model load's or the warm-up's
    loss, _ = step(model, data)
    loss.backward()
    peak = high_water_mark() if reset else peak_memory_gb() * 1e9
    return {"length": length, "before_mb": before / 1e6, "peak_mb": peak / 1e6, "step_mb": (peak - before) / 1e6,
            "checkpointing": plan.checkpointing}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]), *sys.argv[3:])))
