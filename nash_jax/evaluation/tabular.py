"""Tabular preference games from files: load one, solve it every way `core.game` knows, show it.

A game file is YAML or JSON:

    responses: [A, B, C]
    matrix: [[0.5, 0.9, 0.3], ...]        # P[i][j] = P(responses[i] ≻ responses[j])
  or
    wins: [[A, B, 0.9], [C, A, 0.7], ...]  # [winner, loser, P(winner ≻ loser)], one per pair
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from nash_jax.core import game
from nash_jax.runs import write_atomically
from nash_jax.config.yaml_files import safe_load_unique

GAME_KEYS = {"responses", "matrix", "wins", "description"}


@dataclass(frozen=True)
class Game:
    responses: list[str]
    pref: np.ndarray  # [K, K] validated


def load_game(path):
    """Read a game file; raise ValueError saying what is wrong and where."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"game file {path} does not exist")
    try:
        spec = safe_load_unique(path.read_text())  # YAML is a superset of JSON
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML/JSON: {err}") from None
    try:
        return game_from_spec(spec)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


def game_from_spec(spec):
    if not isinstance(spec, dict):
        raise ValueError("expected a mapping with `responses` and `matrix` or `wins`")
    unknown = set(spec) - GAME_KEYS
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}; allowed: {sorted(GAME_KEYS)}")
    responses = spec.get("responses")
    if (not isinstance(responses, list) or not responses
            or not all(isinstance(r, (str, int)) for r in responses)):
        raise ValueError("`responses` must be a non-empty list of names")
    responses = [str(r) for r in responses]
    if len(set(responses)) != len(responses):
        raise ValueError(f"`responses` has repeated names: {responses}")
    if ("matrix" in spec) == ("wins" in spec):
        raise ValueError("give exactly one of `matrix` (K×K) and `wins` ([winner, loser, p] list)")
    if "matrix" in spec:
        pref = _matrix_from_rows(spec["matrix"], len(responses))
    else:
        pref = _matrix_from_wins(spec["wins"], responses)
    return Game(responses, game.validate_preference_matrix(pref, names=responses))


def _matrix_from_rows(rows, k):
    if not isinstance(rows, list) or len(rows) != k or any(
            not isinstance(row, list) or len(row) != k for row in rows):
        raise ValueError(f"`matrix` must be {k} rows of {k} numbers, one per response")
    for i, row in enumerate(rows):
        for j, p in enumerate(row):
            if isinstance(p, bool) or not isinstance(p, (int, float)):
                raise ValueError(f"matrix[{i}][{j}]={p!r}; expected a number")
    return np.array(rows, dtype=np.float64)


def _matrix_from_wins(wins, responses):
    index = {name: i for i, name in enumerate(responses)}
    k = len(responses)
    pref = np.full((k, k), np.nan)
    np.fill_diagonal(pref, 0.5)
    if not isinstance(wins, list):
        raise ValueError("`wins` must be a list of [winner, loser, p]")
    for n, item in enumerate(wins):
        if not isinstance(item, list) or len(item) != 3:
            raise ValueError(f"wins[{n}]={item!r}; expected [winner, loser, p]")
        winner, loser, p = str(item[0]), str(item[1]), item[2]
        for name in (winner, loser):
            if name not in index:
                raise ValueError(f"wins[{n}] names {name!r}, which is not in responses {responses}")
        i, j = index[winner], index[loser]
        if i == j:
            raise ValueError(f"wins[{n}] compares {winner!r} with itself")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise ValueError(f"wins[{n}] has p={p!r}; expected a probability in [0, 1]")
        if not np.isnan(pref[i, j]):
            raise ValueError(f"wins[{n}] gives the pair ({winner!r}, {loser!r}) a second time")
        pref[i, j], pref[j, i] = p, 1.0 - p
    missing = [(responses[i], responses[j]) for i in range(k) for j in range(i + 1, k)
               if np.isnan(pref[i, j])]
    if missing:
        raise ValueError(f"`wins` leaves pairs without a probability: {missing}")
    return pref


def solve_game(g, *, eta=1.0, steps=1000, beta=0.1, taus=(0.1, 0.02)):
    """Every solution concept for one game, as the JSON-ready dict that `nash-jax game` prints."""
    pref = g.pref
    k = len(g.responses)
    nash = game.nash_equilibrium(pref)
    scores = game.bradley_terry(pref)
    rlhf = game.rlhf_optimum(scores, beta)
    mwu = game.multiplicative_weights(pref, eta, steps)
    nash_mds = [game.nash_md(pref, tau, steps) for tau in taus]

    def policy(pi):
        return {"policy": _floats(pi), "exploitability": game.exploitability(pref, pi)}

    return {
        "responses": g.responses,
        "nash": {"policy": _floats(nash.policy), "value": nash.value,
                 "exploitability": game.exploitability(pref, nash.policy)},
        "bradley_terry": _floats(scores),
        "rlhf": {"beta": beta, **policy(rlhf)},
        "uniform": {"exploitability": game.exploitability(pref, np.full(k, 1.0 / k))},
        "mwu": {"eta": eta, "steps": steps, "last": policy(mwu.last), "average": policy(mwu.average),
                "last_trace": _floats(mwu.last_trace), "average_trace": _floats(mwu.average_trace)},
        "nash_md": [{"tau": run.tau, "steps": steps, **policy(run.last), "trace": _floats(run.trace)}
                    for run in nash_mds],
    }


