"""`forgeplay models prepare|list` and `forgeplay generate` (flows/cli_models.py).

    .venv/bin/python -m pytest tests/generators/test_cli_models.py -q

Runs the commands through typer's CliRunner on an app with only these commands
registered; the fast generate test uses the tiny random-weight model, the slow one the
real embedded model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from flows import cli_models

runner = CliRunner()


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    a = typer.Typer()
    cli_models.register(a)
    return a


def write_prompts(path: Path, questions: list[str]) -> Path:
    path.write_text("".join(json.dumps({"id": i, "messages": [{"role": "user", "content": q}]}) + "\n"
                            for i, q in enumerate(questions)))
    return path


@pytest.mark.parametrize("args", [["models", "--help"], ["models", "prepare", "--help"], ["models", "list", "--help"],
                                  ["generate", "--help"]])
def test_help_works(app, args):
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "Usage" in res.output


BAD_FILES = [
    ('{"messages": [{"role": "user", "content": "ok"}]}\n{"messages": [}\n', "line 2", "invalid JSON"),
    ('{"messages": [{"role": "user", "content": "ok"}]}\n\n{"prompt": "x"}\n', "line 3", "messages"),
    ('{"messages": [{"role": "user"}]}\n', "line 1", "content"),
    ('[1, 2]\n', "line 1", "messages"),
    ("\n", "no prompts", ""),
]


@pytest.mark.parametrize("content,where,what", BAD_FILES)
def test_bad_prompt_file_exits_2_naming_the_line(app, tmp_path, content, where, what):
    p = tmp_path / "p.jsonl"
    p.write_text(content)
    res = runner.invoke(app, ["generate", "--out", str(tmp_path / "o.jsonl"), str(p)])
    assert res.exit_code == 2
    assert where in res.output and what in res.output
    assert not (tmp_path / "o.jsonl").exists()


def test_missing_prompt_file_and_unknown_model_exit_2(app, tmp_path, monkeypatch):
    monkeypatch.setenv("FORGEPLAY_CACHE", str(tmp_path / "cache"))
    res = runner.invoke(app, ["generate", "--out", str(tmp_path / "o.jsonl"), str(tmp_path / "none.jsonl")])
    assert res.exit_code == 2 and "no such file" in res.output
    p = write_prompts(tmp_path / "p.jsonl", ["Hi"])
    res = runner.invoke(app, ["generate", "--model", "no-such-model", "--out", str(tmp_path / "o.jsonl"), str(p)])
    assert res.exit_code == 2 and "unknown model" in res.output
    res = runner.invoke(app, ["generate", "--backend", "openai", "--out", str(tmp_path / "o.jsonl"), str(p)])
    assert res.exit_code == 2 and "base_url" in res.output


def test_generate_writes_completions_and_usage(app, tmp_path, tiny_llama_dir):
    questions = ["Hi", "What is the capital of France?", "Count to five."]
    p = write_prompts(tmp_path / "p.jsonl", questions)
    out = tmp_path / "sub" / "out.jsonl"
    args = ["generate", "--model", str(tiny_llama_dir), "--n", "3", "--max-tokens", "6", "--seed", "11",
            "--logprobs", "--batch-size", "4", "--out", str(out), str(p)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["id"] for x in lines] == [0, 1, 2]
    assert [x["messages"][0]["content"] for x in lines] == questions
    for x in lines:
        assert len(x["completions"]) == 3
        for c in x["completions"]:
            assert isinstance(c["text"], str) and 1 <= len(c["token_ids"]) <= 6
            assert len(c["logprobs"]) == len(c["token_ids"]) and c["finish_reason"] in ("stop", "length")
    usage = json.loads((tmp_path / "sub" / "out.usage.json").read_text())
    assert usage["prompts"] == 3 and usage["backend"] == "transformers"
    assert usage["usage"]["requests"] == 3
    assert usage["usage"]["completion_tokens"] == sum(len(c["token_ids"]) for x in lines for c in x["completions"])
    assert usage["config"]["seed"] == 11
    assert "tokens/s" in res.output
    # the same seed reproduces the file
    first = out.read_text()
    assert runner.invoke(app, args).exit_code == 0
    assert out.read_text() == first


def test_models_prepare_and_list(app, tmp_path, tiny_llama_dir, monkeypatch):
    monkeypatch.setenv("FORGEPLAY_CACHE", str(tmp_path / "cache"))
    res = runner.invoke(app, ["models", "list"])
    assert res.exit_code == 0 and "no prepared models" in res.output
    res = runner.invoke(app, ["models", "prepare", str(tiny_llama_dir), "--name", "tiny", "--no-check"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "cache" / "models" / "tiny" / "config.json").is_file()
    res = runner.invoke(app, ["models", "list"])
    assert res.exit_code == 0 and "tiny" in res.output
    res = runner.invoke(app, ["models", "prepare", str(tmp_path / "missing.gguf")])
    assert res.exit_code == 2 and "does not exist" in res.output


@pytest.mark.slow
def test_generate_with_the_embedded_model(app, tmp_path, embedded_dir, model_cache, monkeypatch):
    monkeypatch.setenv("FORGEPLAY_CACHE", str(model_cache))
    res = runner.invoke(app, ["models", "list"])
    assert res.exit_code == 0 and "SmolLM2-135M-Instruct" in res.output
    p = write_prompts(tmp_path / "p.jsonl", ["What is the capital of France?", "Name a colour."])
    out = tmp_path / "out.jsonl"
    res = runner.invoke(app, ["generate", "--n", "2", "--max-tokens", "24", "--seed", "0", "--out", str(out), str(p)])
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 2 and all(len(x["completions"]) == 2 for x in lines)
    assert all(c["text"].strip() for x in lines for c in x["completions"])
    usage = json.loads((tmp_path / "out.usage.json").read_text())
    assert usage["model"] == str(embedded_dir)
    assert usage["usage"]["completion_tokens"] > 0 and usage["usage"]["completion_tokens_per_s"] > 0
