"""The two-role round of self-play, once for every recipe that has one (proposer–solver, SSR):

    propose   the policy writes `proposals` rollouts for each source (a seed problem, a repository)
    check     each proposal is checked (a parser, the sandbox's checks); a valid one opens an episode
              that expects `solvers` solver rollouts, an invalid one an episode of itself alone
    solve     the solver answers every valid proposal `solvers` times
    score     an episode whose solvers all finished is scored: each solver's reward, the recipe's
              summary of the episode (p̂, a solve rate)
    reward    the proposers' rewards, from every check and score, once every episode is whole

Only complete episodes leave the EpisodeAssembler, so no reward is read before its episode is whole.
A recipe supplies the roles (`TwoRoles`): what proposing, checking, solving, scoring and the
proposer's reward mean for it. Crash points: `<prefix>:<check_stage>:step=N` after the checks and
`<prefix>:solve:step=N` after the solvers (within step N).
"""

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from nash_jax.rollout.batches import pg_batch
from nash_jax.runs.control import crash_point
from nash_jax.selfplay.episodes import EpisodeAssembler, Role, Rollout


@dataclass(frozen=True)
class Check:
    """What the check of one proposal found."""

    valid: bool  # the proposal is solved and scored
    record: object  # what the recipe keeps of the proposal (its text, its verdict)
    opens: bool = True  # False: recorded, but no episode at all (never trained on)


class TwoRoles(Protocol):
    """What a recipe's roles are (their methods' arguments beyond these are the recipe's own)."""

    check_stage: str  # the crash point's name after the checks ("propose", "validate")
    keep_cut_replies: bool  # a solver reply cut at its token limit still completes its episode

    def source_id(self, source):
        """The name a proposer rollout records of its source (its comparison group)."""

    def propose(self, sources, proposals):
        """-> (prompt ids per source, samples [B, P], texts [B][P])."""

    def check(self, source, text, finished) -> Check: ...

    def solve(self, records, solvers):
        """-> (prompt ids per valid proposal, samples [Q, G], replies [Q][G])."""

    def score(self, record, replies, finished):
        """-> (each solver's reward [G], the recipe's summary of the episode)."""

    def proposer_rewards(self, checks, scored):
        """-> [n] proposer rewards for every proposal (scored: {uid: summary})."""


@dataclass
class Round:
    episodes: list  # complete episodes (selfplay.episodes.Episode), rewards set
    prompts: dict  # rollout uid -> prompt token ids
    checks: list  # the Check of every proposal, uid order
    scored: dict  # proposal uid -> the recipe's summary (complete episodes of valid proposals)
    incomplete: int  # valid proposals whose episode a cut solver reply left incomplete
    cut_replies: int  # solver replies cut at their token limit

    @property
    def records(self):
        return [c.record for c in self.checks]


@dataclass
class _Book:
    """A round's episodes while they are assembled."""

    assembler: EpisodeAssembler = field(default_factory=EpisodeAssembler)
    members: dict = field(default_factory=dict)  # episode uid -> [its proposer rollout, its solvers...]
    prompts: dict = field(default_factory=dict)  # rollout uid -> prompt token ids
    checks: list = field(default_factory=list)  # Check of every proposal, uid order
    valid: list = field(default_factory=list)  # uids of the valid proposals
    uid: int = 0  # the next rollout's uid


def play_round(roles, sources, proposals, solvers, step, crash_prefix=None):
    """One round on `sources` with `proposals` proposals each and `solvers` solvers a valid one; →
    Round."""
    prompt_ids, proposed, texts = roles.propose(sources, proposals)
    book = _open_episodes(roles, sources, proposals, solvers, prompt_ids, proposed, texts)
    if crash_prefix:  # the checks are in; a kill here redoes them on resumption
        crash_point(f"{crash_prefix}:{roles.check_stage}:step={step + 1}")
    scored, incomplete, cut = _solve(roles, book, solvers) if book.valid else ({}, 0, 0)
    if crash_prefix:  # after solving (nothing, when no proposal was valid)
        crash_point(f"{crash_prefix}:solve:step={step + 1}")
    _set_proposer_rewards(roles, book, scored)  # now that every complete episode is whole
    episodes = book.assembler.pop_complete()
    assert len(book.assembler) == incomplete, (len(book.assembler), incomplete)
    return Round(episodes, book.prompts, book.checks, {u: s for u, (_, s) in scored.items()},
                 incomplete, cut)


