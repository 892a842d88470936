"""`forgeplay corpus questions` on a corpus without questions (tests/generators/chain_corpus.py):
chains that really link, answers in their last passage, the model's questions checked and
rejected with reasons, kept triples committed once and read by synthesis. The model is the
scripted stand-in (in process, and over HTTP through the stand-in engine with the CLI); a
slow test runs the embedded model."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from generators.answers import normalize
from generators.corpus.chain_prompts import AUTHOR_HEAD, HOP_QUESTION, LINK_PHRASE, READER_HEAD, parse_author, parse_phrase
from generators.corpus.chains import Chain, ChainFinder, Passage, contains, load_passages
from generators.llm.base import Completion
from generators.llm import scripted_chain
from generators.llm.registry import BackendConfig
from generators.llm.scripted import ScriptedBackend
from storage import load_table
from tests.generators.chain_corpus import write_corpus
from validators.chain_authors import hops
from validators.chain_checks import Candidate, verify
from validators.chain_run import QuestionsConfig, run_questions
from validators.question_rules import check_triple_rules
from validators.reasons import REASONS
from validators.rule_context import RuleContext

runner = CliRunner()


def linked(a: Passage, b: Passage, via: str, name: str, finder: ChainFinder) -> bool:
    """Whether passage `a` really leads to `b` the way the chain says."""
    if via == "title":
        return name == b.title and contains(a.text, name)
    if via == "name":
        return contains(a.text, name) and contains(b.text, name)
    if via == "column":
        return b.doc_id in a.links or b.title in a.links
    hits = finder.index().top(finder.index().score(f"{a.title}\n{a.text}"), __import__("numpy").ones(
        len(finder.passages), bool), [finder.pos[a.doc_id]], finder.k)
    return finder.pos[b.doc_id] in hits


@pytest.fixture()
def corpus(tmp_path):
    root = tmp_path / "data"
    write_corpus(root, "docs")
    return root


def test_chains_link_and_their_answers_are_only_in_the_last_passage(corpus):
    finder = ChainFinder(load_passages(corpus, "docs"))
    chains = list(finder.chains(seed=1, hops=(2, 3), per_start=2))
    assert {len(c.passages) for c in chains} == {2, 3}
    assert {v for c in chains for v in c.vias} >= {"title", "name", "retriever"}
    for c in chains:
        assert len({p.doc_id for p in c.passages}) == len(c.passages)
        for a, b, via, name in zip(c.passages, c.passages[1:], c.vias, c.names):
            assert linked(a, b, via, name, finder), (a.title, b.title, via, name)
        assert contains(c.passages[-1].text, c.answer)
        assert not any(contains(p.text, c.answer) for p in c.passages[:-1])
        assert contains(c.sentences[-1], c.answer) and c.sentences[-1] in c.passages[-1].text
        qcp = c.qcp
        assert qcp.seed_doc_id == c.doc_ids[0] and [s.doc_ids[0] for s in qcp.steps] == c.doc_ids[1:]
        assert qcp.queries() == list(c.names)


def test_a_links_column_leads_where_it_says(tmp_path):
    from storage import write_rows

    rows = [{"doc_id": f"d{i}", "title": f"page {i}", "text": f"Plain text number {i} with Code {100 + i}.",
             "source": "t", "meta": json.dumps({"links": [f"d{(i + 1) % 6}"]})} for i in range(6)]
    write_rows(tmp_path, "linked", "documents", "r", rows)
    finder = ChainFinder(load_passages(tmp_path, "linked"), links=("column",))
    chains = list(finder.chains(seed=0, hops=(2, 3), per_start=1))
    assert chains and all(c.vias == ("column",) * (len(c.passages) - 1) for c in chains)
    for c in chains:
        for a, b in zip(c.doc_ids, c.doc_ids[1:]):
            assert int(b[1:]) == (int(a[1:]) + 1) % 6
    with pytest.raises(ValueError, match="unknown link kind 'friends'"):
        ChainFinder([], links=("friends",))


def test_prompts_and_the_scripted_replies_agree():
    assert (AUTHOR_HEAD, READER_HEAD) == (scripted_chain.AUTHOR_HEAD, scripted_chain.READER_HEAD)
    assert HOP_QUESTION.startswith(scripted_chain.HOP_QUESTION_HEAD) and LINK_PHRASE.startswith(scripted_chain.LINK_PHRASE_HEAD)
    assert parse_author("Question: Where was the founder of X born?", "Lusk") == ("Where was the founder of X born?", "Lusk")
    assert parse_author("<question>Who runs the guild?</question><answer>Ada</answer>", "Lusk") == ("Who runs the guild?", "Ada")
    assert parse_author("The answer to the question is: 1349", "1349")[0] is None


def test_scripted_run_keeps_linked_triples_rejects_with_reasons_and_resumes(corpus):
    cfg = QuestionsConfig(dataset="docs", max_chains=60, chunk=16, author="path", links="title,name,column,retriever")
    report = run_questions(cfg, BackendConfig(), corpus, backend=ScriptedBackend())
    funnel = report["funnel"]
    finder = ChainFinder(load_passages(corpus, "docs"))
    docs = {p.doc_id: p for p in finder.passages}
    triples = load_table("docs", "triples", corpus).to_pylist()
    assert len(triples) == funnel["kept"] == report["written"]["triples"] > 0
    rules = RuleContext(documents={d: (p.title, p.text) for d, p in docs.items()})
    for t in triples:
        chain = [docs[d] for d in t["golden_doc_ids"]]
        meta = json.loads(t["meta"])
        assert t["hop_count"] == len(chain) in (2, 3) and t["qtype"] == "bridge"
        for a, b, link in zip(chain, chain[1:], meta["links"]):
            assert linked(a, b, link["via"], link["name"], finder)
        assert contains(chain[-1].text, t["answer"]) and not contains(t["question"], t["answer"])
        assert meta["qcp"]["seed_doc_id"] == chain[0].doc_id
        assert all(v.passed for v in check_triple_rules(t, rules)), t  # the validator's triple rules agree
    verdicts = load_table("docs", "verdicts", corpus).to_pylist()
    assert len(verdicts) == funnel["chains"] == 60
    rejects = {}
    for v in verdicts:
        assert v["reason"] in REASONS and v["record_kind"] == "triples"
        if not v["passed"]:
            rejects.setdefault(v["reason"], []).append(json.loads(v["detail"]))
    assert sum(map(len, rejects.values())) == 60 - funnel["kept"]
    for d in rejects["answer_in_question"]:  # leaks its answer
        assert normalize(d["answer"]) in normalize(d["question"])
    for d in rejects["answerable_from_last_passage"]:  # the reader needs no hop
        assert d["f1"][1] >= 0.5 and d["f1"][0] >= 0.5
    for d in rejects["answer_not_in_last_passage"]:  # the model's answer is in no page of the chain
        assert not any(contains(docs[i].text, d["answer"]) for i in d["doc_ids"])
    assert rejects["question_unparseable"]

    # self-play's warm start turns them into examiner demonstrations (a task source with its QCP)
    from generators.tools.base import base_rows
    from generators.tools.simulator import Simulator
    from selfplay.warmstart import EXAMINER_TOOL, demonstrations

    rows, tools = load_table("docs", "documents", corpus).to_pylist(), base_rows()
    demos, _ = demonstrations(rows, triples, Simulator(rows, seed=0, tools=tools),
                              next(t for t in tools if t["name"] == EXAMINER_TOOL), dataset="docs")
    assert demos and {d["task"]["question"] for d in demos} <= {t["question"] for t in triples}

    again = run_questions(cfg, BackendConfig(), corpus, backend=ScriptedBackend())
    assert again["funnel"]["done before"] == 60 and again["written"] == {}
    assert load_table("docs", "triples", corpus).num_rows == len(triples)
    assert load_table("docs", "verdicts", corpus).num_rows == 60


def test_cli_over_http_then_synthesize_reads_the_triples(corpus):
    from flows import cli
    from flows.synthesize import run as synthesize
    from generators.llm.standin_engine import StandinEngine
    from generators.synth.synthesize import SynthConfig

    with StandinEngine(slots=4) as engine:
        args = ["corpus", "questions", "--dataset", "docs", "--max-chains", "24", "--backend", "openai",
                "--base-url", engine.url, "--model", "standin", "--data-root", str(corpus)]
        res = runner.invoke(cli.app, args, env={"COLUMNS": "200"})
        assert res.exit_code == 0, res.output
        assert "kept" in res.output and "chains" in res.output
        kept = load_table("docs", "triples", corpus).num_rows
        assert kept > 0 and f"{kept} new triples" in res.output
        res = runner.invoke(cli.app, args, env={"COLUMNS": "200"})
        assert res.exit_code == 0 and "0 new triples, 0 new verdicts" in res.output
    scripted = QuestionsConfig(dataset="docs", max_chains=24, run_id="in-process")
    run_questions(scripted, BackendConfig(), corpus, backend=ScriptedBackend())
    by_run = {}
    for t in load_table("docs", "triples", corpus).to_pylist():
        by_run.setdefault(t["run_id"], set()).add(t["question"])
    assert len(by_run) == 2 and len(set(map(frozenset, by_run.values()))) == 1  # same replies over HTTP

    summary = synthesize(SynthConfig(dataset="docs", n=6, texts="template", variants_per_tool=1), BackendConfig(),
                         corpus, progress=False)
    rows = load_table("docs", "trajectories", corpus).to_pylist()
    assert rows and summary
    questions = {t["question"] for t in load_table("docs", "triples", corpus).to_pylist()}
    assert all(r["messages"][1]["content"] in questions or any(q in r["messages"][1]["content"] for q in questions)
               for r in rows)


class Canned:
    """A backend that replies to each conversation's last message from a table (else "unknown")."""

    name = model = "canned"

    def __init__(self, replies: dict[str, str]):
        self.replies, self.asked = replies, []

    def generate(self, requests, progress=False):
        self.asked += [r.messages for r in requests]
        return [[Completion(text=next((v for k, v in self.replies.items() if k in r.messages[-1]["content"]), "unknown"))]
                for r in requests]


