"""A run's metrics: one JSON line per (stage, step) in metrics.jsonl, the scalars also as TensorBoard
events under tensorboard/ and, when enabled, to a Weights & Biases run (its files under wandb/), written
by process 0 only; a resumed run's redone steps replace the killed run's lines."""

import json
import re
import secrets
from pathlib import Path

from nash_jax.runs.files import write_text_atomically


WANDB_ID_FILE = "wandb_run_id"  # the run directory's W&B run id: a resumed run logs to the same W&B run


class MetricsLog:
    """metrics.jsonl, the TensorBoard writer and, once enable_wandb is called, the W&B run of one run
    directory."""

    def __init__(self, directory):
        self.directory = Path(directory)
        self._tensorboard = None
        self._wandb = None  # a _WandbRun once enabled
        self._last_logged = None  # {stage: the last step in metrics.jsonl}, read at the first log

    def enable_wandb(self, project, entity=None, mode="online", tags=(), config=None):
        """Log to W&B project `project` as well (`config`: the run config as a plain dict, shown with
        the run); process 0 starts the W&B run now, so that a W&B problem (no login) stops the run
        before its work, not at its first metric. Call once the run directory exists."""
        from nash_jax.parallel import is_writer
        if is_writer() and self._wandb is None:
            self._wandb = _WandbRun(self.directory, project, entity, mode, tags, config)

    def log(self, stage, step, metrics):
        """Append one JSON line to metrics.jsonl, the scalars to TensorBoard and to W&B when enabled
        (process 0 only)."""
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
        if self._wandb is not None:
            self._wandb.log(stage, record)

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

    def close(self, failed=False):
        """Close the TensorBoard writer and finish the W&B run (`failed`: marked so in W&B)."""
        if self._tensorboard is not None:
            self._tensorboard.close()
            self._tensorboard = None
        if self._wandb is not None:
            self._wandb.finish(failed)
            self._wandb = None


class _WandbRun:
    """One run directory's W&B run. Each stage counts its steps from 0, while W&B's own step may only
    grow across a run: every stage is logged against a step metric of its own (`STAGE/step`), and
    W&B's step just counts the log calls."""

    def __init__(self, directory, project, entity, mode, tags, config):
        import wandb

        # dir: W&B writes into a `wandb` folder inside it; resume="allow": a resumed run directory
        # continues its W&B run (same id), a new one starts one
        self._run = wandb.init(project=project, entity=entity, mode=mode, tags=list(tags), config=config,
                               name=directory.name, dir=str(directory), id=_wandb_run_id(directory),
                               resume="allow")
        self._stages = set()  # the stages whose step metric is defined in this process

    def log(self, stage, record):
        """One metrics.jsonl record as W&B row {STAGE/step: step, STAGE/NAME: value, ...}."""
        if stage not in self._stages:
            self._run.define_metric(f"{stage}/step")
            self._run.define_metric(f"{stage}/*", step_metric=f"{stage}/step")
            self._stages.add(stage)
        # a resumed run logs its redone steps again: W&B keeps both points, of equal values
        self._run.log({f"{stage}/{k}": v for k, v in record.items() if k != "stage"})

    def finish(self, failed):
        self._run.finish(exit_code=1 if failed else 0)


def _wandb_run_id(directory):
    """The W&B run id stored in the run directory; the first start makes one of the directory's name
    and a random suffix (another directory of the same name is another W&B run)."""
    path = directory / WANDB_ID_FILE
    if path.is_file() and path.read_text().strip():
        return path.read_text().strip()
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", directory.name)[:48]  # characters W&B takes in an id
    run_id = f"{name}-{secrets.token_hex(4)}"
    write_text_atomically(path, run_id + "\n")
    return run_id


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
