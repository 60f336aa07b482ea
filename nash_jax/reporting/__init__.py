"""Reports: one writer for every recipe (report.json, report.md and figures, atomically, then the
"report" stage), and the cross-iterate report of the preference recipes.

    writer         write_report(run, report, markdown=..., draw=...), Figures, markdown helpers
    iterates       evaluate_and_write: every iterate sampled on held-out prompts, judged pairwise,
                   with length control, averaging, best-of-n, held-out accuracy (`nash-jax report`)
    iterates_text  that report's markdown, figures and printed summary
"""

from nash_jax.reporting.iterates import AVERAGE_LABEL, evaluate_and_write, loss_curve
from nash_jax.reporting.iterates_text import summary_lines
from nash_jax.reporting.writer import Figures, write_report

__all__ = ["AVERAGE_LABEL", "Figures", "evaluate_and_write", "loss_curve", "summary_lines", "write_report"]
