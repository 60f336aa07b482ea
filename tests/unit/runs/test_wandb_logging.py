"""Weights & Biases logging (logging.wandb): the metrics a run logs through RunDir.log_metrics reach its
W&B run, each stage against a step of its own; without logging.wandb W&B is never imported; a missing
wandb package and a W&B field without a project are one-line errors. W&B runs offline here (nothing
reaches the network), its files under tmp_path."""

import sys

import pytest

from nash_jax.config import build_run_config, normalised, to_dict
from nash_jax.engine import Recipe, register
from nash_jax.engine.runner import run
from nash_jax.runs import RunDir, read_metrics
from nash_jax.runs.metrics import WANDB_ID_FILE

# two stages, each counting its steps from 0, as the stages of a run do
LOGGED = [("iter_0", 0, {"loss": 2.0}), ("iter_0", 1, {"loss": 1.5}),
          ("iter_0_eval", 0, {"win_rate": 0.25}), ("iter_0", 2, {"loss": 1.0})]


def log_probe(config, run_dir):
    for stage, step, metrics in LOGGED:
        run_dir.log_metrics(stage, step, metrics)
    return {}


def fail_after_logging(config, run_dir):
    log_probe(config, run_dir)
    raise RuntimeError("a stage failed")


register(Recipe(name="wandb_probe", run=log_probe))  # a recipe that only logs LOGGED
register(Recipe(name="wandb_probe_failing", run=fail_after_logging))


@pytest.fixture(autouse=True)
def offline_wandb(tmp_path, monkeypatch):
    """W&B offline and quiet, its settings, cache and data kept under tmp_path."""
    home = tmp_path / "wandb_home"
    for name in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(home))
    for name, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_CONSOLE": "off"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)


def probe_config(run_dir, recipe="wandb_probe", **logging):
    return build_run_config({"recipe": recipe, "run_dir": str(run_dir), "logging": logging})


def expected_rows():
    """The W&B rows of LOGGED: each with its stage's step metric."""
    return [{f"{stage}/step": step, **{f"{stage}/{k}": v for k, v in metrics.items()}}
            for stage, step, metrics in LOGGED]