JUNIPER = Passage("d1", "Juniper Hale", "Juniper Hale was a philosopher born in Dunmore Cross in 1671.")
DUNMORE = Passage("d2", "Dunmore Cross", "Dunmore Cross was founded in 1349 by the merchant Rhoswen Tally.")
PRESS = Passage("d3", "Marrow Press", "Marrow Press is a publishing house based in Juniper Hale's town. It was founded by Ada Penn.")


def test_hops_author_puts_the_phrases_in_place_of_the_names_they_stand_for():
    two = Chain((JUNIPER, DUNMORE), ("Dunmore Cross",), ("title",), "Rhoswen Tally",
                (JUNIPER.text, DUNMORE.text))
    three = Chain((PRESS, JUNIPER, DUNMORE), ("Juniper Hale", "Dunmore Cross"), ("title", "title"), "Rhoswen Tally",
                  ("Marrow Press is a publishing house based in Juniper Hale's town.", JUNIPER.text, DUNMORE.text))
    backend = Canned({"Answer: Rhoswen Tally": "Who founded Dunmore Cross?",
                      "Page: Juniper Hale\nSentence: Juniper Hale was a philosopher born in Dunmore Cross in 1671.\n"
                      "Name: Dunmore Cross": "the birthplace of Juniper Hale",
                      "Name: Juniper Hale": "The person whose town hosts Marrow Press is Juniper Hale."})
    a, b = hops([two, three], backend, max_tokens=32)
    assert a.question == "Who founded the birthplace of Juniper Hale?" and a.skipped is None
    assert b.question == "Who founded the birthplace of the person whose town hosts Marrow Press?" and b.skipped is None
    assert len(backend.asked) == 5 and all(m[0]["role"] == "system" and m[1]["role"] == "user" and
                                           m[2]["role"] == "assistant" for m in backend.asked)  # worked examples as turns

    unlinked = hops([two], Canned({"Answer: Rhoswen Tally": "Who founded the town?",
                                   "Name: Dunmore Cross": "the birthplace of Juniper Hale"}), 32)[0]
    assert unlinked.skipped["part"] == "question" and unlinked.skipped["needs"] == "Dunmore Cross"
    wrong_way = hops([two], Canned({"Answer: Rhoswen Tally": "Who founded Dunmore Cross?",
                                    "Name: Dunmore Cross": "the town founded by a merchant"}), 32)[0]
    assert wrong_way.skipped["part"] == "phrase" and wrong_way.skipped["hop"] == 0
    assert parse_phrase("the founder of Marrow Press was Morwen Tesk.", "Morwen Tesk") == "the founder of Marrow Press"
    assert parse_phrase("the wife of Mira Coll", "Mira Coll") is None  # names what it stands for
    assert parse_phrase("", "X") is None


