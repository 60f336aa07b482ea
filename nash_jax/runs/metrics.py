"""A run's metrics: one JSON line per (stage, step) in metrics.jsonl, the scalars also as TensorBoard
events under tensorboard/, written by process 0 only; a resumed run's redone steps replace the killed
run's lines."""

import json
from pathlib import Path

from nash_jax.runs.files import write_text_atomically


class MetricsLog:
    """metrics.jsonl and the TensorBoard writer of one run directory."""

    def __init__(self, directory):
        self.directory = Path(directory)
        self._tensorboard = None
        self._last_logged = None  # {stage: the last step in metrics.jsonl}, read at the first log

    def log(self, stage, step, metrics):
        """Append one JSON line to metrics.jsonl and the scalars to TensorBoard (process 0 only)."""
        from nash_jax.parallel import is_writer
        if not is_writer():
            return
        record = {"stage": stage, "step": int(step), **{k: float(v) for k, v in metrics.items()}}
        self._forget_redone_metrics(stage, int(step))
        with open(self.directory / "metrics.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        if self._tensorboard is None:
            from tensorboardX import SummaryWriter
            self._tensorboard = SummaryWriter(str(self.directory / "tensorboard"))
        for name, value in metrics.items():
            self._tensorboard.add_scalar(f"{stage}/{name}", float(value), int(step))

    def _forget_redone_metrics(self, stage, step):
        """A resumed run redoes the steps after its last checkpoint: before the first redone step of
        `stage` is logged, drop the killed run's lines of `stage` from `step` on (and a line that the
        kill cut short), so that metrics.jsonl holds each (stage, step) once."""
        if self._last_logged is None:  # the first record this process logs: read what is there
            records, whole = _metric_records(self.directory / "metrics.jsonl")
            self._last_logged = {}
            for r in records:
                self._last_logged[r["stage"]] = max(r["step"], self._last_logged.get(r["stage"], r["step"]))
            if not whole:
                self._rewrite_metrics(records)
        if step <= self._last_logged.get(stage, step - 1):
            records, _ = _metric_records(self.directory / "metrics.jsonl")
            self._rewrite_metrics([r for r in records if r["stage"] != stage or r["step"] < step])
        self._last_logged[stage] = step

    def _rewrite_metrics(self, records):
        write_text_atomically(self.directory / "metrics.jsonl",
                              "".join(json.dumps(r) + "\n" for r in records))

    def close(self):
        if self._tensorboard is not None:
            self._tensorboard.close()
            self._tensorboard = None


def defined_metrics(metrics):
    """The metrics that have a value: a figure over no item (a mean over no valid proposal) is NaN
    and is left out of the logs."""
    return {k: v for k, v in metrics.items() if not (isinstance(v, float) and v != v)}


def read_metrics(path):
    """metrics.jsonl as a list of records, the last record of each (stage, step) kept (a resumed run
    repeats the steps after its last checkpoint)."""
    latest = {(r["stage"], r["step"]): r for r in _metric_records(path)[0]}
    return sorted(latest.values(), key=lambda r: (r["stage"], r["step"]))


def _metric_records(path):
    """(the records of metrics.jsonl in file order, whether every line read whole)."""
    path = Path(path)
    if not path.is_file():
        return [], True
    records, whole = [], True
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            whole = False  # a line cut short by a kill
    return records, whole