def _open_episodes(roles, sources, P, G, prompt_ids, proposed, texts):
    """Check every proposal and open its episode with its proposer rollout."""
    book = _Book()
    for b, source in enumerate(sources):
        for k in range(P):
            check = roles.check(source, texts[b][k], bool(proposed.finished[b, k]))
            book.checks.append(check)
            uid = book.uid
            book.uid += 1
            if not check.opens:
                continue
            book.assembler.open(uid, {Role.PROPOSER: 1, Role.SOLVER: G} if check.valid else
                                {Role.PROPOSER: 1})
            rollout = Rollout(uid=uid, role=Role.PROPOSER, episode=uid, source=roles.source_id(source),
                              tokens=proposed.tokens[b, k, :proposed.lengths[b, k]],
                              logprobs=proposed.logprobs[b, k, :proposed.lengths[b, k]], finished=True)
            book.assembler.add(rollout)
            book.members[uid], book.prompts[uid] = [rollout], prompt_ids[b]
            if check.valid:
                book.valid.append(uid)
    return book


def _solve(roles, book, G):
    """G solver rollouts of every valid proposal, each added to its episode, and the episode scored
    (its solvers rewarded) once it is whole. → ({uid: (solver rewards, summary)}, how many episodes
    stayed incomplete, how many replies were cut)."""
    scored, incomplete = {}, 0
    solver_ids, solved, replies = roles.solve([book.checks[u].record for u in book.valid], G)
    for q, parent in enumerate(book.valid):
        ended = [bool(solved.finished[q, k]) for k in range(G)]
        for k in range(G):
            rollout = Rollout(uid=book.uid, role=Role.SOLVER, episode=parent, parent=parent,
                              tokens=solved.tokens[q, k, :solved.lengths[q, k]],
                              logprobs=solved.logprobs[q, k, :solved.lengths[q, k]],
                              finished=ended[k] or roles.keep_cut_replies)
            book.assembler.add(rollout)
            book.members[parent].append(rollout)
            book.prompts[book.uid] = solver_ids[q]
            book.uid += 1
        if all(r.finished for r in book.members[parent][1:]):  # the episode is assembled: score it
            rewards, summary = roles.score(book.checks[parent].record, replies[q], ended)
            for rollout, reward in zip(book.members[parent][1:], rewards):
                rollout.reward = float(reward)
            scored[parent] = (rewards, summary)
        else:
            incomplete += 1
    return scored, incomplete, int((~np.asarray(solved.finished, bool)).sum())


def _set_proposer_rewards(roles, book, scored):
    """The proposer reward of every complete episode: scored ones and invalid proposals."""
    rewards = roles.proposer_rewards(book.checks, {u: s for u, (_, s) in scored.items()})
    for u, members in book.members.items():
        if u in scored or not book.checks[u].valid:
            members[0].reward = float(rewards[u])


def trained_rows(rnd, rollouts, advantages):
    """[(prompt ids, rollout, advantage)] of the trainable `rollouts` of round `rnd`."""
    return [(rnd.prompts[r.uid], r, float(a)) for r, a in zip(rollouts, advantages) if r.trainable]


def rows_batch(rows, pad_id, capacity, width=None):
    """The pg batch of [(prompt ids, rollout, advantage)] rows, padded to `capacity` rows of `width`
    tokens (rollout.batches.pg_batch); None without a row (the learner's empty-batch rule)."""
    if not rows:
        return None
    return pg_batch([p for p, _, _ in rows], [r.tokens.tolist() for _, r, _ in rows],
                    [r.logprobs for _, r, _ in rows], [a for _, _, a in rows], pad_id, capacity,
                    width)