def test_a_composed_question_is_read_hop_by_hop_and_its_shortcuts_whole():
    finder = ChainFinder([JUNIPER, DUNMORE, PRESS])
    chain = Chain((JUNIPER, DUNMORE), ("Dunmore Cross",), ("title",), "Rhoswen Tally", (JUNIPER.text, DUNMORE.text))
    question = "Who founded the birthplace of Juniper Hale?"
    parts = [(0, "What is the birthplace of Juniper Hale?", "Dunmore Cross"), (1, "Who founded Dunmore Cross?", "Rhoswen Tally")]
    cand = lambda: Candidate(chain, question, "Rhoswen Tally", hops=parts)  # noqa: E731
    hop_reader = {f"[Juniper Hale] {JUNIPER.text}\n\nQuestion: {parts[0][1]}": "Dunmore Cross",
                  f"[Dunmore Cross] {DUNMORE.text}\n\nQuestion: {parts[1][1]}": "Rhoswen Tally"}
    reader = Canned(hop_reader)  # reads each hop; the composed question from one passage: "unknown"
    kept, skipped = verify([cand(), Candidate(chain, "Who founded the town?", "Rhoswen Tally",
                                              skipped={"hop": 1, "part": "question", "needs": "Dunmore Cross"})], finder, reader)
    assert kept.passed, kept.detail
    assert [p["reply"] for p in kept.detail["parts"]] == ["Dunmore Cross", "Rhoswen Tally"]
    assert len(reader.asked) == 4  # two parts, the last passage alone, the retriever's top-k
    assert not skipped.passed and skipped.reason == "question_skips_hop"
    wrong = verify([cand()], finder, Canned({parts[0][1]: "Tarrow", **hop_reader}))[0]
    assert wrong.reason == "not_answerable_with_chain" and wrong.detail["parts"][0]["reply"] == "Tarrow"
    shortcut = verify([cand()], finder, Canned({**hop_reader, f"[Dunmore Cross] {DUNMORE.text}\n\nQuestion: {question}":
                                                "Rhoswen Tally"}))[0]
    assert shortcut.reason == "answerable_from_last_passage"


