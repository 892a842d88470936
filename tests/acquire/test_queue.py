"""The `queue` source, the human workflow, through the command line on a real world corpus
with a tiny random Llama as the policy: `acquire-labels --source queue` writes the chosen
prompts to a queue file and spends nothing; `labels ingest` buys the filled-in file within
the budget, never twice (ingesting again, concurrently, or another file naming a paid
prompt); a malformed file is refused with its line numbers and changes nothing."""

import csv
import shutil
import threading
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from acquire.ingest import MalformedQueue, ingest
from acquire.ledger import Ledger
from acquire.report import label_report
from acquire.sources import QueueSource
from generators.corpus.build import WorldConfig, write
from storage import load_table
from storage.manifest import dataset_dir
from tests.generators.conftest import embedded_tokenizer_dir, tiny_llama_dir  # noqa: F401

OUT = "w_q"


def _cli(*args):
    from flows.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def _export(root, model, **kw):
    opts = {"dataset": "w", "out-dataset": OUT, "strategy": "random", "source": "queue", "budget": 3, "limit": 8, "n": 4,
            "batch-size": 4, "label-p": 0.5, "max-turns": 2, "max-new-tokens": 12, "model": model, "data-root": root, **kw}
    return _cli("acquire-labels", *[x for k, v in opts.items() for x in (f"--{k}", v)])


def _flat(text: str) -> str:
    return " ".join(text.split())  # the console wraps long lines


def _rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _write_csv(path, rows, columns=("prompt_id", "question", "label")):
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


def _state(root):
    ledger = Ledger(dataset_dir(root, OUT) / "_ledger.sqlite")
    labels = sorted(r["id"] for r in load_table(OUT, "labels", root, columns=["id"]).to_pylist())
    return ledger.summary(), ledger.paid(), labels


@pytest.fixture(scope="module")
def exported(tmp_path_factory, tiny_llama_dir):  # noqa: F811
    """A world, its truth, and the queue files one export wrote (budget 3)."""
    root = tmp_path_factory.mktemp("queue")
    write(WorldConfig(seed=3, entities=120), root, "w")
    res = _export(root, tiny_llama_dir)
    assert res.exit_code == 0, res.output
    files = sorted((dataset_dir(root, OUT) / "_queue").glob("*.csv"))
    truth = {t["triple_id"]: t for t in load_table("w", "triples", root).to_pylist()}
    return root, files, truth, res.output


def test_export_queues_the_chosen_prompts_within_the_budget_and_spends_nothing(exported, tiny_llama_dir):  # noqa: F811
    root, files, truth, output = exported
    rows = [r for f in files for r in _rows(f)]
    assert files and all(f"queued for labelling: {f}" in _flat(output) for f in files)
    assert list(rows[0]) == ["prompt_id", "question", "label"] and all(r["label"] == "" for r in rows)
    assert all(r["question"] == truth[r["prompt_id"]]["question"] for r in rows)
    assert len(rows) == len({r["prompt_id"] for r in rows}) == 3  # the budget holds three labels
    ledger = Ledger(dataset_dir(root, OUT) / "_ledger.sqlite")
    assert set(ledger.queued()) == {r["prompt_id"] for r in rows}
    s = ledger.summary()
    assert s["spent"] == 0 and s["labels"] == 0 and s["reserved"] == 0 and s["queued"] == 3 and s["held"] == 3
    sources = Counter(r["source"] for r in load_table(OUT, "labels", root).to_pylist())
    assert sources == Counter({"pseudo": 8})  # pseudo-labels only: nothing bought yet
    again = _export(root, tiny_llama_dir)  # a rerun: the batches are done, nothing queued twice
    assert again.exit_code == 0 and "2 batches already done" in _flat(again.output), again.output
    assert sorted((dataset_dir(root, OUT) / "_queue").glob("*")) == files


def test_a_malformed_file_names_its_lines_and_changes_nothing(exported, tmp_path):
    root, files, truth, _ = exported
    ids = [r["prompt_id"] for f in files for r in _rows(f)]
    before = _state(root)
    bad = _write_csv(tmp_path / "bad.csv", [
        {"prompt_id": ids[0], "label": truth[ids[0]]["answer"]},
        {"prompt_id": "no-such-prompt", "label": "x"},                      # line 3
        {"prompt_id": ids[1], "label": "   "},                              # line 4
        {"prompt_id": ids[0], "label": "something else"},                   # line 5
        {"prompt_id": ids[2], "label": truth[ids[2]]["answer"]}])
    res = _cli("labels", "ingest", "--dataset", OUT, "--file", bad, "--data-root", root)
    out = _flat(res.output)
    assert res.exit_code == 2, res.output
    assert "line 3: unknown prompt id 'no-such-prompt'" in out and f"line 4: empty label for prompt '{ids[1]}'" in out
    assert f"line 5: prompt '{ids[0]}' has label 'something else', but {bad}: line 2 gave it" in out
    assert "line 6" not in out and _state(root) == before
    short = tmp_path / "short.csv"
    short.write_text(f"prompt_id,question,label\n{ids[0]},q,a\n{ids[1]},q\n", encoding="utf-8")
    res = _cli("labels", "ingest", "--dataset", OUT, "--file", short, "--data-root", root)
    assert res.exit_code == 2 and "line 3: 2 fields, the header has 3" in _flat(res.output)
    nolabel = tmp_path / "nolabel.parquet"
    pq.write_table(pa.table({"prompt_id": ids}), nolabel)
    with pytest.raises(MalformedQueue, match="missing column"):
        ingest(root, OUT, [nolabel])
    with pytest.raises(ValueError, match=r"\.csv or \.parquet"):
        ingest(root, OUT, [shutil.copy(bad, tmp_path / "bad.txt")])
    assert _state(root) == before


