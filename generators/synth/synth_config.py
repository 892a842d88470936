"""`SynthConfig`: the options of `forgeplay synthesize` (generators/synth/synthesize.py runs
them), with the checks that refuse a bad one before anything loads, and `LATER_DEFAULTS`,
which keeps the ids of runs made before an option existed."""

from __future__ import annotations

from dataclasses import dataclass, field

from generators.llm.toolcalls import TOOL_STYLES
from generators.synth import plan as planning
from generators.tools.banks import HELP as BANK_HELP
from generators.tools.retriever import option as retriever_option


TEXTS = ("llm", "template")
REASONING = ("facts", "brief", "evidence", "plan")
FIRST_SEARCH = ("domain", "general")
LEADS = ("every", "later")


@dataclass
class SynthConfig:
    """How `forgeplay synthesize` builds trajectories."""

    dataset: str = field(default="demo", metadata={"help": "dataset holding documents and triples; trajectories and tools are written there too"})
    n: int = field(default=500, metadata={"help": "number of trajectories to synthesize; past the number of triples, a triple gives several (other routes, cases, offered tools; see --per-triple)"})
    per_triple: int = field(default=8, metadata={"help": "most trajectories made from one triple (each its own route, case or offered tools)"})
    allow_fewer: bool = field(default=False, metadata={"help": "when --n is more than the triples allow (triples in use x --per-triple), make as many as they allow instead of stopping with an error"})
    seed: int = field(default=7, metadata={"help": "seed for tool choice, cases, errors and sampling"})
    case_mix: str = field(default=",".join(f"{k}={v}" for k, v in planning.DEFAULT_CASE_MIX.items()),
                          metadata={"help": "weights of the reflection cases, e.g. clean=0.4,wrong_args=0.2 (cases: "
                                            + ", ".join(planning.CASES) + ")"})
    route_mix: str = field(default=",".join(f"{k}={v}" for k, v in planning.DEFAULT_ROUTE_MIX.items()),
                           metadata={"help": "target weights of routes when picking triples"})
    rounds_weight: float = field(default=0.0, metadata={"help": "favour long questions: within a route, triples are drawn with weight (tool rounds) ** this; 0 draws uniformly"})
    kinds_in_turn: bool = field(default=False, metadata={"help": "within a route, the kinds of question (type and hop count) take turns, so a kind with few triples (a two-hop arithmetic question) is not crowded out by the large ones"})
    asks_in_turn: bool = field(default=False, metadata={"help": "within a kind of question (within a route without --kinds-in-turn), what the questions ask of their last page (a population, a founder) takes turns, so the data asks what the world asks and not mostly its commonest facts"})
    hold_out: str = field(default="", metadata={"help": "file of triple ids (one per line) that no trajectory uses: a test split that stays the same whatever the mixes pick"})
    variants_per_tool: int = field(default=3, metadata={"help": "paraphrased variants per base tool (dual-gated)"})
    llm_variants: bool = field(default=False, metadata={"help": "also ask the model for tool paraphrases (rule paraphrases fill the rest)"})
    distractors_min: int = field(default=3, metadata={"help": "fewest distractor tools offered per sample"})
    distractors_max: int = field(default=8, metadata={"help": "most distractor tools offered per sample"})
    tool_style: str = field(default="full", metadata={"choices": TOOL_STYLES, "help": "tools in the system prompt: full (JSON schemas) or compact (one-line signatures, ~5x fewer tokens)"})
    top_k_rate: float = field(default=0.3, metadata={"help": "share of tool calls that pass top_k"})
    top_k: str = field(default="3,5,8", metadata={"help": "comma-separated top_k values a call picks from"})
    texts: str = field(default="llm", metadata={"choices": TEXTS, "help": "who writes reasoning and answer wording: llm, or template (no model is loaded)"})
    chunk: int = field(default=32, metadata={"help": "trajectories per LLM batch and per committed shard"})
    temperature: float = field(default=0.7, metadata={"help": "sampling temperature of the reasoning"})
    max_think_tokens: int = field(default=64, metadata={"help": "token budget of one reasoning text"})
    reasoning: str = field(default="facts", metadata={"choices": REASONING, "help": "what the thinks say: facts (the default: brief's thinks along the way, and a final think that states the facts the answer follows from, the values compared, the numbers used, the pages in between, and the comparison or arithmetic, in one or two sentences), brief (the pages found and the next lookup with what it is, a place or a person, which tells the tool; the final think names the pages found, and where the answer is computed from numbers on the pages does the arithmetic: `forgeplay validate` rejects its final thinks of comparisons and yes/no questions unless --no-final-facts), evidence (also what each page said, and every final think states its facts and the comparison or arithmetic) or plan (brief, and a world question's first think lists every lookup as the question names it, each later think says which of those it just read and which comes next, and the final think states the facts the answer follows from and any comparison)"})
    max_final_tokens: int = field(default=160, metadata={"help": "token budget of the final reasoning (with --reasoning facts or evidence it states every fact and the derivation)"})
    first_search: str = field(default="domain", metadata={"choices": FIRST_SEARCH, "help": "the tool of the first round's lookups: domain (the tool of the kind the first think gives each name) or general (the general search, and the first think gives no kind: no page has said yet what a name is; later thinks give the kind the page read before says)"})
    lead: str = field(default="every", metadata={"choices": LEADS, "help": "which thinks of a computed answer (with --calculator) open with 'The question asks for the number of years between two dates.': every (each think) or later (each but the first, whose plan already ends with the calculator; the first think of every question then opens alike)"})
    calculator: bool = field(default=False, metadata={"help": "offer the calculator tool; a computed answer (the years between two dates) calls it with the arithmetic before the final think (not the default: it did not help the embedded model, see README)"})
    tools: str = field(default="auto", metadata={"help": BANK_HELP})
    retriever: str = retriever_option()
    run_id: str | None = field(default=None, metadata={"help": "run id (default: derived from the config)"})

    def __post_init__(self) -> None:
        from generators.tools.retriever import check_spec

        check_spec(self.retriever)

        if self.tool_style not in TOOL_STYLES:
            raise ValueError(f"--tool-style must be one of {', '.join(TOOL_STYLES)}, not {self.tool_style!r}")
        if self.texts not in TEXTS:
            raise ValueError(f"--texts must be llm or template, not {self.texts!r}")
        if self.reasoning not in REASONING:
            raise ValueError(f"--reasoning must be one of {', '.join(REASONING)}, not {self.reasoning!r}")
        if self.lead not in LEADS:
            raise ValueError(f"--lead must be one of {', '.join(LEADS)}, not {self.lead!r}")
        if self.first_search not in FIRST_SEARCH:
            raise ValueError(f"--first-search must be one of {', '.join(FIRST_SEARCH)}, not {self.first_search!r}")
        self.top_k_choices()
        if self.rounds_weight < 0:
            raise ValueError(f"--rounds-weight must be >= 0, not {self.rounds_weight}")
        if self.n < 1 or self.per_triple < 1:
            raise ValueError(f"--n and --per-triple must be >= 1, not {self.n} and {self.per_triple}")

    def held_out(self, triple_ids=None) -> set[str]:
        """The triple ids of the `hold_out` file (none without one), each checked to be one of
        `triple_ids` when they are given."""
        from storage.userfiles import read_ids, read_split

        if not self.hold_out:
            return set()
        if triple_ids is None:
            return set(read_ids(self.hold_out, "--hold-out"))
        return set(read_split(self.hold_out, "--hold-out", triple_ids, self.dataset))

    def top_k_choices(self) -> tuple[int, ...]:
        try:
            ks = tuple(int(x) for x in self.top_k.split(",") if x.strip())
        except ValueError:
            ks = ()
        if not ks or min(ks) < 1 or max(ks) > 10:
            raise ValueError(f"--top-k must be comma-separated integers from 1 to 10, not {self.top_k!r}")
        return ks


# options added after runs existed: in a run's id only when they differ from the value they had then,
# so an older run keeps its id (`reasoning` was "brief" by default then: a `--reasoning brief` run
# keeps its id, and a run with today's default, facts, gets a new one)
LATER_DEFAULTS = {"reasoning": "brief", "max_final_tokens": 160, "calculator": False, "rounds_weight": 0.0,
                  "hold_out": "", "first_search": "domain", "kinds_in_turn": False,
                  "asks_in_turn": False, "lead": "every", "per_triple": 8, "allow_fewer": False, "tools": "auto",
                  "retriever": "bm25"}
