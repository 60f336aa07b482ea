"""One round of the game: the proposer–solver roles of the two-role round (selfplay.two_role): propose
from sources, check each proposal (the answer source: parser, grounding, gold), solve, score by
correctness, and reward the proposer by p̂ (minus the repetition share under majority vote)."""

from dataclasses import dataclass

import numpy as np

from nash_jax.selfplay import answer_sources
from nash_jax.selfplay.diversity import bleu_clusters, repetition_penalty
from nash_jax.selfplay.two_role import Check, Round, play_round

HELDOUT = "a held-out problem"  # a valid proposal equal to a held-out problem: left out of training

__all__ = ["HELDOUT", "Round", "play"]


def play(config, game, sources, proposer, solver, step, heldout, *, propose_key, solve_key,
         crash_prefix=None, num_proposals=None, where="training"):
    """Propose from `sources`, solve the valid proposals, and return the complete, scored episodes
    (Round.records: (source, text, Proposal) of every proposal; Round.scored: {uid: Scored})."""
    ps = config.proposer_solver
    roles = _Roles(game, proposer, solver, step, heldout, where, propose_key, solve_key)
    return play_round(roles, sources, num_proposals or ps.proposals_per_source, ps.solvers_per_problem,
                      step, crash_prefix)


@dataclass
class _Roles:
    game: object
    proposer: object
    solver: object
    step: int
    heldout: object  # held-out problems: a proposal of one is recorded as invalid and opens no episode
    where: str
    propose_key: object
    solve_key: object
    check_stage = "propose"

    @property
    def keep_cut_replies(self):
        # cut_solver_replies "wrong": a reply cut at solver_max_tokens is scored as one with no answer
        # (it can hold a wrong sum's digits or the gold's by chance); "drop": it leaves its episode
        # incomplete
        return self.game.ps.cut_solver_replies != "drop"

    def source_id(self, source):
        return source.id

    def propose(self, sources, proposals):
        return self.game.propose(self.proposer, sources, proposals, self.propose_key)

    def check(self, source, text, finished):
        proposal = self.game.check(source, text, self.step + 1, self.where)
        if proposal.valid and not finished:
            proposal = answer_sources.Proposal(False, "no end of proposal")
        if proposal.valid and proposal.problem in self.heldout:  # never trained on: no episode at all
            return Check(False, (source, text, answer_sources.Proposal(False, HELDOUT)), opens=False)
        return Check(proposal.valid, (source, text, proposal))

    def solve(self, records, solvers):
        return self.game.solve(self.solver, [p.problem for _, _, p in records], solvers, self.solve_key)

    def score(self, record, replies, finished):
        answered = [reply if done else "" for reply, done in zip(replies, finished)]
        scored = self.game.score(record[2], answered, self.step + 1, self.where)
        return [float(c) for c in scored.correct], scored

    def proposer_rewards(self, checks, scored):
        """f(p̂) minus the repetition share (game.proposer_rewards) of every proposal."""
        ps, uids = self.game.ps, sorted(scored)
        shares = {}
        penalise = ps.answer_source == "majority" if ps.repetition_penalty is None else ps.repetition_penalty
        if penalise and uids:
            problems = [checks[u].record[2].problem for u in uids]
            shares = dict(zip(uids, repetition_penalty(bleu_clusters(problems, ps.repetition_threshold))))
        n = len(checks)
        return self.game.proposer_rewards([scored[u].p_hat if u in scored else 0.0 for u in range(n)],
                                          np.array([u in scored for u in range(n)]),
                                          [shares.get(u, 0.0) for u in range(n)])
