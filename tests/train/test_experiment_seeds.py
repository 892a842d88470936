"""experiments/seeds.py: several training seeds' runs of experiments/sft_tool_use.py as one table,
their mean and spread, the goal per run, and seed-by-seed differences against another command."""

import json

import pytest

from experiments.seeds import load, main, meets, paired, summary

SIZES = {"bridge/2": 8, "bridge/3": 8, "bridge/4": 6, "comparison/2": 2, "comparison/4": 6,
         "compositional/2": 4, "compositional/3": 5, "inference/2": 9}


def run_file(path, right: dict, seed=None):
    """A --json file as the experiment writes it: `right` answers per kind after SFT, none before."""
    after = {k: {"rollouts": n, "em": right.get(k, 0) / n} for k, n in SIZES.items()}
    before = {k: {"rollouts": n, "em": 0.0} for k, n in SIZES.items()}
    data = {"before": {"em": 0.0, "by_qtype": before},
            "after": {"em": sum(right.values()) / sum(SIZES.values()), "by_qtype": after}}
    if seed is not None:
        data["args"] = {"train_seed": seed}
    path.write_text(json.dumps(data))
    return path


def test_a_run_counts_right_answers_per_question_type_over_its_hop_counts(tmp_path):
    r = load(run_file(tmp_path / "a.json", {"bridge/2": 3, "bridge/4": 1, "comparison/4": 2, "inference/2": 6}, 7))
    assert r["bridge"] == (4, 22) and r["comparison"] == (2, 8) and r["compositional"] == (0, 9)
    assert r["inference"] == (6, 9) and r["em"] == pytest.approx(12 / 48) and r["args"]["train_seed"] == 7
    assert not meets(r, 0.25)  # no arithmetic question right
    r = load(run_file(tmp_path / "b.json", {"bridge/2": 3, "comparison/4": 2, "compositional/3": 1, "inference/2": 6}))
    assert meets(r, 0.25) and not meets(r, 0.3)


def test_the_summary_and_the_differences_seed_by_seed(tmp_path):
    runs = [load(run_file(tmp_path / f"r{i}.json", {"bridge/2": k, "comparison/2": 1, "compositional/2": 1}))
            for i, k in enumerate((10, 4))]
    base = [load(run_file(tmp_path / f"b{i}.json", {"bridge/2": k, "comparison/2": 1, "compositional/2": 1}))
            for i, k in enumerate((8, 6))]
    s = summary(runs, 0.25)
    assert s["mean"] == pytest.approx(9 / 48) and s["min"] == pytest.approx(6 / 48) and s["goal_met"] == 1
    d = paired(runs, base)
    assert d["diffs"] == pytest.approx([2 / 48, -2 / 48]) and d["mean"] == pytest.approx(0.0)
    assert (d["up"], d["same"], d["down"]) == (1, 0, 1)
    with pytest.raises(ValueError, match="as many runs"):
        paired(runs, base[:1])


def test_the_command_prints_the_table_and_refuses_a_file_that_is_no_run(tmp_path, capsys):
    a = run_file(tmp_path / "a.json", {"bridge/2": 8, "comparison/2": 2, "compositional/2": 2}, 3)
    b = run_file(tmp_path / "b.json", {"bridge/2": 2, "comparison/2": 1, "compositional/2": 1}, 3)
    assert main([str(a), "--against", str(b)]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith(("a ", "b "))}
    assert rows["a"].split()[1:3] == ["3", "0.250"] and rows["a"].endswith("met")  # seed, exact match, goal
    assert rows["b"].split()[2] == "0.083" and rows["b"].endswith("-")
    assert "+0.167" in out and "over 1 runs" in out
    (tmp_path / "bad.json").write_text('{"after": {}}')
    assert main([str(a), str(tmp_path / "bad.json")]) == 2
    assert "bad.json: not a --json file of experiments/sft_tool_use.py" in capsys.readouterr().err