def _floats(array):
    return [float(x) for x in np.asarray(array)]


def format_summary(g, summary, title=""):
    """A readable table: the matrix, then every policy's mixture and exploitability."""
    names = g.responses
    width = max(7, *(len(n) + 1 for n in names))
    label_width = 36
    lines = [f"{title}: {len(names)} responses" if title else f"{len(names)} responses", "",
             "P(row ≻ column)",
             " " * width + "".join(f"{n:>{width}}" for n in names)]
    for name, row in zip(names, g.pref):
        lines.append(f"{name:<{width}}" + "".join(f"{x:>{width}.3f}" for x in row))
    lines += ["", f"{'policy':<{label_width}}" + "".join(f"{n:>{width}}" for n in names)
              + f"{'exploitability':>16}"]

    def row(label, pi, e):
        cells = "".join(f"{x:>{width}.4f}" for x in pi) if pi is not None else " " * width * len(names)
        lines.append(f"{label:<{label_width}}{cells}{e:>16.6f}")

    nash, mwu = summary["nash"], summary["mwu"]
    row("Nash equilibrium (LP)", nash["policy"], nash["exploitability"])
    row("uniform", [1.0 / len(names)] * len(names), summary["uniform"]["exploitability"])
    row(f"RLHF optimum (BT reward, beta={summary['rlhf']['beta']:g})", summary["rlhf"]["policy"],
        summary["rlhf"]["exploitability"])
    row(f"MWU last iterate (eta={mwu['eta']:g})", mwu["last"]["policy"], mwu["last"]["exploitability"])
    row("MWU average iterate", mwu["average"]["policy"], mwu["average"]["exploitability"])
    for run in summary["nash_md"]:
        row(f"Nash-MD last iterate (tau={run['tau']:g})", run["policy"], run["exploitability"])
    lines += ["", f"after {mwu['steps']} steps; Nash value {nash['value']:.6f}",
              "Bradley-Terry scores: " + ", ".join(
                  f"{n} {s:+.4f}" for n, s in zip(names, summary["bradley_terry"]))]
    return "\n".join(lines)


PLOT_SOFTWARE = "nash-jax game"  # the PNG's Software text: a plot this command drew may be replaced


def is_our_plot(path):
    """Whether `path` is a PNG that plot_traces wrote (its Software text is PLOT_SOFTWARE)."""
    path = Path(path)
    if not path.is_file() or path.is_symlink():
        return False
    with open(path, "rb") as f:
        head = f.read(4096)  # the text chunks come right after the header
    return head.startswith(b"\x89PNG") and b"Software\x00" + PLOT_SOFTWARE.encode() in head


def plot_traces(summary, path, title=""):
    """Exploitability against step for every method, written atomically as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    floor = 1e-9  # exploitability can be exactly 0; keep it on a log axis
    fig, ax = plt.subplots(figsize=(7, 4.5))
    mwu = summary["mwu"]
    steps = np.arange(1, mwu["steps"] + 1)
    ax.plot(steps, np.maximum(mwu["last_trace"], floor), label=f"MWU last (η={mwu['eta']:g})")
    ax.plot(steps, np.maximum(mwu["average_trace"], floor), label="MWU average")
    for run in summary["nash_md"]:
        ax.plot(np.arange(1, run["steps"] + 1), np.maximum(run["trace"], floor),
                label=f"Nash-MD last (τ={run['tau']:g})")
    ax.axhline(max(summary["uniform"]["exploitability"], floor), color="grey", ls=":",
               label="uniform")
    ax.axhline(max(summary["rlhf"]["exploitability"], floor), color="black", ls="--",
               label=f"RLHF optimum (β={summary['rlhf']['beta']:g})")
    ax.set(xscale="log", yscale="log", xlabel="step", ylabel="exploitability  max_y P(y ≻ π) − 1/2",
           title=title or "exploitability by method")
    ax.legend(fontsize=8)
    fig.tight_layout()
    write_atomically(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120,
                                                      metadata={"Software": PLOT_SOFTWARE}))
    plt.close(fig)