def test_scripted_hops_run_keeps_composed_questions_and_rejects_unlinked_ones(corpus):
    report = run_questions(QuestionsConfig(dataset="docs", max_chains=60, chunk=16, links="title,name,column,retriever"),
                           BackendConfig(), corpus, backend=ScriptedBackend())
    funnel = report["funnel"]
    finder = ChainFinder(load_passages(corpus, "docs"))
    docs = {p.doc_id: p for p in finder.passages}
    triples = load_table("docs", "triples", corpus).to_pylist()
    assert len(triples) == funnel["kept"] > 0 and funnel["question_skips_hop"] > 0
    for t in triples:
        chain = [docs[d] for d in t["golden_doc_ids"]]
        links = json.loads(t["meta"])["links"]
        for a, b, link in zip(chain, chain[1:], links):
            assert linked(a, b, link["via"], link["name"], finder)
        assert chain[0].title in t["question"]  # the phrases lead back to the first page
        assert not contains(t["question"].split("blank in")[0], links[-1]["name"])  # the last link's name was replaced
        assert contains(chain[-1].text, t["answer"]) and not contains(t["question"], t["answer"])
    skips = [json.loads(v["detail"]) for v in load_table("docs", "verdicts", corpus).to_pylist()
             if v["reason"] == "question_skips_hop"]
    assert {d["part"] for d in skips} >= {"question", "link"}
    for d in skips:
        if d["part"] == "link":  # a retriever's neighbour its sentence does not name: no model asked
            assert d["links"][d["hop"]]["name"] == d["needs"] and "hop_question" not in d
            continue
        part = d["hop_question"] if d["part"] == "question" else d["phrases"][d["hop"]] or ""
        assert not contains(part, d["needs"])


