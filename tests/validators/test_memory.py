"""Memory does not grow with the dataset: `forgeplay validate` with the default layers (schema,
rules with replay and grounding, dedup) on a dataset 4x larger peaks within 10% of the smaller
one's RSS (each run its own process, peak RSS from the kernel; nothing timed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from generators.corpus.build import WorldConfig, write
from generators.synth.synthesize import Session, SynthConfig, load_inputs
from generators.tools.bank import build_bank
from storage import write_rows

REPO = Path(__file__).resolve().parents[2]


def _peak_mib(root: Path, *args: str) -> float:
    p = subprocess.Popen([sys.executable, "-m", "flows.cli", "--data-root", str(root), *args], cwd=REPO,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, out[-3000:]
    return usage.ru_maxrss / 1024


def test_validation_of_a_4x_larger_dataset_peaks_within_10_percent(tmp_path):
    root = tmp_path / "data"
    write(WorldConfig(seed=5, entities=1000), root, "small")  # 500 triples
    shutil.copytree(root / "small", root / "large")
    bank = build_bank(seed=7, variants_per_tool=1)
    for ds, n in (("small", 1500), ("large", 6000)):
        s = Session(load_inputs(root, ds), SynthConfig(dataset=ds, n=n, per_triple=12, texts="template"), bank)
        write_rows(root, ds, "tools", "bank", bank)
        for plans in _chunks(s.picks(), 500):
            write_rows(root, ds, "trajectories", "synth", s.trajectories(plans, None, "synth")[0])
    small = _peak_mib(root, "validate", "--dataset", "small", "--chunk", "500")
    large = _peak_mib(root, "validate", "--dataset", "large", "--chunk", "500")
    assert large <= 1.10 * small, (small, large)


def _chunks(it, size: int):
    chunk = []
    for x in it:
        chunk.append(x)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
