"""Reports: one writer for every recipe (report.json, report.md and figures, atomically, then the
"report" stage), and the text of the cross-iterate report of the preference recipes (which
engine/iterates_report.py evaluates).

    writer         write_report(run, report, markdown=..., draw=...), Figures, markdown helpers
    iterates_text  the cross-iterate report's markdown, figures and printed summary
"""

from nash_jax.reporting.iterates_text import summary_lines
from nash_jax.reporting.writer import Figures, write_report

__all__ = ["Figures", "summary_lines", "write_report"]