@pytest.mark.parametrize("args,message", [
    (["--dataset", "nowhere"], "no dataset"),
    (["--dataset", "docs", "--hops", "4"], "--hops takes 2 and/or 3"),
    (["--dataset", "docs", "--links", "title,friends"], "--links takes"),
    (["--dataset", "docs", "--max-chains", "0"], "--max-chains must be >= 1"),
    (["--dataset", "docs", "--author", "poet"], "--author"),
    (["--dataset", "docs", "--backend", "nope"], "unknown --backend"),
])
def test_bad_options_fail_in_one_line_before_a_model_loads(corpus, args, message):
    from flows import cli

    res = runner.invoke(cli.app, ["corpus", "questions", *args, "--data-root", str(corpus)], env={"COLUMNS": "200"})
    assert res.exit_code == 2 and message in res.output, res.output
    assert "Traceback" not in res.output


def test_help_names_the_options():
    from flows import cli

    res = runner.invoke(cli.app, ["corpus", "questions", "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0
    for opt in ("--dataset", "--max-chains", "--hops", "--links", "--seed", "--backend", "--base-url", "--top-k"):
        assert opt in res.output


@pytest.mark.slow
def test_embedded_model_commits_checked_questions(corpus, embedded_dir):
    """The defaults (--author hops) with the embedded model: it commits triples whose chains
    link and whose answers are in their last passage only, and rejects the rest with reasons
    (about 5 s a chain here: 24 chains, of which it keeps one; experiments/results/corpus_questions.md)."""
    cfg = QuestionsConfig(dataset="docs", max_chains=24, chunk=8)
    report = run_questions(cfg, BackendConfig(model=str(embedded_dir)), corpus)
    funnel = report["funnel"]
    verdicts = load_table("docs", "verdicts", corpus).to_pylist()
    assert len(verdicts) == funnel["chains"] == 24
    assert all(v["reason"] in REASONS for v in verdicts)
    assert sum(not v["passed"] for v in verdicts) + funnel.get("kept", 0) == 24
    triples = load_table("docs", "triples", corpus).to_pylist()
    assert triples, f"the embedded model committed no triple: {funnel}"
    finder = ChainFinder(load_passages(corpus, "docs"))
    docs = {p.doc_id: p for p in finder.passages}
    for t in triples:
        chain = [docs[d] for d in t["golden_doc_ids"]]
        for a, b, link in zip(chain, chain[1:], json.loads(t["meta"])["links"]):
            assert linked(a, b, link["via"], link["name"], finder)
        assert contains(chain[-1].text, t["answer"]) and not any(contains(p.text, t["answer"]) for p in chain[:-1])
        assert not contains(t["question"], t["answer"])
    details = {v["reason"]: json.loads(v["detail"]) for v in verdicts if not v["passed"]}
    assert "not_answerable_with_chain" in details and details["not_answerable_with_chain"]["parts"]


def test_an_imported_documents_links_field_reaches_the_chain_finder(tmp_path):
    """`corpus import` keeps a document's extra fields under meta.fields; its `links` is the
    builder's links column."""
    import json as _json

    from typer.testing import CliRunner

    from flows.cli import app
    from generators.corpus.chains import load_passages

    docs = [{"title": "Arden Vale", "text": "Arden Vale is a town by the river Oske.", "links": ["Oske"]},
            {"title": "Oske", "text": "The Oske is a river that rises in the Brannoch hills."}]
    (tmp_path / "docs.jsonl").write_text("".join(_json.dumps(d) + "\n" for d in docs))
    res = CliRunner().invoke(app, ["--data-root", str(tmp_path), "corpus", "import", str(tmp_path / "docs.jsonl"),
                                   "--dataset", "linked"])
    assert res.exit_code == 0, res.output
    got = {p.title: p.links for p in load_passages(tmp_path, "linked")}
    assert got == {"Arden Vale": ("Oske",), "Oske": ()}