def test_ingest_buys_within_the_budget_and_never_twice(exported, tmp_path):
    root, files, truth, _ = exported
    ledger = Ledger(dataset_dir(root, OUT) / "_ledger.sqlite")
    queued = [r for f in files for r in _rows(f)]
    filled = tmp_path / "filled.csv"
    _write_csv(filled, [{**r, "label": truth[r["prompt_id"]]["answer"]} for r in queued])
    ledger.set_budget(2)  # lowered after the export: one row is past the budget
    res = _cli("labels", "ingest", "--dataset", OUT, "--file", filled, "--data-root", root)
    out = _flat(res.output)
    assert res.exit_code == 0 and "3 labels read: 2 bought, 0 already paid" in out and "1 over the budget" in out, out
    assert f"not ingested (1): {queued[2]['prompt_id']}" in out
    first = _state(root)
    assert first[0]["spent"] == 2 and sorted(first[1]) == sorted(r["prompt_id"] for r in queued[:2])

    res = _cli("labels", "ingest", "--dataset", OUT, "--file", filled, "--data-root", root)  # the same file again
    assert res.exit_code == 0 and "0 bought, 2 already paid" in _flat(res.output), res.output
    assert _state(root) == first

    ledger.set_budget(3)
    pids = [r["prompt_id"] for r in queued]
    other = _write_csv(tmp_path / "other.csv", [{"prompt_id": pids[0], "label": "a changed mind"}])
    part = tmp_path / "part.parquet"  # Parquet too; repeated --file; a paid prompt with another label keeps its own
    pq.write_table(pa.table({"prompt_id": pids[1:], "label": [truth[p]["answer"] for p in pids[1:]]}), part)
    res = _cli("labels", "ingest", "--dataset", OUT, "--file", other, "--file", part, "--data-root", root)
    out = _flat(res.output)
    assert res.exit_code == 0 and "3 labels read: 1 bought, 2 already paid (1 of them with another label" in out, out
    labels = [r for r in load_table(OUT, "labels", root).to_pylist() if r["source"] != "pseudo"]
    assert Counter(r["prompt_id"] for r in labels) == Counter(pids)  # each bought once
    assert all(r["source"] == "queue" and r["strategy"] == "random" and r["cost"] == 1.0 for r in labels)
    assert {r["prompt_id"]: r["label"] for r in labels} == ledger.paid() == {p: truth[p]["answer"] for p in pids}
    s = ledger.summary()
    assert s["spent"] == s["budget"] == 3 and s["queued"] == 0 and s["held"] == 0 and s["reserved"] == 0
    report = label_report(root, OUT)
    assert report["sources"]["queue"]["bought"] == 3 and report["sources"]["queue"]["cost"] == 3
    res = _cli("labels", "report", "--dataset", OUT, "--data-root", root)
    assert res.exit_code == 0 and "by source" in res.output and "queue" in res.output


def test_concurrent_ingests_of_one_file_never_overspend_or_pay_twice(tmp_path):
    ledger = Ledger(dataset_dir(tmp_path, "d") / "_ledger.sqlite", budget=7)
    pids = [f"p{i:02d}" for i in range(12)]
    source = QueueSource(dataset_dir(tmp_path, "d") / "_queue", {p: f"question {p}?" for p in pids}, ledger,
                         strategy="care", fmt="parquet")
    assert source.buy(pids) == {} and len(source.files) == 1
    exported = pq.read_table(source.files[0]).to_pylist()
    assert [r["prompt_id"] for r in exported] == pids and all(r["label"] is None for r in exported)
    assert source.buy(pids[:3]) == {} and len(source.files) == 1  # queued before: no second file
    filled = tmp_path / "filled.parquet"
    pq.write_table(pa.table({"prompt_id": pids, "label": [f"answer {p}" for p in pids]}), filled)
    barrier, results, errors = threading.Barrier(4), [], []

    def run():
        barrier.wait()
        try:
            results.append(ingest(tmp_path, "d", [filled]))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and sum(r["bought"] for r in results) == 7
    shard = load_table("d", "labels", tmp_path).to_pylist()
    assert Counter(r["prompt_id"] for r in shard) == Counter(ledger.paid().keys()) and len(shard) == 7
    assert all(r["label"] == f"answer {r['prompt_id']}" and r["strategy"] == "care" for r in shard)
    assert ledger.summary()["spent"] == 7 and ledger.summary()["reserved"] == 0
