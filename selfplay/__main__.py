"""`python -m selfplay KIND [options]`: a self-play update stage (selfplay/update.py) without
Prefect, runnable under torchrun: `python -m train`'s commands with the self-play kinds
registered first. train/run.py launches it for `forgeplay train selfplay-examiner|selfplay-student
--nproc N` (the kinds' StageKind.module).

    torchrun --nproc-per-node 2 -m selfplay selfplay-student --dataset w_selfplay --run RUN --out runs/s
"""

import selfplay.update  # noqa: F401  (registers the kinds before the commands are made)
from train.__main__ import app

if __name__ == "__main__":
    app()
