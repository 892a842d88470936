"""Every validation check, in layer order: the runner takes the checks of the chosen layers
that apply to the record kind from here, and `forgeplay validate --list-checks` prints this
list. Adding a check: write it (validators/check.py) and add one line below.

Per-record checks come before the shared ones (they run first, in the worker tasks), and a
record leaves the running at its first failing check unless --all-layers is set.

    from validators.registry import checks_for, listing
    checks_for(["schema", "rules"], "triples")      # [SchemaCheck, TripleRules]
"""

from __future__ import annotations

from storage.schema import KINDS
from validators.answerability import AnswerabilityCheck
from validators.check import Check
from validators.dedup import DedupCheck
from validators.judge import JudgeCheck
from validators.question_rules import TaskRules, TripleRules
from validators.schema_layer import SchemaCheck
from validators.trajectory_rules import NoRules, TrajectoryRules

CHECKS: tuple[Check, ...] = (
    SchemaCheck(),
    TrajectoryRules(),
    TripleRules(),
    TaskRules(),
    NoRules(),
    JudgeCheck(),
    AnswerabilityCheck(),
    DedupCheck(),
)
LAYERS: tuple[str, ...] = tuple(dict.fromkeys(c.layer for c in CHECKS))  # the --layers names, in order


def layer_list(layers: str) -> list[str]:
    """The layers named in a comma list, in layer order; ValueError for an unknown one."""
    names = [x.strip() for x in layers.split(",") if x.strip()]
    bad = [x for x in names if x not in LAYERS]
    if bad:
        raise ValueError(f"unknown layer(s) {bad}; choose from {', '.join(LAYERS)}")
    return [x for x in LAYERS if x in names]


def checks_for(layers: list[str], kind: str, registry: tuple[Check, ...] = CHECKS) -> list[Check]:
    """The checks of `layers` that apply to `kind`, per-record ones first, in registry order."""
    chosen = [c for c in registry if c.layer in layers and c.applies_to(kind)]
    return [c for c in chosen if c.per_record] + [c for c in chosen if not c.per_record]


def uses_backend(layers: list[str]) -> bool:
    """Whether a chosen layer needs a model backend (for any kind: it names the run)."""
    return any(c.uses_backend for c in CHECKS if c.layer in layers)


def listing(registry: tuple[Check, ...] = CHECKS) -> list[dict]:
    """One row per check: name, layer, kinds, how it runs, and its reason codes."""
    rows = []
    for c in registry:
        kinds = [k for k in KINDS if c.applies_to(k)]
        rows.append({"check": c.name, "layer": c.layer, "kinds": "any" if len(kinds) == len(KINDS) else ", ".join(kinds),
                     "runs": "per record" if c.per_record else "shared, in record order",
                     "reasons": list(c.codes())})
    return rows
