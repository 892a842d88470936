"""The `llm` source: an annotator model behind a real OpenAI-compatible HTTP server on
127.0.0.1 (generators/llm/server.py), reached by the `openai` backend. A deterministic
annotator (a small backend here: it answers every other question it is asked, the rest get
a reply without `<answer>`) covers both paths: a parsed answer is bought at --label-cost and
recorded in the labels shard and the ledger, a reply without one is released and costs
nothing. The tiny random Llama as annotator, and the whole flow through the command line."""

import json
import threading
from collections import Counter

import pytest
from typer.testing import CliRunner

from acquire.buy import buy
from acquire.ledger import Ledger
from acquire.report import label_report
from acquire.session import AcquireConfig, Prompted
from acquire.sources import SOURCES, LLMSource, make_source
from generators.corpus.build import WorldConfig, write
from generators.llm.base import Completion
from generators.llm.openai_backend import OpenAIBackend
from storage import load_table
from storage.manifest import dataset_dir
from storage.resumable import RunWriter
from tests.generators.conftest import embedded_tokenizer_dir, tiny_llama_dir  # noqa: F401
from tests.generators.servers import UvicornThread

QUESTIONS = {f"p{i}": f"What is the capital of country number {i}?" for i in range(6)}
TRUTH = {q: f"City {i}" for i, q in enumerate(QUESTIONS.values())}


class Annotator:
    """Answers every other question, in the order it first sees them, with
    `<answer>truth</answer>` and the others with prose without an answer (the same reply
    when asked again); a question containing "explode" fails."""

    name, model = "annotator", "annotator"

    def __init__(self, truth: dict[str, str]) -> None:
        self.truth, self.seen, self.answered, self.refused = truth, [], {}, set()
        self.lock = threading.Lock()

    def generate(self, requests, progress=False):
        out = []
        for r in requests:
            q = r.messages[-1]["content"]
            if "explode" in q:
                raise ValueError("the annotator cannot read this question")
            with self.lock:
                self.seen.append(r)
                if q not in self.answered and q not in self.refused:
                    if (len(self.answered) + len(self.refused)) % 2 == 0:
                        self.answered[q] = self.truth.get(q, "unknown")
                    else:
                        self.refused.add(q)
            text = ("I would rather not say." if q in self.refused
                    else f"<think>I know this.</think> <answer>{self.answered[q]}</answer>")
            out.append([Completion(text=text, token_ids=list(range(len(text.split()))), prompt_tokens=11,
                                   completion_tokens=len(text.split()))])
        return out

    def close(self) -> None:
        pass


@pytest.fixture
def annotator():
    from generators.llm.server import create_app

    backend = Annotator(TRUTH)
    with UvicornThread(create_app(backend, model_name="annotator", batch_wait=0)) as srv:
        yield backend, srv.url


def _ledger(tmp_path, budget):
    return Ledger(dataset_dir(tmp_path, "d") / "_ledger.sqlite", budget=budget)


def test_answers_are_bought_at_their_cost_and_replies_without_one_are_released(tmp_path, annotator):
    backend, url = annotator
    ledger = _ledger(tmp_path, 10)
    source = LLMSource(OpenAIBackend(url, "annotator", backoff=0.01), QUESTIONS, cost=0.5, max_tokens=24)
    counts = buy(ledger, source, list(QUESTIONS), RunWriter(tmp_path, "r"), "d", "care")
    asked = [r.messages[-1]["content"] for r in backend.seen]
    assert Counter(asked) == Counter(QUESTIONS.values())  # each question once
    assert all(r.temperature == 0 and r.max_tokens == 24 and "<answer>" in r.messages[0]["content"] for r in backend.seen)
    by_q = {q: p for p, q in QUESTIONS.items()}
    answered = {by_q[q]: a for q, a in backend.answered.items()}
    assert answered and backend.refused  # both paths ran
    assert counts["bought"] == len(answered) and counts["unlabelled"] == len(backend.refused)
    rows = load_table("d", "labels", tmp_path).to_pylist()
    assert {r["prompt_id"]: r["label"] for r in rows} == answered == ledger.paid()
    assert all(r["source"] == "llm" and r["cost"] == 0.5 and r["strategy"] == "care" for r in rows)
    meta = [json.loads(r["meta"]) for r in rows]
    assert all(m["model"] == "annotator" and m["prompt_tokens"] == 11 and m["completion_tokens"] > 0 for m in meta)
    s = ledger.summary()
    assert s["spent"] == 0.5 * len(answered) and s["reserved"] == 0
    released = by_q[next(iter(backend.refused))]
    assert ledger.reserve(released, 0.5).status == "reserved"  # nothing held for a released prompt
    assert source.summary() == {"name": "llm", "answered": len(answered), "no_answer": len(backend.refused), "failed": 0}


