"""`forgeplay` (flows.cli) with one fault for the loop's reliability test: the process kills
itself with SIGKILL inside the commit of its first shard of the kind KIND names, after the
shard file is renamed into place and before the manifest line that commits it is written,
the last step of a commit (storage/shards.py).

    python -m tests.flows.kill_in_commit KIND run --resume RUN_ID
"""

import os
import signal
import sys

from storage import manifest


def main() -> None:
    kind = sys.argv.pop(1)
    append = manifest.append

    def killed_in_commit(ddir, entry):
        if entry.kind == kind:
            os.kill(os.getpid(), signal.SIGKILL)
        return append(ddir, entry)

    manifest.append = killed_in_commit
    from flows.cli import main as cli

    cli()


if __name__ == "__main__":
    main()
