"""Paraphrased tool variants: by rule (seeded synonym and frame tables) and by an LLM backend.

A variant keeps the base tool's parameter names, types and required list (`query` stays
`query`); it changes the function name, the description and the parameter descriptions.
Candidates are only proposals: `generators.tools.gating` decides which ones are accepted.

    from generators.tools.base import BASE_BY_DOMAIN
    from generators.tools.variants import rule_candidates, llm_candidates
    cands = rule_candidates(BASE_BY_DOMAIN["person"], seed=7, n=12)
    cands += llm_candidates(BASE_BY_DOMAIN["person"], backend, n=4, seed=7)

LLM output must be a JSON object {"name": ..., "description": ...}; anything else becomes
a candidate with a reject reason (bad_json, not_object, missing_name, ...), never an error.
"""

from __future__ import annotations

import copy
import json
import random
import re
from dataclasses import dataclass, field

from generators.llm.base import BackendError, ChatRequest
from generators.tools.base import BaseTool
from generators.tools.phrases import DOMAIN_PHRASES, FRAMES, PARAM_PHRASES, SHARED, VERBS_AGENT, VERBS_IMPERATIVE

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_NAME = 64


@dataclass
class Candidate:
    """A proposed variant of a base tool (or a failed proposal with its reject reason)."""

    domain: str = field(metadata={"help": "domain of the base tool"})
    name: str = field(metadata={"help": "proposed function name"})
    description: str = field(metadata={"help": "proposed description"})
    parameters: dict = field(metadata={"help": "JSON Schema of the parameters"})
    method: str = field(default="rule", metadata={"help": "rule | llm"})
    reject: str | None = field(default=None, metadata={"help": "parse-time reject reason, if any"})
    raw: str | None = field(default=None, metadata={"help": "raw LLM text, kept for reports"})


def _pick(rng: random.Random, options) -> str:
    return options[rng.randrange(len(options))]


def _join(items: list[str]) -> str:
    if len(items) <= 2:
        return " and ".join(items)
    return ", ".join(items[:-1]) + ", and " + items[-1]


def _name(rng: random.Random, domain: str) -> str:
    nouns = DOMAIN_PHRASES[domain]["name_nouns"]
    noun = _pick(rng, nouns)
    form = rng.randrange(4)
    if form == 0:
        name = f"{_pick(rng, VERBS_IMPERATIVE)}_{noun}"
    elif form == 1:
        name = f"{noun}_{_pick(rng, VERBS_AGENT)}"
    elif form == 2:
        name = f"{_pick(rng, VERBS_IMPERATIVE)}_{noun}_{_pick(rng, SHARED['name_suffix'])}"
    else:
        name = f"{noun}_{_pick(rng, SHARED['name_suffix'])}_{_pick(rng, VERBS_AGENT)}"
    return name


def _description(rng: random.Random, domain: str) -> str:
    p = DOMAIN_PHRASES[domain]
    facets = [_pick(rng, opts) for opts in p["facets"]]
    rng.shuffle(facets)
    keep = max(3, len(facets) - rng.randrange(2))
    slots = {
        "verb": _pick(rng, SHARED["verb"]), "verbs": _pick(rng, SHARED["verbs"]),
        "object": _pick(rng, p["object"]), "subject": _pick(rng, p["subject"]),
        "result": _pick(rng, SHARED["result"]), "about": _pick(rng, SHARED["about"]),
        "coverage": _join(facets[:keep]),
    }
    text = _pick(rng, FRAMES.get(domain, FRAMES["default"])).format(**slots)
    return text[0].upper() + text[1:]


def _param_descriptions(rng: random.Random, domain: str, parameters: dict) -> dict:
    out = copy.deepcopy(parameters)
    example = DOMAIN_PHRASES[domain]["example"]
    for pname, prop in out["properties"].items():
        options = PARAM_PHRASES.get(pname)
        if options:
            prop["description"] = _pick(rng, options).format(example=example, thing=DOMAIN_PHRASES[domain]["thing"])
    return out


