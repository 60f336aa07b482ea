"""Run directories and their artifacts: everything written is written whole or not at all.

A run directory holds the resolved config (`config.yaml`), a manifest of finished stages
(`manifest.json`), one folder per iteration with each stage's artifact, orbax checkpoints, metrics
(`metrics.jsonl` and TensorBoard events under `tensorboard/`) and the report. A stage counts as finished
only once the manifest records it, with the size and SHA-256 (above 64 MiB: the modification time) of
every file it wrote, and the manifest is written after the artifact is in place: a crash at any moment
leaves either a finished stage or one that is redone, never a truncated file read as finished.
"""

import hashlib
import json
import os
import shutil
import signal
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import yaml

from nash_jax.files import (is_own_temporary, write_atomically, write_dir_atomically,  # noqa: F401
                            write_text_atomically)

CRASH_ENV = "NASH_JAX_CRASH_AT"  # fault injection for the resume tests: the name of a crash_point


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


def file_digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# Files up to this size are checked by SHA-256; larger ones (model shards) by size and modification
# time, so that resuming a 7B run does not re-read tens of gigabytes. A truncated file is caught either way.
DIGEST_MAX_BYTES = 64 * 2**20


def _identity(path):
    stat = path.stat()
    if stat.st_size <= DIGEST_MAX_BYTES:
        return file_digest(path)
    h = hashlib.sha256()
    with open(path, "rb") as f:  # the first and last MiB: a truncation or a rewrite shows, a copy not
        h.update(f.read(1 << 20))
        f.seek(max(stat.st_size - (1 << 20), 0))
        h.update(f.read(1 << 20))
    return f"ends:{h.hexdigest()}"


def _same_identity(path, recorded):
    if recorded.startswith("mtime_ns:"):  # recorded by an earlier version
        return recorded == f"mtime_ns:{path.stat().st_mtime_ns}"
    return _identity(path) == recorded


def _fingerprint(root, relative):
    """{relative file path: [size, sha256 or mtime]} of a file or of every file under a directory."""
    target = root / relative
    files = [target] if target.is_file() else sorted(p for p in target.rglob("*") if p.is_file())
    return {str(p.relative_to(root)): [p.stat().st_size, _identity(p)] for p in files}


# Stage numbers of the keys that the built-in recipes draw with (fixed, so that a run started by an
# earlier version resumes with the same draws); any other stage name is numbered by its CRC-32.
STAGES = {"generate": 1, "train": 2, "eval": 3, "warm_start": 4, "opponent": 5}


def stage_number(stage):
    return STAGES.get(stage, zlib.crc32(stage.encode()) & 0x7FFFFFFF)


def stage_key(seed, iteration, stage, index=0):
    """The PRNG key of one random draw: (seed, iteration, stage, index) folded in, so that a resumed
    run draws exactly what an uninterrupted one draws."""
    import jax

    key = jax.random.PRNGKey(seed)
    for part in (iteration, stage_number(stage), index):
        key = jax.random.fold_in(key, part)
    return key


def stage_seed(seed, iteration, stage):
    """An integer seed for host-side shuffles (grain), from the same parts as stage_key."""
    return int(np.random.SeedSequence([seed, iteration, stage_number(stage)]).generate_state(1)[0])


def write_table(path, columns):
    """A dict of equal-length columns as a parquet file, written whole or not at all."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(columns)
    write_atomically(path, lambda tmp: pq.write_table(table, tmp))


def read_table(path):
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pydict()


def progress(total, desc, unit):
    """A progress bar on a terminal, nothing in logs."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True, mininterval=1.0, leave=False,
                disable=None)


class Interrupted(KeyboardInterrupt):
    """A run stopped on request (SIGINT, SIGTERM) at a safe point; rerunning resumes it."""


_stop = {"requested": False, "loop_depth": 0}


def request_stop():
    """Ask the running training loop to stop after its current step, with a checkpoint. Outside a
    training loop (or on a second request) stop at once: stages write whole files or none."""
    if _stop["requested"] or not _stop["loop_depth"]:
        raise KeyboardInterrupt
    _stop["requested"] = True


