"""Credit for one round: comparison groups (solvers within their artifact, injectors within their
repository), each role's advantages, the round's host-side figures, and the rows the update trains on."""

import numpy as np

from nash_jax.selfplay.episodes import Role, role_advantages
from nash_jax.selfplay.two_role import trained_rows
from nash_jax.tasks.code.ssr_checks import CHECKS
from nash_jax.recipes.ssr.game import UNFINISHED, UNPARSED

FAILURES = (UNPARSED, UNFINISHED, *CHECKS)  # what an invalid artifact failed first, in check order


def learner_rows(config, rnd, capacity):
    """(rows [(prompt ids, rollout, advantage)], step metrics) of a round's complete episodes."""
    b = config.ssr
    rollouts, roles, _, rewards, advantage = role_advantages(rnd.episodes, capacity,
                                                             b.injector_advantage, b.solver_advantage)
    metrics = round_metrics(b, rnd)
    solver = roles == Role.SOLVER
    metrics["solver_reward"] = float(rewards[solver].mean()) if solver.any() else float("nan")
    metrics["injector_reward"] = float(rewards[~solver].mean())
    rows = trained_rows(rnd, rollouts, advantage)
    metrics["trained_rows"] = float(len(rows))
    return rows, metrics


def round_metrics(b, rnd):
    """Validity, the count of each first failure, the solve rates and their spread over k/G."""
    verdicts = [v for _, _, v in rnd.records]
    rates = np.array(list(rnd.scored.values()))
    G = b.solvers_per_artifact
    out = {"valid_artifact_rate": float(np.mean([v.valid for v in verdicts])),
           "mean_solve_rate": float(rates.mean()) if len(rates) else float("nan")}
    for name in FAILURES:
        out[f"failed_{name}"] = float(sum(v.failure == name for v in verdicts))
    for k in range(G + 1):
        out[f"solve_rate_{k}_of_{G}"] = float(np.mean(np.isclose(rates, k / G))) if len(rates) else 0.0
    return out