def wandb_records(path):
    """The records of an offline run's transaction log (run-ID.wandb): a 7-byte W&B header, then
    LevelDB-log chunks (crc32c 4 bytes, length 2, type 1: 1 whole, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B" and len(data) < 32768, "expected a test run's log within one 32 KiB block"
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record
            pending = b""


def finished_records(path, seconds=30):
    """The records of an offline run's log once they end with the run's exit record: W&B's writer
    (the wandb-core process) may still be flushing the file when finish() has returned."""
    import time

    deadline = time.monotonic() + seconds
    while True:
        records = list(wandb_records(path))
        if records and records[-1].WhichOneof("record_type") == "exit" or time.monotonic() > deadline:
            return records
        time.sleep(0.05)


def history_and_step_metrics(path):
    """(the logged rows without W&B's own `_` keys, {glob: step metric} of define_metric)."""
    import json

    rows, step_metrics = [], {}
    for record in finished_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            items = {item.key or "/".join(item.nested_key): json.loads(item.value_json)
                     for item in record.history.item}
            rows.append({k: v for k, v in items.items() if not k.startswith("_")})
        elif kind == "metric" and record.metric.glob_name:
            step_metrics[record.metric.glob_name] = record.metric.step_metric
    return rows, step_metrics


def test_metrics_logged_through_the_run_dir_reach_the_offline_wandb_run(tmp_path):
    run_dir = RunDir(tmp_path / "run")
    run_dir.acquire()
    run_dir.enable_wandb("nash-jax-test", mode="offline", tags=["t1"], config={"seed": 3})
    log_probe(None, run_dir)
    run_dir.close()
    run_id = (tmp_path / "run" / WANDB_ID_FILE).read_text().strip()
    assert run_id.startswith("run-"), run_id
    (offline,) = (tmp_path / "run" / "wandb").glob(f"offline-run-*-{run_id}")
    log = offline / f"run-{run_id}.wandb"
    assert log.is_file() and (offline / "logs" / "debug.log").is_file(), sorted(offline.rglob("*"))
    rows, step_metrics = history_and_step_metrics(log)
    assert rows == expected_rows(), rows
    assert step_metrics == {"iter_0/*": "iter_0/step", "iter_0_eval/*": "iter_0_eval/step"}, step_metrics
    assert len(read_metrics(tmp_path / "run" / "metrics.jsonl")) == len(LOGGED)  # the other logs too


def test_a_resumed_run_directory_logs_to_the_same_wandb_run(tmp_path):
    for _ in range(2):
        run_dir = RunDir(tmp_path / "run")
        run_dir.acquire()
        run_dir.enable_wandb("nash-jax-test", mode="offline")
        run_dir.log_metrics("iter_0", 0, {"loss": 1.0})
        run_dir.close()
    run_id = (tmp_path / "run" / WANDB_ID_FILE).read_text().strip()
    # one offline run a process, both of the one W&B run (`wandb sync` joins them)
    offline = sorted((tmp_path / "run" / "wandb").glob("offline-run-*"))
    assert len(offline) == 2 and all((p / f"run-{run_id}.wandb").is_file() for p in offline), offline


class SpyRun:
    """What wandb.init returns, recording the calls made on it."""

    def __init__(self, calls):
        self.calls = calls

    def define_metric(self, name, step_metric=None):
        self.calls.append(("define_metric", name, step_metric))

    def log(self, row):
        self.calls.append(("log", row))

    def finish(self, exit_code=None):
        self.calls.append(("finish", exit_code))


@pytest.fixture
def wandb_calls(monkeypatch):
    import wandb

    calls = []
    monkeypatch.setattr(wandb, "init", lambda **kwargs: calls.append(("init", kwargs)) or SpyRun(calls))
    return calls


def test_run_gives_the_logging_section_and_the_config_to_wandb(tmp_path, wandb_calls):
    config = probe_config(tmp_path / "run", wandb="proj", wandb_entity="team", wandb_mode="offline",
                          wandb_tags=["a", "b"])
    run(config)
    (init, *rest) = wandb_calls
    run_id = (tmp_path / "run" / WANDB_ID_FILE).read_text().strip()
    assert init[1] == {"project": "proj", "entity": "team", "mode": "offline", "tags": ["a", "b"],
                       "config": to_dict(config), "name": "run", "dir": str(tmp_path / "run"),
                       "id": run_id, "resume": "allow"}, init
    assert [c[1] for c in rest if c[0] == "log"] == expected_rows()
    assert ("define_metric", "iter_0_eval/*", "iter_0_eval/step") in rest and rest[-1] == ("finish", 0)


def test_a_run_that_stops_with_an_error_finishes_its_wandb_run_as_failed(tmp_path, wandb_calls):
    with pytest.raises(RuntimeError, match="a stage failed"):
        run(probe_config(tmp_path / "run", recipe="wandb_probe_failing", wandb="proj"))
    assert wandb_calls[-1] == ("finish", 1), wandb_calls[-1]


def test_processes_other_than_0_log_nothing_to_wandb(tmp_path, wandb_calls, monkeypatch):
    import nash_jax.parallel

    monkeypatch.setattr(nash_jax.parallel, "is_writer", lambda: False)
    run_dir = RunDir(tmp_path / "run")
    run_dir.enable_wandb("proj", mode="offline")
    log_probe(None, run_dir)
    run_dir.close()
    assert wandb_calls == [] and not (tmp_path / "run").exists()


def test_without_logging_wandb_wandb_is_never_imported(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # any `import wandb` would raise ImportError
    run(probe_config(tmp_path / "run"))
    assert len(read_metrics(tmp_path / "run" / "metrics.jsonl")) == len(LOGGED)
    assert not (tmp_path / "run" / "wandb").exists() and not (tmp_path / "run" / WANDB_ID_FILE).exists()


def test_a_missing_wandb_package_is_one_line_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ValueError) as err:
        run(probe_config(tmp_path / "run", wandb="proj"))
    assert str(err.value) == ("logging.wandb=proj needs the wandb package: pip install "
                              "'nash-jax[wandb]'"), str(err.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("field, value", [("wandb_entity", "team"), ("wandb_tags", ["a"]),
                                          ("wandb_mode", "offline")])
def test_a_wandb_field_without_logging_wandb_is_refused_by_name(tmp_path, field, value):
    expected = (f"logging.{field}={value!r}: nothing reads it without logging.wandb; expected "
                f"logging.wandb=PROJECT, or logging.{field} left unset")
    with pytest.raises(ValueError) as err:
        probe_config(tmp_path / "run", **{field: value})
    assert str(err.value) == expected, str(err.value)
    probe_config(tmp_path / "run", wandb="proj", **{field: value})  # with a project it is read


def test_an_empty_wandb_project_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"logging.wandb='  '; expected a W&B project name"):
        probe_config(tmp_path / "run", wandb="  ")


def test_a_run_resumes_with_other_logging_settings(tmp_path):
    """W&B settings change no result: a started run may be resumed with W&B added or changed."""
    run_dir = RunDir(tmp_path / "run")
    run_dir.lock_config(to_dict(probe_config(tmp_path / "run")), normalise=normalised)
    run_dir.finish("init", [])
    run_dir.lock_config(to_dict(probe_config(tmp_path / "run", wandb="proj", wandb_tags=["x"])),
                        normalise=normalised)
