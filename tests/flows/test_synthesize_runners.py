"""The `synthesize` flow fanned out (flows/runners.py): its chunks on a local Dask cluster of
two workers, each committing its own shard, give the same trajectory rows and ids as one
after another in the flow; the model is an OpenAI-shaped HTTP server on 127.0.0.1 (the
expensive boundary), so the backend object travels to the workers and their usage is
counted in the summary. A model loaded in the flow cannot travel: that fails before any
work with one line."""

import pytest

from flows.runners import RunnerConfig
from flows.synthesize import run
from generators.corpus.build import WorldConfig, write
from generators.llm.registry import BackendConfig
from generators.synth.synthesize import SynthConfig
from storage import Catalog, load_table
from storage.schema import SHARED_COLUMNS
from tests.generators.servers import FlakyServer


def rows(root, dataset: str) -> list[dict]:
    table = load_table(dataset, "trajectories", root)
    return sorted(({k: v for k, v in r.items() if k not in SHARED_COLUMNS or k == "id"} for r in table.to_pylist()),
                  key=lambda r: r["traj_id"])


def test_chunks_on_a_local_dask_cluster_commit_the_same_rows(tmp_path):
    for ds in ("seq", "dask"):
        write(WorldConfig(seed=3, entities=200), tmp_path, ds)
    with FlakyServer(lambda nonce, attempt: "ok") as srv:
        bcfg = BackendConfig(backend="openai", base_url=srv.url, model="m", max_retries=0)
        out = {}
        for ds, runner, workers in (("seq", None, 1), ("dask", RunnerConfig(task_runner="dask"), 2)):
            cfg = SynthConfig(dataset=ds, n=24, chunk=4, variants_per_tool=1, max_think_tokens=8, run_id="r")
            out[ds] = run(cfg, bcfg, tmp_path, progress=False, runner=runner, workers=workers)
    seq, dask = out["seq"], out["dask"]
    assert seq["written"] == dask["written"] == 24
    assert dask["usage"]["requests"] == seq["usage"]["requests"] > 24  # every text slot asked the server
    assert dask["case"] == seq["case"] and dask["text_sources"] == seq["text_sources"]
    assert rows(tmp_path, "dask") == rows(tmp_path, "seq")
    with Catalog(tmp_path) as cat:  # six chunks, six shards, each committed by a worker
        assert cat.scalar("SELECT count(DISTINCT filename) FROM read_parquet(?, filename=true)",
                          [str(tmp_path / "dask" / "trajectories" / "*" / "*.parquet")]) == 6


def test_a_model_in_the_flow_cannot_fan_out(tmp_path):
    with pytest.raises(ValueError, match="the transformers backend's model cannot go along: use --texts template"):
        run(SynthConfig(dataset="w", n=2), BackendConfig(), tmp_path, progress=False,
            runner=RunnerConfig(task_runner="dask"), workers=2)
    with pytest.raises(ValueError, match="--workers 2"):
        run(SynthConfig(dataset="w", n=2), BackendConfig(), tmp_path, progress=False, workers=2)
