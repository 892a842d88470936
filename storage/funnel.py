"""The funnel: rows in, rejected per layer and reason, rows out, from a `verdicts` table.

FUNNEL_SQL is the body of the `<dataset>_funnel` view over `<dataset>_verdicts`; the latest
verdict per (record, layer, check) counts, so reruns do not double count.

    from storage.funnel import funnel_sql; cat.rows(funnel_sql("demo"))

The catalog creates the view for every dataset that has verdicts.
"""

from __future__ import annotations

LAYER_RANK = "CASE layer WHEN 'schema' THEN 1 WHEN 'rules' THEN 2 WHEN 'judge' THEN 3 " \
             "WHEN 'answerability' THEN 4 WHEN 'dataset' THEN 5 ELSE 9 END"

FUNNEL_SQL = """
WITH v AS (SELECT DISTINCT record_id, layer, "check", passed, reason FROM {verdicts}),
per_layer AS (
  SELECT layer, count(DISTINCT record_id) AS rows_in,
         count(DISTINCT record_id) FILTER (WHERE NOT passed) AS rows_rejected
  FROM v GROUP BY layer),
reasons AS (
  SELECT layer, "check", reason, count(DISTINCT record_id) AS rejected
  FROM v WHERE NOT passed GROUP BY layer, "check", reason)
SELECT p.layer, r."check", r.reason, coalesce(r.rejected, 0) AS rejected,
       p.rows_in, p.rows_in - p.rows_rejected AS rows_out, {rank} AS layer_rank
FROM per_layer p LEFT JOIN reasons r USING (layer)
ORDER BY layer_rank, rejected DESC
""".replace("{rank}", LAYER_RANK.replace("layer", "p.layer"))


def funnel_sql(dataset: str, run_id: str | None = None, view: str | None = None) -> str:
    """SELECT for the funnel of `dataset` (view `<dataset>_verdicts`, or `view`, must exist),
    optionally one run."""
    src = f'"{view or dataset + "_verdicts"}"'
    if run_id:
        src = f"(SELECT * FROM {src} WHERE run_id = '{run_id.replace(chr(39), chr(39) * 2)}')"
    return FUNNEL_SQL.replace("{verdicts}", src)
