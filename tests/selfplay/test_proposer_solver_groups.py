"""Comparison groups of proposer-solver self-play on a hand-built round: solver advantages come from
the solvers of the same problem only, proposer advantages from the proposals of the same source only,
and a step's batch carries per-token behaviour log-probs aligned with its tokens."""

from types import SimpleNamespace

import numpy as np
import pytest

from nash_jax.recipes import proposer_solver as ps
from nash_jax.selfplay.answer_sources import Proposal, Scored, Source
from nash_jax.selfplay.episodes import EpisodeAssembler, Role, Rollout


def hand_built_round():
    """Source A: proposals 0 (solvers 1, 1, 0) and 1 (solvers 1, 0, 0); source B: proposal 2 (invalid,
    reward −1) and 3 (solvers 1, 1, 1). Proposer rewards are learnability 4p(1 − p)."""
    a, b = Source("A", "seed", "1 + 1"), Source("B", "seed", "2 + 2")
    solver_rewards = {0: [1, 1, 0], 1: [1, 0, 0], 3: [1, 1, 1]}
    proposer_rewards = {0: 8 / 9, 1: 8 / 9, 2: -1.0, 3: 0.0}
    assembler, uid, proposals, scored, prompts = EpisodeAssembler(), 4, [], {}, {}
    for p, source in enumerate((a, a, b, b)):
        valid = p in solver_rewards
        assembler.open(p, {Role.PROPOSER: 1, Role.SOLVER: 3} if valid else {Role.PROPOSER: 1})
        assembler.add(Rollout(uid=p, role=Role.PROPOSER, episode=p, source=source.id,
                              reward=proposer_rewards[p], tokens=np.array([5, 6, 3]),
                              logprobs=np.array([-0.5, -0.25, -0.125]), finished=True))
        prompts[p] = [2, 4, 7]
        proposals.append((source, "x", Proposal(valid, "" if valid else "bad")))
        if valid:
            rewards = solver_rewards[p]
            scored[p] = Scored(np.array(rewards, float), float(np.mean(rewards)), 0, 0)
            for r in rewards:
                assembler.add(Rollout(uid=uid, role=Role.SOLVER, episode=p, parent=p, reward=float(r),
                                      tokens=np.array([9, 3]), logprobs=np.array([-1.0, -2.0]),
                                      finished=True))
                prompts[uid] = [2, 8]
                uid += 1
    return ps.Round(assembler.pop_complete(), prompts, proposals, scored, 0)


def config(**fields):
    return SimpleNamespace(proposer_solver=ps.ProposerSolverConfig(
        solvers_per_problem=3, proposer_advantage="drgrpo", solver_advantage="drgrpo", **fields))


def advantages_by_uid(rows):
    return {r.uid: a for _, r, a in rows}


def test_solver_advantages_use_their_problem_and_proposer_advantages_their_source():
    rows, metrics = ps.learner_rows(config(), None, hand_built_round(), 16, True, True)
    got = advantages_by_uid(rows)
    # solvers of proposal 0 (rewards 1, 1, 0): baseline 2/3, whatever other problems did
    np.testing.assert_allclose([got[u] for u in (4, 5, 6)], [1 / 3, 1 / 3, -2 / 3], atol=1e-6)
    np.testing.assert_allclose([got[u] for u in (7, 8, 9)], [2 / 3, -1 / 3, -1 / 3], atol=1e-6)
    np.testing.assert_allclose([got[u] for u in (10, 11, 12)], [0, 0, 0], atol=1e-6)
    # proposers: source A holds 0 and 1 (equal rewards 8/9), source B holds 2 (−1) and 3 (0)
    np.testing.assert_allclose([got[u] for u in (0, 1, 2, 3)], [0, 0, -0.5, 0.5], atol=1e-6)
    assert metrics["signal_share"] == pytest.approx(2 / 3)
    assert metrics["valid_proposal_rate"] == 0.75


def test_grpo_and_rloo_modes_per_role():
    rows, _ = ps.learner_rows(SimpleNamespace(
        proposer_solver=ps.ProposerSolverConfig(solvers_per_problem=3, proposer_advantage="rloo",
                                                solver_advantage="grpo")),
        None, hand_built_round(), 16, True, True)
    got = advantages_by_uid(rows)
    std = np.std([1, 1, 0], ddof=1)
    np.testing.assert_allclose([got[u] for u in (4, 5, 6)], np.array([1, 1, -2]) / 3 / (std + 1e-6),
                               atol=1e-5)
    np.testing.assert_allclose([got[u] for u in (2, 3)], [-1.0, 1.0], atol=1e-6)  # rloo: r − the other


def test_alternating_phases_train_one_role_and_band_filter_the_solvers():
    cfg = config(schedule="alternating", band=[0.25, 0.75])
    rows, _ = ps.learner_rows(cfg, None, hand_built_round(), 16, True, False)
    assert {r.role for _, r, _ in rows} == {Role.PROPOSER}
    rows, _ = ps.learner_rows(cfg, None, hand_built_round(), 16, False, True)
    # solver phase: proposals 0 and 1 (p̂ = 2/3, 1/3) are in the band, proposal 3 (p̂ = 1) is not
    assert sorted(r.uid for _, r, _ in rows) == [4, 5, 6, 7, 8, 9]


def test_the_batch_aligns_behaviour_logprobs_with_tokens_and_pads_with_masked_rows():
    rows, _ = ps.learner_rows(config(), None, hand_built_round(), 16, True, True)
    batch = ps.learner_batch(rows, pad_id=1, capacity=24)
    assert batch["tokens"].shape == (24, 8) and batch["behaviour_logp"].shape == (24, 8)
    first = [i for i, (_, r, _) in enumerate(rows) if r.uid == 0][0]
    np.testing.assert_array_equal(batch["tokens"][first], [1, 1, 2, 4, 7, 5, 6, 3])
    np.testing.assert_array_equal(batch["behaviour_logp"][first], [0, 0, 0, 0, 0, -0.5, -0.25, -0.125])
    np.testing.assert_array_equal(batch["loss_mask"][first], [0, 0, 0, 0, 0, 1, 1, 1])
    assert not batch["loss_mask"][len(rows):].any() and not batch["advantage"][len(rows):].any()
