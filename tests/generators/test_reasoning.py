"""Reasoning that shows its evidence, on a real 500-entity world, the real tool bank and the
real BM25 simulator: the final think's derivation, re-executed from the facts it states,
gives the gold answer for every question type; the default form (`--reasoning facts`) keeps
brief's thinks along the way and states in its final think, in one or two sentences, every
fact and what decides the answer; every template text is grounded in what the conversation
showed; model text that invents a number or a name falls back to the template with its
reason, per slot kind."""

import json
import re
from collections import Counter

import pytest

from generators.corpus.build import WorldConfig, write
from generators.corpus.derive import EXTRACTOR, FactBase, run_program, split_sentences
from generators.corpus.questions import QTYPES
from generators.corpus.templates import TEMPLATES
from generators.llm.scripted import ScriptedBackend
from generators.synth.sources import Sources
from generators.synth.skeleton import Slot
from generators.synth.synthesize import Session, SynthConfig, load_inputs
from generators.synth.tally import Tally
from generators.synth.wording import KIND
from generators.synth.think import clean_think, describe, template, ungrounded
from generators.tools.bank import build_bank


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write(WorldConfig(seed=13, entities=500), root, "w")
    return load_inputs(root, "w")


def _session(inputs, reasoning: str) -> Session:
    return Session(inputs, SynthConfig(dataset="w", n=len(inputs.triples), seed=4, reasoning=reasoning, calculator=True),
                   build_bank(seed=3, variants_per_tool=1, calculator=True))


@pytest.fixture(scope="module")
def session(inputs):
    return _session(inputs, "evidence")


@pytest.fixture(scope="module")
def skeletons(session):
    return session.skeletons(session.plans())


@pytest.fixture(scope="module")
def brief(inputs):
    """`--reasoning brief`: only a derived answer's final think states the facts (its arithmetic)."""
    s = _session(inputs, "brief")
    return s.skeletons(s.plans())


@pytest.fixture(scope="module")
def facts(inputs):
    """The default, `--reasoning facts`: brief, and every final think states its facts."""
    s = _session(inputs, "facts")
    return s.skeletons(s.plans())


@pytest.fixture(scope="module")
def planned(inputs):
    """`--reasoning plan`: brief, and the plans name every lookup as the question does."""
    s = _session(inputs, "plan")
    return s.skeletons(s.plans())


def stated_facts(text: str) -> FactBase:
    """The facts a text states, read back with the corpus's own parser."""
    return FactBase([f for s in split_sentences(text) for f in EXTRACTOR.sentence_facts(s, "")])


def number(s: str) -> int:
    return int(s.replace(",", ""))


def test_final_derivation_reexecuted_from_its_facts_gives_the_gold_answer(skeletons):
    per_type = Counter()
    for sk in skeletons:
        text = template(sk.final)
        program = json.loads(sk.triple["meta"])["program"]
        assert run_program(program, stated_facts(text)) == sk.triple["answer"], text
        assert text.endswith(f"So the answer is {sk.triple['answer']}.")
        op = program.get("op") if isinstance(program, dict) else "chain"
        if op == "absdiff":  # the arithmetic is written out and right
            a, b, c = re.search(r"([\d,]+) - ([\d,]+) = ([\d,]+)\.", text).groups()
            assert number(a) - number(b) == number(c) == number(sk.triple["answer"])
        if op in ("argmin", "argmax"):  # the comparison is written out and right
            x, word, y = re.search(r"([\d,]+) is (smaller|larger|earlier|later) than ([\d,]+)\.", text).groups()
            assert (number(x) < number(y)) == (word in ("smaller", "earlier"))
            assert (word in ("smaller", "earlier")) == (op == "argmin")
        per_type[sk.triple["qtype"]] += 1
    assert set(per_type) == set(QTYPES) and min(per_type.values()) >= 20, per_type


@pytest.mark.parametrize("mode", ["evidence", "brief", "plan", "facts"])
def test_every_template_text_is_grounded_in_what_came_before(mode, skeletons, brief, planned, facts):
    kinds = Counter()
    for sk in {"evidence": skeletons, "brief": brief, "plan": planned, "facts": facts}[mode]:
        for slot in [t.slot for t in sk.turns] + [sk.final]:
            assert slot.sources and slot.sources[0] == sk.triple["question"]
            text = template(slot)
            assert ungrounded(text, slot) == [], (slot.kind, text)
            # the final template holds without the derivation as a source: only arithmetic is new
            if slot.kind == "final":
                assert Sources(slot.sources).ungrounded(text) == [], text
            kinds[slot.kind] += 1
    assert set(kinds) >= {"plan", "next", "fix_args", "switch_tool", "escalate", "early_stop", "final"}, kinds


