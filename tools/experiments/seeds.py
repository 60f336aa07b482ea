"""One config over seeds, simulated device counts and variants, and one table of its anchors.

    python tools/experiments/seeds.py configs/kuhn_demo.yaml --seeds 5 --devices 1,8 \\
        --compare game_selfplay.advantage=rae,grpo [key=value ...] [--out DIR] [--jobs N]

Every run is `nash-jax run CONFIG seed=S [key=value ...] [variant] run_dir=OUT/VARIANT/devices_D/seed_S`,
a process of its own (its log beside its run directory); `--devices D` runs it on D CPU devices
simulated by XLA (without --devices: on the devices the machine has); `--jobs N` runs N at once. A
sweep that is stopped resumes where it stopped: a finished run (its report.json) is read, not rerun,
and an interrupted one resumes from its last checkpoint, as `nash-jax run` resumes any run.

The anchors of a run are what its report.json tracks over evaluation steps: the proposer-solver
recipe's `anchors`, game self-play's `exploitability`, and otherwise the numeric fields of
`per_iterate` (step = iterate). OUT/seeds.json holds, for each variant, device count and anchor, every
seed's values at every step with their mean and spread (sample standard deviation), and the
seed-paired difference of each variant after the first from the first. OUT/seeds.md is the same as tables of the first and last
step; OUT/seeds.png draws every seed's curve and the mean.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from nash_jax.runs.files import write_atomically, write_text_atomically  # noqa: E402

DEVICE_FLAG = "--xla_force_host_platform_device_count"


# ---------------------------------------------------------------------------------------------------
# what a sweep runs


def variants(compare):
    """--compare KEY=A,B,... -> [(label, [override])]; none: one variant with no override."""
    if not compare:
        return [("base", [])]
    key, sep, values = compare.partition("=")
    choices = [v for v in values.split(",") if v]
    if not sep or not key or len(choices) < 2 or len(set(choices)) != len(choices):
        raise SystemExit(f"--compare {compare!r}: expected KEY=VALUE,VALUE[,...] with at least two "
                         "distinct values, e.g. game_selfplay.advantage=rae,grpo")
    return [(f"{key.rsplit('.', 1)[-1]}={v}", [f"{key}={v}"]) for v in choices]


def device_counts(text):
    """--devices 1,8 -> [1, 8]; none: [None], the machine's own devices."""
    if text is None:
        return [None]
    try:
        counts = [int(v) for v in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1 or len(set(counts)) != len(counts):
        raise SystemExit(f"--devices {text!r}: expected distinct positive counts, e.g. 1,8")
    return counts


def device_env(devices):
    """The environment of a run on `devices` simulated CPU devices (None: as this process has it)."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path)
    if devices is not None:
        flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(DEVICE_FLAG)]
        env["XLA_FLAGS"] = " ".join(flags + ([f"{DEVICE_FLAG}={devices}"] if devices > 1 else []))
        env["JAX_PLATFORMS"] = "cpu"
    return env


def run_dir(out, variant, devices, seed):
    return out / variant / ("devices_default" if devices is None else f"devices_{devices}") / f"seed_{seed}"


class RunFailed(Exception):
    pass


def run_one(config, directory, seed, devices, overrides):
    """Run (or resume, or read) one run; returns its report. A failed run stops the sweep, naming it."""
    report = directory / "report.json"
    if report.is_file():
        return json.loads(report.read_text())
    log = directory.parent / f"{directory.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "nash_jax.cli", "run", str(config), f"seed={seed}", *overrides,
               f"run_dir={directory}"]
    with open(log, "a") as out:
        code = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=device_env(devices),
                              check=False).returncode
    if code != 0 or not report.is_file():
        tail = log.read_text().splitlines()[-15:]
        # a run refused before any work leaves no run directory: there is nothing to resume
        then = ("rerun the same command to resume it" if (directory / "manifest.json").is_file() else
                "it was refused before it started: fix what it says, then rerun the same command")
        raise RunFailed(f"run {directory} failed (exit {code}); {then}. The end of {log}:\n"
                        + "\n".join(tail))
    return json.loads(report.read_text())


# ---------------------------------------------------------------------------------------------------
# the table (pure)


def anchors(report):
    """{anchor: {"step": [...], "value": [...]}} from a report.json (anchors with values only)."""
    section = report.get("anchors")
    if isinstance(section, dict) and section.get("step"):
        return {k: {"step": list(section["step"]), "value": list(v)} for k, v in section.items()
                if k != "step" and _scalars(v) and len(v) == len(section["step"])}
    e = report.get("exploitability")
    if isinstance(e, dict) and e.get("step"):  # empty for a game without an exact evaluator
        return {"exploitability": {"step": list(e["step"]), "value": list(e["value"])}}
    extra = set(report.get("extra_rows") or ())  # the average and best-of-n rows are not iterates
    rows = [r for r in report.get("per_iterate") or [] if r.get("iterate") not in extra]
    keys = [k for k in (rows[0] if rows else {}) if all(_number(r.get(k)) for r in rows)]
    return {k: {"step": list(range(len(rows))), "value": [r[k] for r in rows]} for k in keys}


def _shown(v):
    return "n/a" if v is None else f"{v:.4f}"


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _scalars(v):
    return isinstance(v, list) and all(x is None or _number(x) for x in v)


def spread(values):
    """(mean, sample standard deviation; 0 for one value) over axis 0, ignoring missing values."""
    a = np.asarray(values, np.float64)
    n = np.sum(~np.isnan(a), axis=0)
    mean = np.nanmean(a, axis=0)
    std = np.sqrt(np.nansum((a - mean) ** 2, axis=0) / np.maximum(n - 1, 1))
    return mean.tolist(), std.tolist()


def table(results, seeds):
    """results {(variant, devices, seed): report} -> the sweep's table (see the module docstring)."""
    groups = {}
    for (variant, devices, seed), report in results.items():
        groups.setdefault((variant, devices), {})[seed] = anchors(report)
    out = {"seeds": list(seeds), "groups": []}
    for (variant, devices), by_seed in groups.items():
        names = sorted(set.intersection(*(set(a) for a in by_seed.values())))
        group = {"variant": variant, "devices": devices, "anchors": {}}
        for name in names:
            steps = by_seed[seeds[0]][name]["step"]
            per_seed = [[np.nan if v is None else v for v in by_seed[s][name]["value"]] for s in seeds]
            mean, std = spread(per_seed)
            group["anchors"][name] = {"step": steps, "per_seed": per_seed, "mean": mean, "std": std}
        out["groups"].append(group)
    out["paired"] = paired_differences(out["groups"])
    return out


def paired_differences(groups):
    """Per device count, each variant after the first minus the first (a sweep's baseline), seed by
    seed, at each step, for the anchors both track over the same steps."""
    by_devices = {}
    for g in groups:
        by_devices.setdefault(g["devices"], []).append(g)
    out = []
    for devices, (first, *others) in by_devices.items():
        for other in others:
            for name in sorted(set(first["anchors"]) & set(other["anchors"])):
                a, b = first["anchors"][name], other["anchors"][name]
                if a["step"] != b["step"]:
                    continue
                diff = (np.asarray(b["per_seed"]) - np.asarray(a["per_seed"])).tolist()
                mean, std = spread(diff)
                out.append({"devices": devices, "anchor": name, "step": a["step"], "per_seed": diff,
                            "difference": f"{other['variant']} − {first['variant']}", "mean": mean,
                            "std": std})
    return out


def markdown(summary, command):
    lines = [f"# Seeds: {len(summary['seeds'])} per variant", "", f"`{command}`", "",
             "| variant | devices | anchor | first step: mean ± sd | last step: mean ± sd "
             "| last, per seed |",
             "|---|---|---|---|---|---|"]
    for g in summary["groups"]:
        for name, a in g["anchors"].items():
            per_seed = ", ".join(f"{row[-1]:.3f}" for row in a["per_seed"])
            lines.append(f"| {g['variant']} | {g['devices'] or 'default'} | {name} | step {a['step'][0]}: "
                         f"{a['mean'][0]:.4f} ± {a['std'][0]:.4f} | step {a['step'][-1]}: "
                         f"{a['mean'][-1]:.4f} ± {a['std'][-1]:.4f} | {per_seed} |")
    if summary["paired"]:
        lines += ["", "Seed-paired differences at the last step:", "",
                  "| devices | anchor | difference | mean ± sd | per seed |", "|---|---|---|---|---|"]
        for p in summary["paired"]:
            per_seed = ", ".join(f"{row[-1]:+.3f}" for row in p["per_seed"])
            lines.append(f"| {p['devices'] or 'default'} | {p['anchor']} | {p['difference']} | "
                         f"{p['mean'][-1]:+.4f} ± {p['std'][-1]:.4f} | {per_seed} |")
    return "\n".join(lines) + "\n"


def plot(summary, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({n for g in summary["groups"] for n in g["anchors"]})
    if not names:
        return
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    variants_seen = list(dict.fromkeys(g["variant"] for g in summary["groups"]))
    devices_seen = list(dict.fromkeys(g["devices"] for g in summary["groups"]))
    for ax, name in zip(axes[0], names):
        for g in summary["groups"]:
            if name not in g["anchors"]:
                continue
            a = g["anchors"][name]
            color = colors[variants_seen.index(g["variant"]) % len(colors)]
            style = ["-", "--", ":", "-."][devices_seen.index(g["devices"]) % 4]
            for row in a["per_seed"]:
                ax.plot(a["step"], row, color=color, linestyle=style, alpha=0.3, linewidth=0.8)
            ax.plot(a["step"], a["mean"], color=color, linestyle=style, linewidth=2.2,
                    label=f"{g['variant']}, {g['devices'] or 'default'} dev.")
        ax.set_title(name)
        ax.set_xlabel("step")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    write_atomically(path, lambda tmp: fig.savefig(tmp, format="png", dpi=80))
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------
# the command


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("config", type=Path)
    p.add_argument("--seeds", type=int, required=True, help="seeds 0 .. N-1")
    p.add_argument("--devices", help="simulated CPU device counts, e.g. 1,8 (default: the machine's)")
    p.add_argument("--compare", help="KEY=A,B: one variant per value, seed-paired")
    p.add_argument("--out", type=Path, help="default: runs/seeds/<config name>")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (default 1)")
    p.add_argument("overrides", nargs="*", help="key=value, as `nash-jax run` takes them")
    args = p.parse_intermixed_args(argv)
    if args.seeds < 1 or args.jobs < 1:
        p.error(f"--seeds {args.seeds} --jobs {args.jobs}: expected at least 1 of each")
    if not args.config.is_file():
        p.error(f"{args.config}: no such config file")
    bad = [o for o in args.overrides if "=" not in o or o.split("=", 1)[0] in ("seed", "run_dir")]
    if bad:
        p.error(f"overrides {bad}: expected key=value, and neither seed nor run_dir (the sweep sets them)")
    return args


def check_out(out):
    """--out must be a directory that is new, empty, or an earlier sweep's (its sweep.json): a sweep
    never writes into, or overwrites the seeds.md of, a folder of the user's."""
    if out.exists() and not out.is_dir():
        raise SystemExit(f"--out {out}: a file is there; expected a directory (new, empty, or an "
                         "earlier sweep's)")
    entries = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if entries and "sweep.json" not in entries:
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise SystemExit(f"--out {out} holds files ({shown}) but no sweep.json, so it is not a sweep's; "
                         "refusing to write into it: choose a new or empty --out")


def check_configs(config, args):
    """Every variant's config as `nash-jax run` would load it (unknown keys, bad values, the recipe's
    own checks), before any run starts: an error names the variant and the key, and nothing is
    written."""
    from nash_jax import engine
    from nash_jax.config import load_config

    for label, overrides in variants(args.compare):
        try:
            loaded = load_config(config, [*args.overrides, *overrides, "seed=0"])
            recipe = engine.get(loaded.recipe)
            if recipe.check is not None:
                recipe.check(loaded)
        except (ValueError, FileNotFoundError) as err:
            raise SystemExit(f"variant {label}: {err}") from None


def check_same_sweep(out, config, args):
    """OUT/sweep.json records what the sweep runs (the config's text included); a later command on the
    same OUT must run the same (seeds, device counts and jobs aside), or finished runs of another config
    would be read as its own."""
    what = {"config": str(config), "config_sha256": hashlib.sha256(config.read_bytes()).hexdigest(),
            "overrides": args.overrides, "compare": args.compare}
    path = out / "sweep.json"
    if path.is_file():
        before = json.loads(path.read_text())
        if before != what:
            raise SystemExit(f"{out} holds the runs of another sweep ({before}); expected {what}. "
                             "Give this sweep another --out")
    else:
        write_text_atomically(path, json.dumps(what, indent=1) + "\n")


def main(argv=None):
    args = parse(argv)
    config = args.config.resolve()
    name = (yaml.safe_load(config.read_text()) or {}).get("name", config.stem)
    out = (args.out or Path("runs") / "seeds" / name).resolve()
    seeds = list(range(args.seeds))
    plan = [(label, overrides, d, s) for label, overrides in variants(args.compare)
            for d in device_counts(args.devices) for s in seeds]
    check_out(out)
    check_configs(config, args)
    check_same_sweep(out, config, args)
    results = {}

    stopping = threading.Event()  # set by the first failure: no run starts after it

    def one(item):
        label, overrides, devices, seed = item
        if stopping.is_set():
            return None
        start = time.perf_counter()
        directory = run_dir(out, label, devices, seed)
        done = (directory / "report.json").is_file()
        try:
            report = run_one(config, directory, seed, devices, [*args.overrides, *overrides])
        except RunFailed:
            stopping.set()
            raise
        first = next(iter(anchors(report).items()), None)
        shown = (f"; {first[0]} {_shown(first[1]['value'][0])} -> {_shown(first[1]['value'][-1])}"
                 if first else "")
        how = "read" if done else f"{time.perf_counter() - start:.0f} s"
        line = f"{label} · {devices or 'default'} devices · seed {seed}: {how}{shown}"
        return (label, devices, seed), report, line

    failures = []
    with ThreadPoolExecutor(args.jobs) as pool:  # each run is a process of its own
        futures = [pool.submit(one, item) for item in plan]
        for i, future in enumerate(as_completed(futures), 1):
            try:
                outcome = future.result()
            except RunFailed as err:
                failures.append(str(err))
                continue
            if outcome is None:  # not started: an earlier run failed
                continue
            key, report, line = outcome
            results[key] = report
            print(f"[{i}/{len(plan)}] {line}", flush=True)
    if failures:
        raise SystemExit("\n\n".join(failures))
    summary = table(results, seeds)
    command = " ".join(["python tools/experiments/seeds.py", *(argv if argv is not None else sys.argv[1:])])
    summary["command"] = command
    write_text_atomically(out / "seeds.json", json.dumps(summary, indent=1) + "\n")
    write_text_atomically(out / "seeds.md", markdown(summary, command))
    plot(summary, out / "seeds.png")
    print(f"table: {out / 'seeds.md'}")
    return summary


if __name__ == "__main__":
    main()
