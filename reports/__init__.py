"""Reports on what a whole-loop run made: `write_report(root, run_id)` reads
`<root>/runs/<run_id>/run.json` and the datasets and training runs it names, and writes one
self-contained HTML page (plots embedded as PNG data URIs) beside it.

    from reports import write_report
    write_report("data", "run-3f2a")        # data/runs/run-3f2a/report.html
"""

from reports.report import PARTS, Part, write_report

__all__ = ["PARTS", "Part", "write_report"]