def test_brief_thinks_write_out_the_arithmetic_of_a_computed_answer(brief):
    """`--reasoning brief`: the intermediate thinks name the pages found and the next lookup
    with what it is, which tells the tool that finds it (no page's sentences); the final think
    concludes from the pages found, and where the answer is computed (a number no page holds)
    it writes the arithmetic first, right."""
    computed, named = 0, 0
    for sk in brief:
        for turn in sk.turns:
            text = template(turn.slot)
            if turn.slot.kind == "next":
                assert text.startswith("The result") and " says " not in text
            if turn.slot.kind in ("plan", "next") and turn.slot.facts["queries"]:
                hops = [c.hop for c in turn.calls if not c.hop.compute]
                assert hops and all(any(w in text for w in KIND[h.domain]) for h in hops), text
                named += 1
        text = template(sk.final)
        assert text.startswith("The pages about ") and text.endswith(f"Conclude that the answer is {sk.triple['answer']}.")
        program = json.loads(sk.triple["meta"])["program"]
        if isinstance(program, dict) and program.get("op") == "absdiff":
            a, b, c = re.search(r"([\d,]+) - ([\d,]+) = ([\d,]+)\.", text).groups()
            assert number(a) - number(b) == number(c) == number(sk.triple["answer"])
            computed += 1
        else:
            assert not re.search(r"\d+ - \d+ = ", text), text
    assert computed >= 20 and named >= len(brief)


def test_the_default_final_think_states_every_fact_and_what_decides_in_two_sentences(facts, brief, skeletons):
    """`--reasoning facts`, the default: every think along the way is brief's, word for word; the
    final think states every fact the answer follows from as one sentence ("The pages say A, B and
    C"), then the comparison, the arithmetic or the sameness that decides it and the answer: the
    values compared, the numbers used, the pages in between. The facts re-executed give the gold
    answer (as the evidence form's do)."""
    per_type = Counter()
    for sk, b, ev in zip(facts, brief, skeletons, strict=True):
        assert [template(t.slot) for t in sk.turns] == [template(t.slot) for t in b.turns]
        text, f = template(sk.final), sk.final.facts
        answer = sk.triple["answer"]
        assert f["form"] == "facts" and text.startswith("The pages say " if len(f["found"]) > 1 else "The page says ")
        assert text.endswith(f", so the answer is {answer}.") and text.count(". ") <= 1, text  # one or two sentences
        assert all(x in text for x in ev.final.facts["required"]), text  # every value of the derivation
        program = json.loads(sk.triple["meta"])["program"]
        op = program.get("op", "chain") if isinstance(program, dict) else "chain"
        if op == "absdiff":
            a, b_, c = re.search(r"([\d,]+) - ([\d,]+) = ([\d,]+), so the answer", text).groups()
            assert number(a) - number(b_) == number(c) == number(answer)
        elif op in ("argmin", "argmax"):  # the verdict, not the listing: the values are in the facts
            x, word, y = re.search(r"([\d,]+) is (smaller|larger|earlier|later) than ([\d,]+), so the answer", text).groups()
            assert (word in ("smaller", "earlier")) == (op == "argmin") and ": " not in text
        elif op == "eq":
            assert re.search(r"(Both give .+|.+ are different), so the answer is (yes|no)\.$", text), text
        else:  # a chain: every page in between is named
            assert all(h.query.removeprefix("The ") in text for h in sk.plan.hops), text
        said = text.split(". ")[0].lower()  # every fact the evidence form states, as a clause of the first sentence
        assert f["facts"] == ev.final.facts["facts"] and all(x.removesuffix(".").lower() in said for x in f["facts"])
        per_type[sk.triple["qtype"]] += 1
    assert set(per_type) == set(QTYPES) and min(per_type.values()) >= 20, per_type