def rule_candidates(base: BaseTool, seed: int, n: int) -> list[Candidate]:
    """`n` distinct rule paraphrases of `base`, deterministic for (seed, domain)."""
    rng = random.Random(f"forgeplay-tools:{seed}:{base.domain}")
    params = base.parameters()
    out: list[Candidate] = []
    seen: set[tuple[str, str]] = {(base.name, base.description)}
    tries = 0
    while len(out) < n and tries < n * 20:
        tries += 1
        name, desc = _name(rng, base.domain), _description(rng, base.domain)
        if (name, desc) in seen:
            continue
        seen.add((name, desc))
        out.append(Candidate(base.domain, name, desc, _param_descriptions(rng, base.domain, params), "rule"))
    return out


SYSTEM_PROMPT = (
    "You rewrite the definition of a search tool so that it means exactly the same thing but uses "
    "different words. Reply with one JSON object and nothing else: "
    '{"name": "<snake_case function name>", "description": "<one or two sentences>"}.'
)


def llm_prompt(base: BaseTool, taken: list[str]) -> list[dict]:
    """Chat messages asking for one paraphrase of `base` as a JSON object {name, description}."""
    tool = {"name": base.name, "description": base.description}
    user = (f"Tool:\n{json.dumps(tool, ensure_ascii=False)}\n\n"
            f"Names already taken: {', '.join(taken) or 'none'}.\n"
            "Write a new name (snake_case, letters, digits and underscores) and a reworded description "
            "with the same meaning and the same scope. Do not change what the tool searches.")
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")


def _first_json_object(text: str):
    """The reply as JSON if it is JSON (code fences allowed), else the first JSON value starting
    at a '{' inside it; raise ValueError when there is none."""
    try:
        return json.loads(_FENCE.sub("", text.strip()))
    except json.JSONDecodeError:
        pass
    start = text.find("{")
    if start < 0:
        raise ValueError("no '{' in output")
    decoder = json.JSONDecoder()
    last_error: Exception | None = None
    while start >= 0:
        try:
            obj, _ = decoder.raw_decode(text, start)
            return obj
        except json.JSONDecodeError as e:
            last_error = e
            start = text.find("{", start + 1)
    raise ValueError(str(last_error))


def normalise_name(name: str) -> str:
    """Lower snake_case from what a model wrote ('Person Finder' -> 'person_finder')."""
    return re.sub(r"[\s\-./]+", "_", name.strip()).strip("_").lower()


def parse_llm_variant(text: str, base: BaseTool) -> Candidate:
    """Parse one LLM reply into a Candidate; malformed replies get a `reject` reason code."""
    params = base.parameters()

    def bad(reason: str) -> Candidate:
        return Candidate(base.domain, "", "", params, "llm", reject=reason, raw=text)

    if not text or not text.strip():
        return bad("empty_output")
    try:
        obj = _first_json_object(text)
    except ValueError:
        return bad("bad_json")
    if not isinstance(obj, dict):
        return bad("not_object")
    name, desc = obj.get("name"), obj.get("description")
    if not isinstance(name, str) or not name.strip():
        return bad("missing_name")
    if not isinstance(desc, str) or not desc.strip():
        return bad("missing_description")
    name = normalise_name(name)
    if not NAME_RE.match(name) or len(name) > MAX_NAME:
        return bad("bad_name")
    desc = " ".join(desc.split())
    if len(desc) < 20 or len(desc) > 600:
        return bad("description_length")
    return Candidate(base.domain, name, desc, params, "llm", raw=text)


def llm_candidates(base: BaseTool, backend, n: int, seed: int, temperature: float = 0.9,
                   max_tokens: int = 160) -> list[Candidate]:
    """Ask `backend` (generators.llm protocol) for `n` paraphrases; failures become rejected candidates."""
    request = ChatRequest(messages=llm_prompt(base, [base.name]), n=n, temperature=temperature,
                          max_tokens=max_tokens, seed=seed)
    try:
        completions = backend.generate([request])[0]
    except BackendError as e:
        return [Candidate(base.domain, "", "", base.parameters(), "llm", reject="backend_error", raw=str(e))]
    return [parse_llm_variant(c.text if c.finish_reason != "error" else "", base) for c in completions]
