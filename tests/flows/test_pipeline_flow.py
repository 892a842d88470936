"""`forgeplay pipeline` (the main job of `make run`) end to end through the CLI, with a tiny
random-weight model standing in for the embedded one."""

import json

from typer.testing import CliRunner

from flows.cli import app
from storage import Catalog


def test_pipeline_builds_corpus_and_trajectories_and_resumes(data_root, tiny_llama_dir):
    args = ["pipeline", "--dataset", "p", "--entities", "150", "--n", "4", "--chunk", "4",
            "--max-think-tokens", "8", "--model", str(tiny_llama_dir)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "pipeline p" in res.output and "synthesize" in res.output
    assert "reasoning texts by slot kind" in res.output and "model-written" in res.output
    with Catalog(data_root) as cat:
        counts = dict(cat.rows("SELECT 'docs', count(*) FROM p_documents UNION ALL "
                               "SELECT 'triples', count(*) FROM p_triples UNION ALL "
                               "SELECT 'traj', count(*) FROM p_trajectories"))
    assert counts["docs"] == 150 and counts["triples"] > 0 and counts["traj"] == 4
    with Catalog(data_root) as cat:  # validation ran: every trajectory has verdicts; rule layer replays calls
        assert cat.scalar("SELECT count(DISTINCT record_id) FROM p_verdicts") == 4
        assert cat.scalar("SELECT count(*) FROM p_verdicts WHERE layer = 'rules' AND \"check\" = 'replay' "
                          "AND NOT passed") == 0
        assert cat.scalar("SELECT count(*) FROM p_verdicts WHERE \"check\" = 'replay' AND passed "
                          "AND reason = 'ok'") == 4  # replayed against the corpus, not skipped
        assert cat.scalar("SELECT count(*) FROM p_funnel") >= 1
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    with Catalog(data_root) as cat:
        assert cat.scalar("SELECT count(*) FROM p_trajectories") == 4
        assert cat.scalar("SELECT count(*) FROM p_documents") == 150
    runs = list((data_root / "p" / "_runs").glob("synth-*.json"))
    assert len(runs) == 1 and json.loads(runs[0].read_text())["summary"]["skipped_committed"] == 4
