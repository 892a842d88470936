"""The loop's config file (flows/loop_config.py): checked whole before anything runs, a bad
field is one line naming it, an option the loop wires is refused, and the loop hands every
stage that prompts the policy the same tool style (the self-play student included)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from flows import loop_config
from storage.configfile import ConfigFileError


@pytest.mark.parametrize("doc, message", [
    ({"sft": {"max_stepz": 3}}, "sft.max_stepz: unknown field"),
    ({"selfplay": {"tool_style": "full"}}, "selfplay.tool_style: set by the loop"),
    ({"acquire": {"strategy": "best"}}, "acquire: --strategy must be one of"),
    ({"tool_style": "tiny"}, "tool_style"),
])
def test_a_bad_field_is_named(doc, message):
    with pytest.raises(ConfigFileError, match=message.replace(".", r"\.")):
        loop_config.check(doc)


def test_an_old_option_name_in_a_section_is_read_as_the_new_one_with_a_note(capsys):
    """acquire's p, gate and warmup are LabelConfig's label_p, label_gate and label_warmup, as in
    grpo; a config file that says the old names still works, saying so once per name."""
    config = loop_config.check({"acquire": {"p": 0.5, "warmup": 2}, "grpo": {"label_p": 0.25}})
    assert (config["acquire"]["label_p"], config["acquire"]["label_warmup"], config["grpo"]["label_p"]) == (0.5, 2, 0.25)
    assert "p" not in config["acquire"] and "warmup" not in config["acquire"]
    err = capsys.readouterr().err
    assert err.count("note: acquire.p is deprecated; use acquire.label_p") == 1 and "acquire.warmup" in err
    with pytest.raises(ConfigFileError, match="acquire: need 0 <= --label-p <= 1"):
        loop_config.check({"acquire": {"p": 2.0}})


def test_every_stage_that_prompts_the_policy_gets_the_loops_tool_style():
    config = loop_config.check({"tool_style": "full"})
    for name in ("eval", "selfplay", "acquire", "grpo"):
        (cfg, *_) = loop_config.build(config, name, **loop_config.wiring(name, config, "/r", "m", "b"))
        assert cfg.tool_style == "full", name
    (play,) = loop_config.build(config, "selfplay", **loop_config.wiring("selfplay", config, "/r", "m", "b"))
    assert (play.student, play.examiner) == ("m", "b")  # the student is the trained policy


def test_the_command_prints_one_line_and_exits_2(tmp_path):
    from flows.cli import app

    bad = tmp_path / "pipeline.yaml"
    bad.write_text("sft: {max_stepz: 3}\n")
    res = CliRunner().invoke(app, ["--data-root", str(tmp_path), "run", "--config", str(bad)])
    assert res.exit_code == 2 and "sft.max_stepz: unknown field" in res.output, res.output
    assert not (tmp_path / "runs").exists()  # nothing ran
