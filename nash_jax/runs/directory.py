"""One run's directory: its lock (one writer at a time), the resolved config it was started with, and
the manifest of finished stages.

A run directory holds the resolved config (`config.yaml`), a manifest of finished stages
(`manifest.json`), one folder per iteration with each stage's artifact, orbax checkpoints, metrics
(`metrics.jsonl`, TensorBoard events under `tensorboard/`, with W&B its files under `wandb/` and its
run id in `wandb_run_id`) and the report. A stage counts as finished only once the manifest records it,
with the size and SHA-256 (above 64 MiB: the modification time) of every file it wrote, and the manifest
is written after the artifact is in place: a crash at any moment leaves either a finished stage or one
that is redone, never a truncated file read as finished.
"""

import contextlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

import yaml

from nash_jax.runs.files import is_own_temporary, write_text_atomically
from nash_jax.runs.fingerprints import fingerprint, same_identity
from nash_jax.runs.metrics import MetricsLog


def remove_stale_temporaries(root):
    """Delete the temporaries that interrupted writes of nash_jax left under `root`, a run directory
    of nash_jax's (names of files.is_own_temporary's shapes only: another program's `.x.tmp` stays);
    returns how many. Walks `root` without following symbolic links, and a link is removed as a link,
    never through it. Call only while holding the run directory's lock (no writer is live)."""
    stale = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        found = [name for name in dirs + files if is_own_temporary(name, in_run=True)]
        stale += [Path(folder) / name for name in found]
        dirs[:] = [d for d in dirs if d not in found]  # a stale folder goes whole: no need to look in
    for p in stale:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    return len(stale)


# What a run writes before any of its work: a run that fails holding only these has lost nothing
BOOKKEEPING = {".lock", "config.yaml", "manifest.json", "metrics.jsonl", "data/prompts.jsonl"}


