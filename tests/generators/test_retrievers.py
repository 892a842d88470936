"""The retrievers the simulator searches with (generators/tools/retriever.py): options checked in
one line, a real `forgeplay serve-retriever` on 127.0.0.1 answering Search-R1's API with the
in-process index's top-k, and the simulator through it answering as in process."""

import base64
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from generators.corpus.build import WorldConfig, write
from generators.synth.synthesize import SynthConfig
from generators.tools.retriever import Corpus, RetrieverError, build, check_spec, top_k
from generators.tools.sim_call import SimCall
from generators.tools.simulator import Simulator
from storage import load_table
from validators.validator import ValidateConfig
from validators.run import check_inputs

REPO = Path(__file__).resolve().parents[2]


def serve(root, dataset: str = "w", port: int = 0, retriever: str = "bm25") -> tuple[subprocess.Popen, str]:
    """`forgeplay serve-retriever` in its own process; (process, URL) once it listens."""
    proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "--data-root", str(root), "serve-retriever",
                             "--dataset", dataset, "--retriever", retriever, "--port", str(port)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if " at http://" in line:
            return proc, line.rsplit(" at ", 1)[1].strip()
    raise AssertionError(f"serve-retriever did not start: {proc.stderr.read()[-2000:]}")


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("retrievers")
    write(WorldConfig(seed=3, entities=150), root, "w")
    return root


@pytest.fixture(scope="module")
def server(world):
    proc, url = serve(world)
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def test_a_retriever_option_that_names_nothing_is_one_line_before_anything_loads(world):
    for bad in ("bm42", "", "http://nowhere", "faiss"):
        with pytest.raises(ValueError, match="--retriever") as e:
            check_spec(bad)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="--retriever"):
        SynthConfig(dataset="w", retriever="bm42")
    assert check_spec("http://127.0.0.1:9/retrieve") == "http://127.0.0.1:9/retrieve"
    with pytest.raises(RetrieverError, match="did not answer"):  # nothing listens on port 9
        check_inputs(ValidateConfig(dataset="w", retriever="http://127.0.0.1:9/retrieve"), None, world)


def test_serve_retriever_answers_search_r1_requests_with_the_in_process_top_k(world, server):
    docs = load_table("w", "documents", world).to_pylist()
    questions = [t["question"] for t in load_table("w", "triples", world).to_pylist()[:12]]
    corpus = Corpus.of(docs)
    local = build("bm25", corpus)
    want = top_k(local, questions, 5)
    got = post(server, {"queries": questions, "topk": 5, "return_scores": True})["result"]
    assert [[d["document"]["id"] for d in row] for row in got] == [[corpus.doc_ids[i] for i, _ in row] for row in want]
    assert [[d["score"] for d in row] for row in got] == [[s for _, s in row] for row in want]
    first = got[0][0]["document"]
    i = corpus.doc_ids.index(first["id"])
    assert first["contents"] == f"{corpus.titles[i]}\n{corpus.texts[i]}"  # Search-R1's passage: title line, text
    plain = post(server, {"queries": questions[:2], "topk": 3})["result"]  # without scores: the documents alone
    assert [[d["id"] for d in row] for row in plain] == [[d["document"]["id"] for d in row[:3]] for row in got[:2]]
    info = json.loads(urllib.request.urlopen(server.rsplit("/", 1)[0] + "/info", timeout=30).read())
    assert info["fingerprint"] == local.fingerprint and info["documents"] == len(docs)


def test_the_client_reads_the_columns_answer_as_the_search_r1_one(world, server):
    """`"columns": true` (serve-retriever's own): each query's ids and their float32 scores in
    base64, the same ranking and scores as Search-R1's objects; the client reads either into
    the same scores, and a malformed one is one line."""
    docs = load_table("w", "documents", world).to_pylist()
    questions = [t["question"] for t in load_table("w", "triples", world).to_pylist()[:12]]
    objects = post(server, {"queries": questions, "topk": 100, "return_scores": True, "return_contents": False})
    columns = post(server, {"queries": questions, "topk": 100, "return_scores": True, "columns": True})
    assert [row["ids"] for row in columns["result"]] == [[d["document"]["id"] for d in row] for row in objects["result"]]
    assert [f32(row["scores_f32"]).tolist() for row in columns["result"]] == [
        [d["score"] for d in row] for row in objects["result"]]
    assert "contents" not in json.dumps(columns)
    remote = build(server, Corpus.of(docs))
    for obj, col in zip(objects["result"], columns["result"]):
        d, s = remote._documents(obj)
        got = remote._columns(col)
        assert len(d) and got[0].tolist() == d.tolist() and got[1].tolist() == s.tolist()
    first, second = columns["result"][0]["ids"][:2]
    odd = {"ids": [first, "not-a-doc", first, second], "scores_f32": b64([2.0, 1.5, 7.0, 3.0])}
    assert [x.tolist() for x in remote._columns(odd)] == [[remote.index_of[first], remote.index_of[second]], [2.0, 3.0]]
    for bad, why in [({"ids": ["a"], "scores_f32": b64([])}, "differ in length"),
                     ({"ids": ["a"], "scores_f32": "not base64!"}, "not base64")]:
        with pytest.raises(RetrieverError, match=why):
            remote._columns(bad)
    local = build("bm25", Corpus.of(docs))
    for a, b in zip(remote.score_many(questions), local.score_many(questions)):  # the top 100 of all it scores
        keep = np.isin(b.docs, a.docs)
        assert len(a.docs) == min(100, len(b.docs)) and (a.docs == b.docs[keep]).all() and (a.scores == b.scores[keep]).all()


def f32(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f4")


def b64(values: list[float]) -> str:
    return base64.b64encode(np.array(values, dtype="<f4").tobytes()).decode()


def test_the_simulator_through_the_server_answers_as_in_process(world, server):
    docs = load_table("w", "documents", world).to_pylist()
    questions = [t["question"] for t in load_table("w", "triples", world).to_pylist()[:20]]
    here, there = Simulator(docs, seed=5), Simulator(docs, seed=5, retriever=server)
    assert there.retriever == {"retriever": server, "fingerprint": here.index.fingerprint}
    for q in questions:  # the general search sees every document: the server's top 100 hold its answer
        assert there.call("general_search", {"query": q}) == here.call("general_search", {"query": q})
    call = SimCall("general_search", {"query": questions[0]})
    assert len(there.retrieved(call)) == 16
    assert here.retrieved(call) is None  # bm25 records nothing: its rows stay as they were


def test_a_corpus_keeps_the_least_document_of_an_id_whatever_the_order():
    import itertools

    docs = [{"doc_id": "b", "title": "z", "text": "1"}, {"doc_id": 3, "title": "y", "text": "2"},
            {"doc_id": "b", "title": "a", "text": "9"}, {"doc_id": "b", "title": "a", "text": "3"},
            {"doc_id": "3", "title": None, "text": "x"}]
    for order in itertools.permutations(docs):
        c = Corpus.of(list(order))
        assert c.doc_ids == ["3", "b"]  # ids as text, in order; of equal ids the least (title, text)
        assert c.docs[0] is docs[4] and c.docs[1] is docs[3]
        assert c.titles == ["", "a"] and c.texts == ["x", "3"]
