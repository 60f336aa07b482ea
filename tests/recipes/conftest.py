"""Small recipe configs (the demo's, shrunk to seconds) and a runner for killed subprocess runs."""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import yaml
from safetensors.numpy import load_file

from tests.processes import FAST_COMPILE_FLAGS, USER_CLI, xla_flags

CONFIGS = Path(__file__).parents[2] / "configs"
REPO = Path(__file__).parents[2]

# Sizes keep every batch a multiple of the 8 test devices (the mesh is fsdp over all of them).
SMALL = {
    "warm_start": {"steps": 16, "batch_size": 16, "hidden_size": 32},
    "data": {"path": "builtin:synthetic:56"},
    "sampling": {"max_new_tokens": 8, "prompts_per_batch": 16},
    "judge": {"prompts_per_call": 16},
    "train": {"checkpoint_every": 4},
    "eval": {"prompts": 8, "samples_per_prompt": 2, "average_iterates": False},
}
# what a config of each recipe adds (a config holds its own recipe's section and the shared fields it
# reads, nothing else)
SMALL_BY_RECIPE = {
    "sppo": {"sppo": {"iterations": 2}, "sampling": {"num_samples": 3},
             "train": {"batch_size": 8, "epochs": 2}},
    "nash_md": {"nash_md": {"steps": 8, "prompts_per_step": 8, "snapshots": 2, "eval_every": 4}},
}


def small_config(tmp_path, base="demo", name="small", recipe=None, **sections):
    """Write the shipped `base` config (with `recipe` instead of its own, if given) with SMALL, its
    recipe's SMALL_BY_RECIPE and `sections` merged in; return its path."""
    values = yaml.safe_load((CONFIGS / f"{base}.yaml").read_text())
    if recipe is not None:
        values = {k: v for k, v in values.items() if k != values["recipe"]}
        values["recipe"] = recipe
    for layer in (SMALL, SMALL_BY_RECIPE.get(values["recipe"], {}), sections):
        for section, fields in layer.items():
            values.setdefault(section, {}).update(fields)
    values["name"] = name
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def run_cli(config_path, run_dir, crash_at=None, timeout=900, *, one_device=False, args=()):
    """`nash-jax run CONFIG run_dir=... [args]` in a subprocess, killed at `crash_at`;
    `one_device`: on the one CPU device `nash-jax run` sees outside the tests (a demo's figures)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("NASH_JAX_CRASH_AT", None)
    if one_device:  # and with XLA's own flags: a demo's claim is tested as a user's run makes it
        env["XLA_FLAGS"] = " ".join(f for f in xla_flags().split() if f not in FAST_COMPILE_FLAGS)
    if crash_at:
        env["NASH_JAX_CRASH_AT"] = crash_at
    return subprocess.run([*USER_CLI, "run", str(config_path),
                           f"run_dir={run_dir}", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, check=False)


def run_on_real_model(config_name, model_dir, tmp_path_factory, args):
    """configs/CONFIG_NAME.yaml on a real checkpoint `model_dir` through the CLI on one device, with
    `args` (a shortened run); → (run directory, its stdout, its report.json)."""
    run_dir = tmp_path_factory.mktemp(config_name) / "run"
    result = run_cli(CONFIGS / f"{config_name}.yaml", run_dir, one_device=True,
                     args=(*args, f"model.path={model_dir}"))
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir, result.stdout, json.loads((run_dir / "report.json").read_text())


def run_two_processes(config_path, run_dir, timeout=600):
    """`nash-jax run` as two processes × 4 CPU devices joined over 127.0.0.1 (gloo); returns
    (return codes, output of each)."""
    from tests.processes import free_port, run_processes

    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(devices=4))
    env.pop("NASH_JAX_CRASH_AT", None)
    return run_processes(
        [[*USER_CLI, "run", str(config_path), f"run_dir={run_dir}",
          "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i)]
         for i in range(2)], timeout=timeout, cwd=REPO, env=env)


def policy_tensors(policy_dir):
    return load_file(Path(policy_dir) / "model.safetensors")


def assert_same_parameters(dir_a, dir_b, atol=0.0):
    a, b = policy_tensors(dir_a), policy_tensors(dir_b)
    assert sorted(a) == sorted(b)
    for key in a:
        diff = float(np.max(np.abs(a[key] - b[key])))
        assert diff <= atol, f"{key}: max |Δ| = {diff}"


def nested_config(tmp_path, base, name, *layers):
    """Write the shipped `base` config with `layers` merged in two levels deep (a section's sub-dicts,
    such as `anchors`, update the base's); return its path."""
    values = yaml.safe_load((CONFIGS / f"{base}.yaml").read_text())
    for layer in layers:
        for key, value in layer.items():
            if not isinstance(value, dict):
                values[key] = value
                continue
            node = values.setdefault(key, {})
            for k, v in value.items():
                node[k] = {**node.get(k, {}), **v} if isinstance(v, dict) else v
    values["name"] = name
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def whole_run_of(tmp_path_factory, name, make_config):
    """(tmp, config path, result) of one uninterrupted `nash-jax run` of make_config(tmp) into
    tmp/whole: the run a test module's assertions share."""
    tmp = tmp_path_factory.mktemp(name)
    path = make_config(tmp)
    result = run_cli(path, tmp / "whole")
    assert result.returncode == 0, result.stderr[-3000:]
    return tmp, path, result


def assert_same_metrics(run_a, run_b, stage_prefix):
    """Every metrics.jsonl record of `run_a` whose stage starts with `stage_prefix` is in `run_b`,
    equal but for its wall times (keys ending in `_s`: a resumed run against an uninterrupted one)."""
    from nash_jax.runs import read_metrics

    ours = {(m["stage"], m["step"]): m for m in read_metrics(Path(run_a) / "metrics.jsonl")}
    theirs = {(m["stage"], m["step"]): m for m in read_metrics(Path(run_b) / "metrics.jsonl")}
    for key, m in ours.items():
        if key[0].startswith(stage_prefix):
            same = {k: v for k, v in m.items() if not k.endswith("_s")}
            assert {k: v for k, v in theirs[key].items() if not k.endswith("_s")} == same, key
