"""The one report writer: RUN_DIR/report.json, the figures beside it, and report.md, each written
atomically by process 0, then the "report" stage recorded. Recipes supply the report dict, a function
that draws their figures and one that writes the markdown; the helpers below are what they share."""

import json
from pathlib import Path

import numpy as np

from nash_jax import parallel
from nash_jax.runs.files import write_atomically, write_text_atomically


def write_report(run, report, *, markdown, draw=None):
    """Write `report` (a JSON-able dict) as report.json, the figures `draw(Figures)` makes, and
    `markdown(report, figure_names)` as report.md; then finish the run's "report" stage (a leaf: a
    damaged report is redone alone). Every process calls it; process 0 writes. Returns `report`."""
    if parallel.is_writer():
        write_text_atomically(run / "report.json", json.dumps(report, indent=1))
        figures = Figures(run.path)
        if draw is not None:
            draw(figures)
        write_text_atomically(run / "report.md", markdown(report, figures.names))
    # the figures are embedded in report.md; process 0 alone knows their names
    run.finish("report", ["report.json", "report.md"], leaf=True)
    return report


class Figures:
    """PNG figures written atomically into `directory`; `names` lists them in the order saved."""

    def __init__(self, directory, dpi=90):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        self.plt, self.directory, self.dpi, self.names = plt, Path(directory), dpi, []

    def new(self, *args, **kwargs):
        """plt.subplots(*args, **kwargs): a figure to draw on and `save`."""
        return self.plt.subplots(*args, **kwargs)

    def save(self, fig, name):
        write_atomically(self.directory / name, lambda tmp: fig.savefig(tmp, format="png", dpi=self.dpi))
        self.plt.close(fig)
        self.names.append(name)

    def heat_map(self, table, labels, title, name):
        """A square table (win rates in [0, 1]) with its values written in, rows and columns labelled."""
        table = np.asarray(table)
        fig, ax = self.new(figsize=(4 + 0.4 * len(labels), 3.5 + 0.4 * len(labels)))
        image = ax.imshow(table, vmin=0, vmax=1, cmap="RdBu_r")
        ax.set_xticks(range(len(labels)), labels)
        ax.set_yticks(range(len(labels)), labels)
        for (a, b), value in np.ndenumerate(table):
            ax.text(b, a, f"{value:.2f}", ha="center", va="center", fontsize=8)
        ax.set_title(title)
        fig.colorbar(image)
        self.save(fig, name)


def number(value, spec):
    """`value` formatted by `spec`, or "-" for a missing one."""
    return "-" if value is None else format(value, spec)


def cell(value):
    """A table cell: "-" for a missing or NaN value, three decimals for a float, else as it is."""
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def table_lines(labels, rows):
    """A square table as markdown rows, labelled on both sides."""
    lines = ["| | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    for label, row in zip(labels, rows):
        lines.append(f"| {label} | " + " | ".join(f"{v:.3f}" for v in row) + " |")
    return lines


def markdown_table(header, rows):
    """A markdown table of column names `header` and rows of values (each a `cell`)."""
    return (["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
            + ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows])


def course(values, every=False):
    """A figure over a run's anchors at three decimals: "first -> last" (every: each value in
    turn); missing values skipped, "-" without any."""
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return " -> ".join(f"{v:.3f}" for v in (values if every else (values[0], values[-1])))


def figure_lines(names):
    """The markdown that embeds each figure."""
    return [f"![{name}]({name})" for name in names] + [""]