def stop_requested():
    return _stop["requested"]


def clear_stop_request():
    _stop["requested"] = False


class training_loop_running:
    """Context: a loop that checks stop_requested() after each step is running."""

    def __enter__(self):
        _stop["loop_depth"] += 1

    def __exit__(self, *exc):
        _stop["loop_depth"] -= 1


def crash_point(point):
    """Kill this process with SIGKILL when $NASH_JAX_CRASH_AT names `point` (tests of resumption)."""
    want = os.environ.get(CRASH_ENV)
    if want and want == point:
        os.kill(os.getpid(), signal.SIGKILL)


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
        self._tensorboard = None
        self._lock_file = None
        self._last_finish = time.perf_counter()
        self._last_logged = None  # {stage: the last step in metrics.jsonl}, read at the first log

    def acquire(self):
        """Hold RUN_DIR/.lock for this process (one writer at a time), then clean up what a killed
        writer left. A lock whose process has died is released by the OS, so it never goes stale."""
        import fcntl

        from nash_jax.parallel import is_writer
        if not is_writer() or self._lock_file is not None:
            return
        new = self._check_ours()
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
        return file.is_file() and file.stat().st_size == size and _same_identity(file, digest)

    def check_fingerprint(self, name, digest, source):
        """Record `digest` of input `name` (read from `source`) on the first run; refuse to resume
        over a different one."""
        inputs = self.manifest.setdefault("inputs", {})
        if name in inputs and inputs[name]["digest"] != digest:
            raise ValueError(f"{source} has changed since this run started (its {name} fingerprint "
                             f"differs from the one in {self.manifest_path}); restore it, or start a new "
                             "run_dir=PATH")
        if name not in inputs:
            inputs[name] = {"digest": digest, "source": str(source)}
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
            found = _fingerprint(self.path, relative)
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
        """Append one JSON line to metrics.jsonl and the scalars to TensorBoard (process 0 only)."""
        from nash_jax.parallel import is_writer
        if not is_writer():
            return
        record = {"stage": stage, "step": int(step), **{k: float(v) for k, v in metrics.items()}}
        self._forget_redone_metrics(stage, int(step))
        with open(self.path / "metrics.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        if self._tensorboard is None:
            from tensorboardX import SummaryWriter
            self._tensorboard = SummaryWriter(str(self.path / "tensorboard"))
        for name, value in metrics.items():
            self._tensorboard.add_scalar(f"{stage}/{name}", float(value), int(step))

    def _forget_redone_metrics(self, stage, step):
        """A resumed run redoes the steps after its last checkpoint: before the first redone step of
        `stage` is logged, drop the killed run's lines of `stage` from `step` on (and a line that the
        kill cut short), so that metrics.jsonl holds each (stage, step) once."""
        if self._last_logged is None:  # the first record this process logs: read what is there
            records, whole = _metric_records(self.path / "metrics.jsonl")
            self._last_logged = {}
            for r in records:
                self._last_logged[r["stage"]] = max(r["step"], self._last_logged.get(r["stage"], r["step"]))
            if not whole:
                self._rewrite_metrics(records)
        if step <= self._last_logged.get(stage, step - 1):
            records, _ = _metric_records(self.path / "metrics.jsonl")
            self._rewrite_metrics([r for r in records if r["stage"] != stage or r["step"] < step])
        self._last_logged[stage] = step

    def _rewrite_metrics(self, records):
        write_text_atomically(self.path / "metrics.jsonl",
                              "".join(json.dumps(r) + "\n" for r in records))

    def close(self):
        if self._tensorboard is not None:
            self._tensorboard.close()
            self._tensorboard = None
        if self._lock_file is not None:
            self._lock_file.close()  # releases the lock
            self._lock_file = None


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


def _differences(a, b, prefix=""):
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        name = f"{prefix}{key}"
        if isinstance(x, dict) and isinstance(y, dict):
            yield from _differences(x, y, name + ".")
        elif x != y:
            yield name, x, y


def checkpoint_manager(directory, every):
    """An orbax CheckpointManager keeping the last two checkpoints (saved every `every` steps)."""
    import orbax.checkpoint as ocp

    # cleanup_tmp_directories: a save cut off by a kill leaves a temporary step directory behind
    options = ocp.CheckpointManagerOptions(max_to_keep=2, save_interval_steps=every, create=True,
                                           cleanup_tmp_directories=True)
    return ocp.CheckpointManager(Path(directory).absolute(), options=options)


def save_checkpoint(manager, step, trees, extra):
    """Save named array trees ({"state": train state, ...}) and `extra` (JSON: the data iterator's
    state) as the checkpoint of `step`, and wait until it is committed."""
    import orbax.checkpoint as ocp

    args = {name: ocp.args.StandardSave(_host_values(_boxed(tree))) for name, tree in trees.items()}
    manager.save(step, args=ocp.args.Composite(extra=ocp.args.JsonSave(extra), **args), force=True)
    manager.wait_until_finished()


def restore_checkpoint(manager, like):
    """(step, {name: tree}, extra) of the latest readable checkpoint, each tree placed like like[name]
    (same shapes, dtypes and shardings); None if there is none. Unreadable newer ones are set aside."""
    import jax
    import orbax.checkpoint as ocp

    from nash_jax.parallel import barrier, is_writer

    def target(leaf):  # host values come back as numpy arrays, the rest placed like `leaf`
        return _host_value(leaf) if _is_host_local(leaf) else ocp.utils.to_shape_dtype_struct(leaf)

    args = {name: ocp.args.StandardRestore(jax.tree.map(target, _boxed(tree))) for name, tree in like.items()}
    unreadable = []
    for step in sorted(manager.all_steps(), reverse=True):  # the newest that reads
        try:
            restored = manager.restore(step, args=ocp.args.Composite(extra=ocp.args.JsonRestore(),
                                                                     **args))
        except Exception as err:  # noqa: BLE001  (orbax raises many kinds for a damaged checkpoint)
            print(f"checkpoint {manager.directory}/{step} cannot be read ({type(err).__name__}: "
                  f"{str(err)[:200]}); trying an older one", file=sys.stderr)
            unreadable.append((step, err))
            continue
        if unreadable:  # set aside (not deleted), so that their steps can be saved again
            if is_writer():
                for bad, _ in unreadable:
                    os.replace(Path(manager.directory) / str(bad),
                               Path(manager.directory).parent / f"unreadable-checkpoint-{bad}")
            barrier("checkpoints set aside")
            manager.reload()
        trees = {name: jax.tree.map(_placed_like, _unboxed(restored[name], like[name]), like[name])
                 for name in like}
        return step, trees, restored["extra"]
    if unreadable:
        step, err = unreadable[0]
        raise ValueError(f"no checkpoint in {manager.directory} can be read (the newest, {step}: "
                         f"{type(err).__name__}: {str(err)[:300]}); restore them, or delete the folder "
                         "to redo the stage")
    return None


def _is_host_local(leaf):
    """A numpy array, or a jax array on this process's devices only while the run spans several
    processes (a small replicated value such as RAE baselines): orbax saves these from the host."""
    import jax

    if isinstance(leaf, np.ndarray):
        return True
    return isinstance(leaf, jax.Array) and jax.process_count() > 1 and leaf.is_fully_addressable


def _host_value(leaf):
    return np.asarray(leaf)


def _host_values(tree):
    import jax

    return jax.tree.map(lambda x: _host_value(x) if _is_host_local(x) else x, tree)


def _placed_like(restored, like):
    import jax

    if isinstance(like, jax.Array) and isinstance(restored, np.ndarray):
        return jax.device_put(restored, like.sharding)
    return restored


def _boxed(tree):
    """A lone array (a scalar baseline) as {"array": it}: orbax saves containers of arrays."""
    import jax

    return {"array": tree} if jax.tree_util.treedef_is_leaf(jax.tree.structure(tree)) else tree


def _unboxed(restored, like):
    import jax

    return restored["array"] if jax.tree_util.treedef_is_leaf(jax.tree.structure(like)) else restored
