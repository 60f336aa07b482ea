"""Credit for one round: comparison groups (solvers within their artifact, injectors within their
repository), each role's advantages, the round's host-side figures, and the policy-gradient batch."""

import numpy as np

from nash_jax.rollout.batches import pg_batch
from nash_jax.selfplay.episodes import Role, role_advantages
from nash_jax.tasks.code.ssr_checks import CHECKS
from nash_jax.recipes.bug_injection.game import UNFINISHED, UNPARSED

FAILURES = (UNPARSED, UNFINISHED, *CHECKS)  # what an invalid artifact failed first, in check order


def learner_rows(config, rnd, capacity):
    """(rows [(prompt ids, rollout, advantage)], step metrics) of a round's complete episodes."""
    b = config.bug_injection
    rollouts, roles, _, rewards, advantage = role_advantages(rnd.episodes, capacity,
                                                             b.injector_advantage, b.solver_advantage)
    metrics = round_metrics(b, rnd)
    solver = roles == Role.SOLVER
    metrics["solver_reward"] = float(rewards[solver].mean()) if solver.any() else float("nan")
    metrics["injector_reward"] = float(rewards[~solver].mean())
    rows = [(rnd.prompts[r.uid], r, float(a)) for r, a in zip(rollouts, advantage)]
    metrics["trained_rows"] = float(len(rows))
    return rows, metrics


def round_metrics(b, rnd):
    """Validity, the count of each first failure, the solve rates and their spread over k/G."""
    verdicts = [v for _, _, v in rnd.artifacts]
    rates = np.array(list(rnd.solve_rates.values()))
    G = b.solvers_per_artifact
    out = {"valid_artifact_rate": float(np.mean([v.valid for v in verdicts])),
           "mean_solve_rate": float(rates.mean()) if len(rates) else float("nan")}
    for name in FAILURES:
        out[f"failed_{name}"] = float(sum(v.failure == name for v in verdicts))
    for k in range(G + 1):
        out[f"solve_rate_{k}_of_{G}"] = float(np.mean(np.isclose(rates, k / G))) if len(rates) else 0.0
    return out


def learner_batch(rows, pad_id, capacity, width=None):
    """The pg batch of [(prompt ids, rollout, advantage)], padded to `capacity` rows of `width`
    tokens (rollouts.pg_batch)."""
    return pg_batch([p for p, _, _ in rows], [r.tokens.tolist() for _, r, _ in rows],
                    [r.logprobs for _, r, _ in rows], [a for _, _, a in rows], pad_id, capacity,
                    width)