def test_the_first_search_can_take_the_general_search_and_leave_the_kind_unsaid(inputs, planned):
    """`--first-search general`: the first round's lookups go to the general search and the first
    think gives them no kind (no page has said yet what they are); every later lookup takes the
    tool of its page's kind, which its think names, as with the domain tools. Only the first turn
    and its think differ from `--first-search domain`; an escalation keeps its domain tools."""
    with pytest.raises(ValueError, match="--first-search must be one of domain, general"):
        SynthConfig(first_search="web")
    s = Session(inputs, SynthConfig(dataset="w", n=len(inputs.triples), seed=4, reasoning="plan", calculator=True,
                                    first_search="general"), build_bank(seed=3, variants_per_tool=1, calculator=True))
    general = s.skeletons(s.plans())
    same = 0
    for g, d in zip(general, planned, strict=True):
        assert g.plan.triple_id == d.plan.triple_id and g.plan.case == d.plan.case
        first, later = g.turns[0], g.turns[1:]
        if g.plan.case == "escalation":
            assert template(first.slot) == template(d.turns[0].slot)
            continue
        injected = [c for c in first.calls if c.injected_error == "wrong_tool"]
        assert all(c.tool["domain"] == "general" for c in first.calls if c not in injected), g.plan.case
        assert not any(one in template(first.slot) or many in template(first.slot) for one, many in KIND.values())
        for turn in later:
            for c in turn.calls:
                if not c.injected_error and not c.hop.compute and turn.slot.kind == "next":
                    assert c.tool["domain"] == c.hop.domain and any(w in template(turn.slot) for w in KIND[c.hop.domain])
        if g.plan.case == "clean" and len(g.turns) > 1:
            assert [template(t.slot) for t in g.turns[1:]] == [template(t.slot) for t in d.turns[1:]]
            same += 1
    assert same >= 50, same


def test_intermediate_thinks_state_what_the_page_said_before_the_next_lookup(skeletons):
    """... or before the calculator call, whose numbers are then facts the page stated."""
    seen, computed = 0, 0
    for sk in skeletons:
        if sk.plan.case != "clean" or sk.plan.route != "sequential":
            continue
        for turn, nxt, after in zip(sk.turns, sk.turns[1:], sk.turns[2:] + [None]):
            query = nxt.calls[0].hop.query
            text, read = template(nxt.slot), nxt.slot.facts["read"]
            found = turn.calls[0].hop.query
            assert text.startswith(f'The result has the page about "{found}". It says ')
            values = [str(f.value) for s in read for fs in stated_facts(s).facts.values() for f in fs]
            if nxt.calls[0].hop.compute:
                assert text.endswith(f"so now I need to compute {query} with the calculator.")
                a, b = query.split(" - ")
                assert a in values or b in values  # the page just read gives one of the numbers
                computed += 1
            else:
                kind = KIND[nxt.calls[0].hop.domain][0]  # what the next lookup is tells the tool that finds it
                last = after is not None and after.calls[0].hop.compute  # the calculator comes next
                then = ", then compute the answer with the calculator" if last else ""
                assert text.endswith(f'so now I need to look up "{query}", {kind}{then}.')
                assert query.removeprefix("The ") in values  # the fact that leads to the next lookup
            page = Sources([c.result for c in turn.calls])  # the page just read, alone
            for sentence in read:
                assert sentence[:-1].removeprefix("The ") in text and page.ungrounded(sentence) == []
            seen += 1
    assert seen >= 20 and computed >= 5, (seen, computed)


def test_fact_clauses_lower_case_the_words_a_page_sentence_opens_with(skeletons, planned):
    """A fact sentence that opens with a word of the page templates rather than its subject ("As of the
    last census, ...") reads as a clause: "It says as of the last census, ...", not "It says As of"."""
    openers = {t.text.split()[0] for t in TEMPLATES if not t.text.startswith("{")} | {"The"}
    texts = [template(sl) for sk in skeletons + planned for sl in [t.slot for t in sk.turns] + [sk.final]]
    said = [m for t in texts for m in re.findall(r"\b(?:says|say|and) (\w+) ", t)]
    assert not [w for w in said if w in openers], Counter(w for w in said if w in openers)
    assert sum(w in {o.lower() for o in openers} for w in said) >= 5, Counter(said).most_common(20)


def names(xs: list[str]) -> str:
    return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " and " + xs[-1]


