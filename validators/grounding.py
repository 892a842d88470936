"""Rules-layer check `grounding`: reasoning mentions only what the conversation has shown.

Every `<think>` of an assistant turn is read against the messages before it (system prompt,
question, earlier tool results, earlier turns). Each number and capitalised name in it must
occur there, or, for a number, be the sum or difference of two such numbers stated in the
same think (a derivation such as "1861 - 988 = 873"); generators/synth/grounding.py defines
what counts as a number or a name, generators/synth/sources.py how they are looked up in the
messages. A think that mentions a number
or date found in no earlier message fails with `think_unsupported_number`, one that names
something found in no earlier message with `think_unsupported_name`; the detail gives the
message index and the mentions. It needs nothing but the messages, so it catches invented
rationales in trajectories from any pipeline (`forgeplay validate --input FILE`).

    detail = check_grounding(row["messages"])   # raises Reject, else {"thinks": n}
"""

from __future__ import annotations

from generators.llm.toolcalls import split_think
from generators.synth.sources import Sources
from validators.verdict import Reject

CODES = {"number": "think_unsupported_number", "name": "think_unsupported_name"}


def check_grounding(msgs: list[dict]) -> dict:
    """Checks every think of `msgs` (module docstring); the number of thinks checked."""
    return ground(msgs)[0]


def ground(msgs: list[dict], thinks: dict[int, str] | None = None,
           plain: dict[int, str] | None = None) -> tuple[dict, Sources]:
    """`check_grounding`, and the messages before the last as Sources, as the thinks were read
    against them (validators/final_facts.py reads the final think against the same). `thinks`
    gives the think of each assistant message by index, where the caller has split them;
    `plain` the plain text of a message, by the message's id(), where the caller has it
    (`Sources.add`; the replay step finds those of the tool messages)."""
    src, checked = Sources(), 0
    for i, m in enumerate(msgs):
        content = m.get("content") or ""
        if m.get("role") == "assistant":
            think = thinks[i] if thinks is not None and i in thinks else split_think(content).think
            if think:
                bad = src.ungrounded(think)
                if bad:
                    kind = "number" if any(k == "number" for k, _ in bad) else "name"
                    raise Reject(CODES[kind], index=i, mentions=[v for _, v in bad][:10], think=think[:300])
                checked += 1
        if i < len(msgs) - 1:
            src.add(content, plain.get(id(m)) if plain else None)
    return {"thinks": checked}, src
