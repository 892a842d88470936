"""Dataset cards (storage/card.py) over real small datasets (the loop run of
tests/reports/conftest.py): the front matter parses as YAML, each config's globs match exactly
the committed shards of its kind (not an uncommitted leftover, a temp file or a quarantined
shard), sizes and lineage come from the manifest and run records, and `datasets.load_dataset`
loads the folder offline with the card's configs and features."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from storage import manifest
from storage.card import write_card
from tests.reports.conftest import loop_run  # noqa: F401  (the datasets)


def front_matter(path: Path) -> dict:
    text = path.read_text()
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n", 2)[1])


def globbed(folder: Path, config: dict) -> set[str]:
    [files] = config["data_files"]
    assert files["split"] == "train"
    return {str(p.relative_to(folder)) for pattern in files["path"] for p in folder.glob(pattern)}


def committed(folder: Path, kind: str, bad: set[str] = frozenset()) -> set[str]:
    return {e.path for e in manifest.read(folder) if e.kind == kind and e.path not in bad}


def test_card_of_the_accepted_and_the_world_dataset(loop_run):  # noqa: F811
    root, record = loop_run
    accepted = record["datasets"]["accepted"]
    meta = front_matter(write_card(root, accepted))
    folder = root / accepted
    assert meta["license"] == "other" and meta["source_datasets"] == ["demo"]
    [config] = meta["configs"]
    assert config["config_name"] == "trajectories" and config["default"] is True
    assert globbed(folder, config) == committed(folder, "trajectories") != set()
    info = meta["dataset_info"]
    rows = sum(e.rows for e in manifest.read(folder))
    assert info["splits"] == [{"name": "train", "num_bytes": info["dataset_size"], "num_examples": rows}]
    assert info["download_size"] == sum(e.bytes for e in manifest.read(folder))
    assert [f["name"] for f in info["features"]][:5] == ["id", "run_id", "created_at", "schema_version", "lineage"]
    assert f"| trajectories | {record['stages']['validate']['summary']['run_id']} | {rows} | demo |" in \
           (folder / "README.md").read_text()

    meta = front_matter(write_card(root, "demo"))
    kinds = {c["config_name"]: c for c in meta["configs"]}
    assert set(kinds) == {"documents", "triples", "tools", "trajectories", "verdicts"}
    for kind, config in kinds.items():
        assert globbed(root / "demo", config) == committed(root / "demo", kind), kind
    assert "source_datasets" not in meta  # made from its own corpus


def test_globs_leave_out_leftovers_temp_files_and_quarantined_shards(loop_run, tmp_path):  # noqa: F811
    root, _ = loop_run
    folder = tmp_path / "demo"
    shutil.copytree(root / "demo", folder)
    first = sorted(committed(folder, "trajectories"))[0]
    run_dir = (folder / first).parent
    shutil.copy(folder / first, run_dir / "part-09999.parquet")  # a killed writer's uncommitted shard
    (run_dir / ".part-abc.parquet.tmp").write_bytes(b"partial")
    [triples] = committed(folder, "triples")
    (folder / "_quarantine.json").write_text(json.dumps([triples]))
    meta = front_matter(write_card(tmp_path, "demo", license="cc-by-4.0"))
    kinds = {c["config_name"]: c for c in meta["configs"]}
    assert meta["license"] == "cc-by-4.0" and "triples" not in kinds
    assert globbed(folder, kinds["trajectories"]) == committed(folder, "trajectories")
    assert globbed(folder, kinds["documents"]) == committed(folder, "documents")
    assert f"`{triples}`" in (folder / "README.md").read_text()


def test_load_dataset_reads_the_folder_offline(loop_run, tmp_path, monkeypatch):  # noqa: F811
    datasets = pytest.importorskip("datasets")
    from storage import load_table

    root, record = loop_run
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    accepted = record["datasets"]["accepted"]
    write_card(root, accepted)
    rows = datasets.load_dataset(str(root / accepted), split="train", cache_dir=str(tmp_path))
    table = load_table(accepted, "trajectories", root)
    assert rows.num_rows == table.num_rows and sorted(rows["id"]) == sorted(table.column("id").to_pylist())
    write_card(root, "demo")
    verdicts = datasets.load_dataset(str(root / "demo"), "verdicts", split="train", cache_dir=str(tmp_path))
    assert verdicts.num_rows == load_table("demo", "verdicts", root).num_rows
    assert verdicts.features == datasets.Features.from_arrow_schema(load_table("demo", "verdicts", root).schema)


def test_cli_writes_the_card_and_refuses_an_unknown_dataset(loop_run):  # noqa: F811
    from flows import cli_report

    root, _ = loop_run
    app = typer.Typer()
    cli_report.register(app)
    res = CliRunner().invoke(app, ["card", "demo_selfplay", "--data-root", str(root)])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == str(root / "demo_selfplay" / "README.md")
    assert {c["config_name"] for c in front_matter(root / "demo_selfplay" / "README.md")["configs"]} == \
           {"tasks", "rollouts"}
    res = CliRunner().invoke(app, ["card", "nope", "--data-root", str(root)])
    assert res.exit_code == 2
    assert res.output.strip().startswith("error: dataset 'nope' has no committed shards") and "demo_valid" in res.output