def test_plans_name_every_lookup_as_the_question_does(planned, brief):
    """A plan of several rounds lists every lookup in order, each after the first as the question
    names it ("then the founder of Dasta, then the city where the founder of Dasta was born"), then
    the calculator if the answer is computed. Every think after a result names what it read as the
    plan did, then the plan's next item and the entity it is, each by the name of the page read
    before it ("Next is the city where Ilo Varn was born, which is "Gaiwick"" after the page about
    "Ilo Varn", the founder of Dasta), or "Next is the calculator", or "That was the last lookup"
    before it concludes. For bridge and compositional questions every phrase is the
    question's own, and each one nests the one before."""
    seen, ended = Counter(), 0
    for sk in planned:
        rounds, said = sk.plan.lookups, json.loads(sk.triple["meta"]).get("phrases")
        plan = template(sk.turns[0].slot)
        if len(rounds) < 2 or not said:
            assert ", then " not in plan and "Next is" not in template(sk.final), plan
            continue
        phrases = [[said[h.query] for h in r] for r in rounds]
        items = [names([f'"{h.query}"' for h in rounds[0]])] + [names(r) for r in phrases[1:]]
        items += ["the calculator"] if sk.plan.computed else []
        assert plan.startswith(f"To answer this I need {', then '.join(items)}. First I will search for "), plan
        assert all(p in plan for r in phrases[1:] for p in r), plan
        if sk.triple["qtype"] in ("bridge", "compositional"):
            assert all(p.lower() in sk.triple["question"].lower() for r in phrases for p in r)
        if sk.triple["qtype"] == "bridge":  # one lookup a round, each phrase wraps the last
            assert all(len(r) == 1 for r in rounds)
            assert all(a[0] in b[0] for a, b in zip(phrases, phrases[1:])), phrases
        queries = [[h.query for h in r] for r in rounds]

        def local(q: str) -> str:  # the phrase of q by the names of the round read just before it
            i = next(i for i, r in enumerate(queries) if q in r)
            out = said[q]
            for x in sorted(queries[i - 1] if i else [], key=lambda x: -len(said[x])):
                out = out.replace(said[x], x)
            if i > 1 and sk.triple["qtype"] == "bridge":
                assert len(out) < len(said[q]) and out.startswith(said[q].split(said[queries[i - 1][0]])[0]), out
            return out

        for turn in sk.turns[1:]:
            f, text = turn.slot.facts, template(turn.slot)
            if turn.slot.kind not in ("next", "compute") or sk.plan.case == "early_stop":
                continue
            read = f["found"]
            if read[0] not in queries[0]:  # what it read, as the plan named it, by the pages read before
                assert f"about {names([chr(34) + q + chr(34) for q in read])}, {names([local(q) for q in read])}." in text
            if turn.slot.kind == "compute":
                assert "Next is the calculator, so now I need to compute" in text, text
            for query in f["queries"]:
                assert f'{local(query)}, which is "{query}"' in text, text
                if query not in queries[1] and sk.triple["qtype"] == "bridge":  # the nested phrase is not repeated
                    assert said[query] not in text, text
        if "last" in sk.final.facts:
            text = template(sk.final)
            last = names([local(q) for q in sk.final.facts["last"]])
            assert f"{last}. That was the last lookup. " in text, text
            says, _, concluded = text.partition("That was the last lookup. ")[2].rpartition("o the answer is ")
            assert concluded == f"{sk.triple['answer']}." and sk.triple["answer"] in says, text  # read off the last pages
            if sk.triple["qtype"] == "bridge":  # the question asked of the last page, by its name
                (page,), phrase = sk.final.facts["last"], said[sk.final.facts["last"][0]]
                asks = sk.triple["question"].replace(phrase, page)
                assert phrase not in asks and page in asks, asks
                assert says.startswith(f"The question is now: {asks} It says "), text
                assert describe(sk.final).startswith(f"The question is now: {asks} The pages say: ")  # the model's prompt
            else:
                assert says.startswith("They say " if len(sk.final.facts["last"]) > 1 else "It says "), text
            ended += 1
        seen[sk.triple["qtype"]] += 1
    assert min(seen[q] for q in ("bridge", "compositional", "comparison", "inference")) >= 3, seen
    assert ended >= 20, ended
    assert not any(", then " in template(sk.turns[0].slot) for sk in brief)  # brief plans name only the first