class RunDir:
    """One run's directory: its config lock, manifest of finished stages, and metrics."""

    def __init__(self, path):
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise ValueError(f"run directory {self.path} is a file; expected a directory (or a path "
                             "that does not exist yet)")
        self.manifest_path = self.path / "manifest.json"
        self.manifest = {"stages": {}}
        if self.manifest_path.is_file():
            try:
                self.manifest = json.loads(self.manifest_path.read_text())
                assert isinstance(self.manifest.get("stages"), dict)
            except (json.JSONDecodeError, AssertionError, AttributeError):
                raise ValueError(f"{self.manifest_path} is not a manifest this program wrote (not JSON "
                                 "with a `stages` mapping); restore it, or start a new run_dir") from None
        self._metrics = MetricsLog(self.path)
        self._lock_file = None
        self._last_finish = time.perf_counter()
        self._made = None  # what acquire() found: None (not yet), "new" (made here), "emptied" (was empty)

    def acquire(self):
        """Hold RUN_DIR/.lock for this process (one writer at a time), then clean up what a killed
        writer left. A lock whose process has died is released by the OS, so it never goes stale."""
        import fcntl

        from nash_jax.parallel import is_writer
        if not is_writer() or self._lock_file is not None:
            return
        new = self._check_ours()
        if new:
            self._made = "emptied" if self.path.is_dir() else "new"
        self.path.mkdir(parents=True, exist_ok=True)
        handle = open(self.path / ".lock", "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise ValueError(f"run directory {self.path} is in use by {holder}; wait for it to finish, "
                             "or choose another run_dir=PATH") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"process {os.getpid()} on {os.uname().nodename} since "
                     f"{time.strftime('%Y-%m-%dT%H:%M:%S')}\n")
        handle.flush()
        self._lock_file = handle
        if new:  # from now on the manifest says that nash_jax made this directory
            write_text_atomically(self.manifest_path, json.dumps(self.manifest, indent=1))
        removed = remove_stale_temporaries(self.path)
        if removed:
            print(f"removed {removed} temporary file(s) left by an interrupted write in {self.path}",
                  file=sys.stderr)

    def _check_ours(self):
        """Whether the run directory is new (missing, empty, or holding only the lock file); else
        check that nash_jax made it (it holds a manifest this program wrote, read by __init__), so that
        a run never writes into, or sweeps, a folder of the user's. ValueError saying why, if not."""
        if not self.path.is_dir():
            return True
        if self.manifest_path.is_file():
            return False
        entries = sorted(p.name for p in self.path.iterdir() if p.name != ".lock")
        if not entries or self._started_by_an_earlier_version():
            return True
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise ValueError(f"run directory {self.path} holds files ({shown}) but no manifest.json, so "
                         "nash_jax did not make it; refusing to write into it. Choose a new or empty "
                         "run_dir=PATH")

    def _started_by_an_earlier_version(self):
        """An earlier version wrote the manifest only with the first finished stage: a run killed
        before it left its lock and the resolved config.yaml (a mapping naming the recipe, the model
        and this run_dir) with no manifest. Such a directory is nash_jax's too."""
        config = self.path / "config.yaml"
        if not ((self.path / ".lock").is_file() and config.is_file()):
            return False
        try:
            values = yaml.safe_load(config.read_text())
        except (yaml.YAMLError, UnicodeDecodeError):
            return False
        return isinstance(values, dict) and {"recipe", "model", "run_dir"} <= set(values)

    def started(self):
        """Whether any work of this run survives: a finished stage or a checkpoint."""
        return bool(self.manifest["stages"]) or any(self.path.glob("**/checkpoints/*"))

    def verify(self):
        """Check every recorded stage's files. A stage whose files are missing or changed, and every
        stage that finished after it (which may have read it), are dropped from the manifest so that
        they are redone, with the training checkpoints under their folders (a training loop of stage
        folder F keeps them in F/checkpoints); a damaged leaf stage is dropped alone. Returns the
        dropped stage names (and says so on stderr)."""
        from nash_jax.parallel import barrier, is_writer

        names = list(self.manifest["stages"])
        damaged = next((i for i, name in enumerate(names) if not self.done(name)), None)
        if damaged is None:
            return []
        bad = names[damaged]
        files = [f for f in self.manifest["stages"][bad]["files"] if not self._intact(f, bad)]
        dropped = [bad] if self.manifest["stages"][bad].get("leaf") else names[damaged:]
        for name in dropped:
            del self.manifest["stages"][name]
        if is_writer():
            for folder in {name.split("/")[0] for name in dropped}:
                shutil.rmtree(self.path / folder / "checkpoints", ignore_errors=True)
        write_text_atomically(self.manifest_path, json.dumps(self.manifest, indent=1))
        barrier("verify")
        print(f"{self.path}: {', '.join(files) or bad} of stage {bad} is missing or changed since it "
              f"was recorded; redoing {len(dropped)} stage(s) from {bad} on", file=sys.stderr)
        return dropped

    def _intact(self, relative, stage):
        size, digest = self.manifest["stages"][stage]["files"][relative]
        file = self.path / relative
        return file.is_file() and file.stat().st_size == size and same_identity(file, digest)

    def check_fingerprint(self, name, digest, source, **facts):
        """Record `digest` of input `name` (read from `source`), and `facts` about it, on the first
        run; refuse to resume over a different one."""
        inputs = self.manifest.setdefault("inputs", {})
        if name in inputs and inputs[name]["digest"] != digest:
            raise ValueError(f"{source} has changed since this run started (its {name} fingerprint "
                             f"differs from the one in {self.manifest_path}); restore it, or start a new "
                             "run_dir=PATH")
        if name not in inputs:
            inputs[name] = {"digest": digest, "source": str(source), **facts}
            write_text_atomically(self.manifest_path, json.dumps(self.manifest, indent=1))

    def __truediv__(self, relative):
        return self.path / relative

    def lock_config(self, config_dict, normalise=None):
        """Save the resolved config, or refuse a different one for an existing run directory.

        `normalise(saved dict)` reads the saved config as the current version would (new sections
        with their defaults), so that a run started before a section existed still resumes."""
        path = self.path / "config.yaml"
        text = yaml.safe_dump(config_dict, sort_keys=False)
        if path.is_file() and self.started():
            try:
                saved = yaml.safe_load(path.read_text())
            except yaml.YAMLError:
                saved = None
            if not isinstance(saved, dict):
                raise ValueError(f"{path} is not a config this program wrote; restore it, or start a "
                                 "new run_dir=PATH")
            if normalise is not None:
                saved, config_dict = normalise(saved) or saved, normalise(config_dict)
            # where the run directory is does not matter: a moved or copied one resumes
            saved, config_dict = ({k: v for k, v in d.items() if k != "run_dir"}
                                  for d in (saved, config_dict))
            if saved != config_dict:
                diffs = sorted(_differences(saved, config_dict))
                raise ValueError(
                    f"run directory {self.path} was started with a different config; it differs in "
                    + ", ".join(f"{k} ({a!r} there, {b!r} now)" for k, a, b in diffs[:8])
                    + ". Rerun with the same config to resume, or choose a new run_dir=PATH")
            return
        if path.is_file() and self.manifest.get("inputs"):  # a run that never started takes the
            self.manifest.pop("inputs")                     # corrected config, and its inputs anew
            shutil.rmtree(self.path / "data", ignore_errors=True)
            write_text_atomically(self.manifest_path, json.dumps(self.manifest, indent=1))
        write_text_atomically(path, text)

    def done(self, stage):
        """Whether `stage` finished and every file it recorded is intact (size and SHA-256)."""
        record = self.manifest["stages"].get(stage)
        return record is not None and all(self._intact(f, stage) for f in record["files"])

    def info(self, stage):
        return self.manifest["stages"][stage]["info"]

    def finish(self, stage, artifacts, leaf=False, **info):
        """Record `stage` as finished with its artifacts (paths relative to the run directory). A
        `leaf` stage is one no other stage reads (the report): damaged, it alone is redone.

        Multi-process: every process calls it; the barrier makes process 0's files visible first."""
        from nash_jax.parallel import barrier
        barrier(f"finish {stage}")
        files = {}
        for relative in artifacts:
            found = fingerprint(self.path, relative)
            if not found:
                raise FileNotFoundError(f"stage {stage}: its artifact {self.path / relative} is missing "
                                        "or empty; expected it written before the stage is recorded")
            files.update(found)
        now = time.perf_counter()
        # wall time since the previous stage finished in this process (or since the run was opened):
        # the stage itself plus whatever loading preceded it
        seconds, self._last_finish = round(now - self._last_finish, 3), now
        self.manifest["stages"].pop(stage, None)  # the manifest lists stages in the order they finished
        self.manifest["stages"][stage] = {"artifacts": list(artifacts), "files": files,
                                          "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                          "seconds": seconds, "info": info, "leaf": leaf}
        write_text_atomically(self.manifest_path, json.dumps(self.manifest, indent=1))

    def log_metrics(self, stage, step, metrics):
        """Append one JSON line to metrics.jsonl and the scalars to TensorBoard, and to W&B once
        enable_wandb was called (process 0 only)."""
        self._metrics.log(stage, step, metrics)

    def enable_wandb(self, project, entity=None, mode="online", tags=(), config=None):
        """Log the metrics to W&B project `project` as well (MetricsLog.enable_wandb)."""
        self._metrics.enable_wandb(project, entity=entity, mode=mode, tags=tags, config=config)

    def close(self, failed=False):
        """Release the lock and close the metrics (`failed`: the run stopped with an error). A run
        that this process started and that stopped before any work leaves no directory behind (only
        the files it wrote itself go, and only while it holds nothing else), so that a refused run
        can be fixed and rerun as if it had never started."""
        self._metrics.close(failed)
        if self._lock_file is not None:
            if failed and self._made is not None and not self.started():
                with contextlib.suppress(OSError):  # never in place of the error that failed the run
                    self._discard_bookkeeping()
            self._lock_file.close()  # releases the lock
            self._lock_file = None

    def _discard_bookkeeping(self):
        files = [p for p in self.path.rglob("*") if not p.is_dir()]
        if any(p.relative_to(self.path).as_posix() not in BOOKKEEPING for p in files):
            return
        for p in sorted(files, key=lambda p: p.name == ".lock"):  # the lock last
            p.unlink()
        for d in sorted((p for p in self.path.rglob("*") if p.is_dir()), reverse=True):
            d.rmdir()
        if self._made == "new":
            self.path.rmdir()


def _differences(a, b, prefix=""):
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        name = f"{prefix}{key}"
        if isinstance(x, dict) and isinstance(y, dict):
            yield from _differences(x, y, name + ".")
        elif x != y:
            yield name, x, y
