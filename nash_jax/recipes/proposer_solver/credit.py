"""Credit for one round: comparison groups (solvers within their problem, proposers within their source),
each role's advantages, the rows the update trains on (R-Zero's alternating phases and p̂ band), and
the round's host-side figures."""

import numpy as np

from nash_jax.recipes.proposer_solver.config import SCHEDULES
from nash_jax.recipes.proposer_solver.rounds import HELDOUT
from nash_jax.selfplay.episodes import Role, role_advantages
from nash_jax.selfplay.two_role import trained_rows


def learner_rows(config, game, rnd, capacity, proposer_phase, solver_phase):
    """(rows [(prompt ids, rollout, advantage)], step metrics) of a round's complete episodes."""
    ps = config.proposer_solver
    lo, hi = ps.band
    if SCHEDULES[ps.schedule].band:
        for episode in rnd.episodes:
            for r in episode.rollouts:
                band_ok = r.role == Role.SOLVER and lo <= rnd.scored[r.parent].p_hat <= hi
                r.trainable = proposer_phase if r.role == Role.PROPOSER else (solver_phase and band_ok)
    rollouts, roles, groups, rewards, advantage = role_advantages(rnd.episodes, capacity,
                                                                  ps.proposer_advantage, ps.solver_advantage)
    metrics = round_metrics(ps, rnd, rollouts, roles, groups, rewards)
    rows = trained_rows(rnd, rollouts, advantage)
    metrics["trained_rows"] = float(len(rows))
    return rows, metrics


def round_metrics(ps, rnd, rollouts=None, roles=None, groups=None, rewards=None):
    """Host-side figures of one round: validity, p̂, learnability, signal, parsing, pseudo-labels."""
    n = len(rnd.records)
    valid = [p.valid for _, _, p in rnd.records]
    scored = list(rnd.scored.values())
    p_hat = np.array([s.p_hat for s in scored])
    replies = len(scored) * ps.solvers_per_problem
    out = {"valid_proposal_rate": float(np.mean(valid)) if n else 0.0,
           "mean_p_hat": float(p_hat.mean()) if len(p_hat) else float("nan"),
           "mean_learnability": float(np.mean(4 * p_hat * (1 - p_hat))) if len(p_hat) else 0.0,
           "signal_share": float(np.mean((p_hat > 0) & (p_hat < 1))) if len(p_hat) else 0.0,
           "incomplete_episodes": float(rnd.incomplete),
           "cut_solver_replies": float(rnd.cut_replies),
           "unparsed_share": float(sum(s.unparsed for s in scored) / replies) if replies else 0.0,
           "heldout_collisions": float(sum(p.reason == HELDOUT for _, _, p in rnd.records))}
    labelled = [s.label_correct for s in scored if s.label_correct is not None]
    if ps.answer_source == "majority":
        out["pseudo_label_accuracy"] = float(np.mean(labelled)) if labelled else float("nan")
    if rollouts is not None:
        solver = roles == Role.SOLVER
        out["solver_reward"] = float(rewards[solver].mean()) if solver.any() else float("nan")
        out["proposer_reward"] = float(rewards[~solver].mean()) if (~solver).any() else float("nan")
    return out