ISSUE_SOURCES = [
    "What is the number of years between the birth of Dounor Thilfas and the founding of the city where "
    "Dounor Thilfas was born?",
    json.dumps({"results": [{"doc_id": "d1", "title": "Dounor Thilfas", "snippet": "Dounor Thilfas was a poet. "
                             "He was born in Gaiwick. His year of birth was 1861. He studied at the University of Hohev."}]}),
    json.dumps({"results": [{"doc_id": "d2", "title": "Gaiwick", "snippet": "Gaiwick lies in Yonesia. "
                             "It was founded in 988 and has a population of 1,654,300."},
                            {"doc_id": "d3", "title": "Yonesia", "snippet": "Yonesia has sixteen provinces."}]}),
]
GROUNDING_CASES = [  # (text, ungrounded mentions)
    ("The answer is 873, which corresponds to the first page of the story published on the topic. The story is "
     "set in the 1920s, and the birth of Dounor Thilfas occurred around", [("number", "873"), ("number", "1920")]),
    ("The pages about Dounor Thilfas and Gaiwick give everything needed. Conclude that the answer is 873.",
     [("number", "873")]),
    ("Dounor Thilfas was born in 1861. Gaiwick was founded in 988. 1861 - 988 = 873. So the answer is 873.", []),
    ("He was born in 1861 and Gaiwick dates from 988, so 873 years passed.", []),
    ("The page says Dounor Thilfas was born in Gaiwick, so next I look up Gaiwick.", []),
    ("Checking the result: Dounor Thilfas's birthplace was Gaiwick. I'll search for Gaiwick next.", []),
    ("Dounor Thilfas studied at the University of Hohev; Yonesia has 16 provinces.", []),
    ("Yonesia has sixteen provinces and Gaiwick has a population of 1654300.", []),
    ("So the Birth Year of Dounor Thilfas is 1861.", []),
    ("Now I should compare both years: 1861 and 988.", []),
    ("Dounor Thilfas was born in Gaiwick in 1862.", [("number", "1862")]),
    ("Gaiwick was founded by Quentin Zarvox.", [("name", "Quentin Zarvox")]),
    ("Dounor Thilfas studied at the University of Marl.", [("name", "University of Marl")]),
    ("Yonesia has twelve provinces.", [("number", "12")]),
    ("Step 1: the top 3 results; two pages are enough.", []),
    ("Gaiwick lies in Velmora, next to Yonesia.", [("name", "Velmora")]),
]


@pytest.mark.parametrize("text,expected", GROUNDING_CASES, ids=[str(i) for i in range(len(GROUNDING_CASES))])
def test_grounding_rule_on_a_table_of_cases(text, expected):
    assert Sources(ISSUE_SOURCES).ungrounded(text) == expected


def final_slot(required=("1861", "988", "873")) -> Slot:
    facts = ["Dounor Thilfas's year of birth was 1861.", "Gaiwick was founded in 988."]
    return Slot("final", {"found": ["Dounor Thilfas", "Gaiwick"], "answer": "873", "skipped": None, "question": "q",
                          "facts": facts, "steps": ["1861 - 988 = 873."], "required": list(required),
                          "quoted": False}, sources=ISSUE_SOURCES)


def test_model_text_is_kept_only_when_grounded_and_the_final_one_when_it_derives():
    nxt = Slot("next", {"found": ["Dounor Thilfas"], "queries": ["Gaiwick"],
                        "read": ["Dounor Thilfas was born in Gaiwick."]}, sources=ISSUE_SOURCES[:2])
    ok = "Dounor Thilfas was born in Gaiwick, so I search for Gaiwick now."
    assert clean_think(ok, nxt) == (ok, "llm")
    text, source = clean_think("Gaiwick, founded in 1920 by Quentin Zarvox, is next.", nxt)
    assert source == "template:ungrounded" and text == template(nxt)
    assert "Dounor Thilfas was born in Gaiwick" in text
    final = final_slot()
    derived = "He was born in 1861 and Gaiwick was founded in 988; 1861 - 988 = 873, so it is 873."
    assert clean_think(derived, final) == (derived, "llm")
    assert clean_think("So the answer is 873 as the pages show.", final)[1] == "template:missing_derivation"
    invented = "He was born in 1861; Gaiwick was founded in 988 and rebuilt in 1920; 1861 - 988 = 873."
    assert clean_think(invented, final)[1] == "template:ungrounded"
    assert template(final) == ('The pages about "Dounor Thilfas" and "Gaiwick" give everything needed. '
                               "Dounor Thilfas's year of birth was 1861. Gaiwick was founded in 988. "
                               "1861 - 988 = 873. So the answer is 873.")


def test_synthesis_reports_model_share_and_fallback_reasons_per_slot_kind(session, skeletons):
    plans = session.plans()[:80]
    _, stats = session.trajectories(plans, ScriptedBackend(), "r")
    assert sum(sum(c.values()) for c in stats["by_slot"].values()) == stats["slots"]
    tally = Tally()
    tally.add({**stats, "mix": {"case": {}, "route": {}}})
    report = tally.slot_report()
    assert set(report) >= {"plan", "next", "final", "answer"}
    assert report["final"]["fallbacks"].get("template:missing_derivation", 0) > 0
    assert sum(r["fallbacks"].get("template:ungrounded", 0) for r in report.values()) > 0
    for kind, r in report.items():
        llm = stats["by_slot"][kind]["llm"]
        assert r["texts"] == sum(stats["by_slot"][kind].values()) and r["llm_share"] == round(llm / r["texts"], 4)
