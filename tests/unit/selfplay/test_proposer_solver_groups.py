"""Comparison groups of proposer-solver self-play on a hand-built round: solver advantages come from
the solvers of the same problem only, proposer advantages from the proposals of the same source only,
and a step's batch carries per-token behaviour log-probs aligned with its tokens."""

from types import SimpleNamespace

import numpy as np
import pytest

from nash_jax.recipes import proposer_solver as ps
from nash_jax.recipes.proposer_solver import rounds
from nash_jax.selfplay.two_role import Check, rows_batch
from nash_jax.selfplay import answer_sources
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
        proposals.append(Check(valid, (source, "x", Proposal(valid, "" if valid else "bad"))))
        if valid:
            rewards = solver_rewards[p]
            scored[p] = Scored(np.array(rewards, float), float(np.mean(rewards)), 0, 0)
            for r in rewards:
                assembler.add(Rollout(uid=uid, role=Role.SOLVER, episode=p, parent=p, reward=float(r),
                                      tokens=np.array([9, 3]), logprobs=np.array([-1.0, -2.0]),
                                      finished=True))
                prompts[uid] = [2, 8]
                uid += 1
    return ps.Round(assembler.pop_complete(), prompts, proposals, scored, 0, 0)


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
    batch = rows_batch(rows, pad_id=1, capacity=24)
    assert batch["tokens"].shape == (24, 8) and batch["behaviour_logp"].shape == (24, 8)
    first = [i for i, (_, r, _) in enumerate(rows) if r.uid == 0][0]
    np.testing.assert_array_equal(batch["tokens"][first], [1, 1, 2, 4, 7, 5, 6, 3])
    np.testing.assert_array_equal(batch["behaviour_logp"][first], [0, 0, 0, 0, 0, -0.5, -0.25, -0.125])
    np.testing.assert_array_equal(batch["loss_mask"][first], [0, 0, 0, 0, 0, 1, 1, 1])
    assert not batch["loss_mask"][len(rows):].any() and not batch["advantage"][len(rows):].any()


class ScriptedGame:
    """One seed source, one valid proposal ("2 + 3") with 4 solvers whose replies and ends are given;
    the real arithmetic verifier checks nothing here but scores the replies."""

    def __init__(self, replies, ended, cut_solver_replies):
        self.ps = ps.ProposerSolverConfig(proposals_per_source=2, solvers_per_problem=len(replies),
                                          cut_solver_replies=cut_solver_replies)
        self.config = SimpleNamespace(proposer_solver=self.ps)
        self.verifier = answer_sources.answer_source("verifier", "arithmetic")
        self.replies, self.ended = replies, ended

    @staticmethod
    def samples(finished, length=3):
        finished = np.asarray(finished, bool)
        shape = finished.shape + (length,)
        return SimpleNamespace(tokens=np.full(shape, 7), logprobs=np.full(shape, -0.5, np.float32),
                               lengths=np.full(finished.shape, length), finished=finished)

    def propose(self, model, sources, P, key):
        return [[1, 2]], self.samples([[True] * P]), [["2 + 3", "no problem here"]]

    def check(self, source, text, step, where):
        if text == "2 + 3":
            return Proposal(True, "", "2 + 3", 5)
        return Proposal(False, "no expression")

    def solve(self, model, problems, M, key):
        return [[1, 3]], self.samples([self.ended]), [self.replies]

    def score(self, proposal, replies, step, where):
        return self.verifier.score(proposal, replies)

    def proposer_rewards(self, p_hat, valid, shares):
        return np.where(valid, 4 * np.asarray(p_hat) * (1 - np.asarray(p_hat)), -1.0)


def play_scripted(replies, ended, cut_solver_replies):
    game = ScriptedGame(replies, ended, cut_solver_replies)
    return rounds.play(game.config, game, [Source("A", "seed", "1 + 1")], None, None, 0, set(),
                       propose_key=None, solve_key=None)


def test_a_cut_solver_reply_scores_as_no_answer_even_when_its_digits_are_the_gold():
    """The third reply was cut at solver_max_tokens after "5" (it would have gone on: "5 + 1 = 6"):
    under "wrong" it is a failure, the episode is whole and trained on, and the proposer keeps its
    credit (p̂ = 1/2, learnability 1)."""
    rnd = play_scripted(["5", "5", "5", "7"], [True, True, False, True], "wrong")
    (scored,) = rnd.scored.values()
    np.testing.assert_array_equal(scored.correct, [1, 1, 0, 0])
    assert scored.p_hat == 0.5 and scored.unparsed == 1
    assert (rnd.incomplete, rnd.cut_replies) == (0, 1)
    by_size = sorted(rnd.episodes, key=lambda e: len(e.rollouts))
    assert [len(e.rollouts) for e in by_size] == [1, 5]  # the invalid proposal's, then the whole episode
    proposer, *solvers = by_size[1].rollouts
    assert proposer.reward == pytest.approx(1.0)
    assert [s.reward for s in solvers] == [1.0, 1.0, 0.0, 0.0]
    assert all(s.finished for s in solvers)


def test_under_drop_a_cut_solver_reply_leaves_its_episode_and_its_proposer_out():
    rnd = play_scripted(["5", "5", "5", "7"], [True, True, False, True], "drop")
    assert rnd.scored == {} and (rnd.incomplete, rnd.cut_replies) == (1, 1)
    assert [len(e.rollouts) for e in rnd.episodes] == [1]  # only the invalid proposal's