def test_the_annotator_is_asked_only_what_the_budget_pays_for_and_a_failing_request_is_left_out(tmp_path, annotator):
    backend, url = annotator
    ledger = _ledger(tmp_path, 1.0)
    questions = {**QUESTIONS, "bad": "Please explode now?"}
    source = LLMSource(OpenAIBackend(url, "annotator", max_retries=0, backoff=0.01), questions, cost=0.5)
    counts = buy(ledger, source, ["bad", "p0", "p1", "p2"], RunWriter(tmp_path, "r"), "d", "random")
    assert counts["over_budget"] == 2  # "bad" and p0 reserved, within the budget
    assert {r.messages[-1]["content"] for r in backend.seen} == {QUESTIONS["p0"]}  # "bad" failed, p1 and p2 never asked
    assert source.failed == 1 and counts["unlabelled"] == 1 and counts["bought"] == 1
    assert ledger.paid() == {"p0": TRUTH[QUESTIONS["p0"]]} and ledger.summary()["spent"] == 0.5
    with pytest.raises(Exception, match="cannot read"):  # every request failed: an error, nothing spent
        buy(ledger, source, ["bad"], RunWriter(tmp_path, "r"), "d", "random")
    assert ledger.summary()["reserved"] == 0 and ledger.summary()["spent"] == 0.5


def test_a_tiny_random_annotator_behind_the_server_spends_only_on_parsed_answers(tmp_path, tiny_llama_dir):  # noqa: F811
    from generators.llm.server import create_app
    from generators.llm.toolcalls import extract_answer
    from generators.llm.transformers_backend import TransformersBackend

    tiny = TransformersBackend(tiny_llama_dir, batch_size=4)
    try:
        with UvicornThread(create_app(tiny, model_name="tiny")) as srv:
            cfg = AcquireConfig(dataset="w", source="llm", annotator_url=srv.url, annotator_max_tokens=8, label_cost=2)
            cfg.check()
            ledger = _ledger(tmp_path, 100)
            prompts = [Prompted(p, q, "", []) for p, q in list(QUESTIONS.items())[:4]]
            source = make_source(cfg, tmp_path, prompts, ledger)
            assert isinstance(source, SOURCES["llm"]) and source.backend.model == "tiny"
            counts = buy(ledger, source, list(QUESTIONS)[:4], RunWriter(tmp_path, "r"), "d", "random")
            source.close()
    finally:
        tiny.close()
    assert counts["bought"] + counts["unlabelled"] == 4 == source.answered + source.no_answer
    paid = ledger.paid()
    assert len(paid) == counts["bought"] and ledger.summary()["spent"] == 2 * counts["bought"]
    assert ledger.summary()["reserved"] == 0 and all(extract_answer(f"<answer>{a}</answer>")[0] == a for a in paid.values())


def test_the_flow_buys_from_the_annotator_through_the_command_line(tmp_path, tiny_llama_dir):  # noqa: F811
    from flows.cli import app
    from generators.llm.server import create_app

    write(WorldConfig(seed=3, entities=120), tmp_path, "w")
    triples = load_table("w", "triples", tmp_path).to_pylist()
    backend = Annotator({t["question"]: t["answer"] for t in triples})
    with UvicornThread(create_app(backend, model_name="annotator", batch_wait=0)) as srv:
        args = ["acquire-labels", "--dataset", "w", "--out-dataset", "w_llm", "--strategy", "random", "--source", "llm",
                "--annotator-url", srv.url, "--label-cost", "0.5", "--budget", "1.5", "--limit", "8", "--n", "4",
                "--batch-size", "4", "--label-p", "0.5", "--max-turns", "2", "--max-new-tokens", "12", "--model",
                str(tiny_llama_dir), "--data-root", str(tmp_path)]
        res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    question = {t["triple_id"]: t["question"] for t in triples}
    truth = {t["triple_id"]: t["answer"] for t in triples}
    bought = [r for r in load_table("w_llm", "labels", tmp_path).to_pylist() if r["source"] == "llm"]
    assert {(question[r["prompt_id"]], r["label"]) for r in bought} == set(backend.answered.items())
    assert len(bought) == len({r["prompt_id"] for r in bought}) == len(backend.answered)
    assert all(r["label"] == truth[r["prompt_id"]] and r["cost"] == 0.5 for r in bought)
    ledger = Ledger(dataset_dir(tmp_path, "w_llm") / "_ledger.sqlite")
    s = ledger.summary()
    assert s["spent"] == 0.5 * len(bought) <= 1.5 and s["reserved"] == 0 and len(ledger.paid()) == len(bought)
    assert backend.refused and "no answer" in res.output  # the released path ran and is shown
    report = label_report(tmp_path, "w_llm")
    assert report["sources"]["llm"]["bought"] == len(bought) and report["sources"]["llm"]["cost"] == s["spent"]


@pytest.mark.parametrize("args, message", [
    (["--source", "human"], "--source must be one of column, queue, llm"),
    (["--source", "queue", "--queue-format", "xlsx"], "--queue-format must be one of csv, parquet"),
    (["--source", "llm", "--annotator-backend", "carrier-pigeon"], "unknown --annotator-backend 'carrier-pigeon'"),
    (["--source", "llm"], "needs --annotator-url"),
    (["--label-cost", "-1"], "--label-cost >= 0")])
def test_bad_source_options_are_refused_before_the_flow_starts(tmp_path, args, message):
    from flows.cli import app

    res = CliRunner().invoke(app, ["acquire-labels", "--dataset", "w", *args, "--data-root", str(tmp_path)])
    assert res.exit_code == 2 and message in " ".join(res.output.split()), res.output
    assert not any(tmp_path.iterdir())  # nothing created
