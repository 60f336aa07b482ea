"""One round of the game: propose, check, solve, assemble, score. Only complete episodes (one proposal
and all its solvers) leave the EpisodeAssembler, and rewards are read only once an episode is whole."""

from dataclasses import dataclass, field

import numpy as np

from nash_jax.runs.control import crash_point
from nash_jax.selfplay import answer_sources
from nash_jax.selfplay.diversity import bleu_clusters, repetition_penalty
from nash_jax.selfplay.episodes import EpisodeAssembler, Role, Rollout

HELDOUT = "a held-out problem"  # a valid proposal equal to a held-out problem: left out of training


@dataclass
class Round:
    episodes: list  # complete episodes (selfplay.episodes.Episode), rewards set
    prompts: dict  # rollout uid -> prompt token ids
    proposals: list  # (source, text, Proposal) of every proposal
    scored: dict  # proposal uid -> Scored (complete episodes of valid proposals)
    incomplete: int  # valid proposals left out because a solver reply was cut (cut_solver_replies: drop)
    cut_replies: int  # solver replies cut at solver_max_tokens


@dataclass
class _Assembly:
    """A round's episodes while they are assembled."""
    assembler: EpisodeAssembler = field(default_factory=EpisodeAssembler)
    members: dict = field(default_factory=dict)  # episode uid -> [its proposer rollout, its solvers...]
    prompts: dict = field(default_factory=dict)  # rollout uid -> prompt token ids
    proposals: list = field(default_factory=list)  # (source, text, Proposal) of every proposal
    valid: list = field(default_factory=list)  # (proposal uid, Proposal)
    uid: int = 0  # the next rollout's uid


def play(config, game, sources, proposer, solver, step, heldout, *, propose_key, solve_key,
         crash_prefix=None, num_proposals=None, where="training"):
    """Propose from `sources`, solve the valid proposals, and return the complete, scored episodes."""
    ps = config.proposer_solver
    P, M = num_proposals or ps.proposals_per_source, ps.solvers_per_problem
    prompt_ids, proposed, texts = game.propose(proposer, sources, P, propose_key)
    if crash_prefix:
        crash_point(f"{crash_prefix}:propose:step={step + 1}")
    book = _open_episodes(game, sources, P, M, prompt_ids, proposed, texts, step, heldout, where)
    scored, incomplete, cut = {}, 0, 0
    if book.valid:
        scored, incomplete, cut = _solve(game, solver, book, M, solve_key, step, where)
    if crash_prefix:  # after solving (nothing, when no proposal was valid)
        crash_point(f"{crash_prefix}:solve:step={step + 1}")
    _set_rewards(ps, game, book, scored)  # now that every complete episode is whole
    episodes = book.assembler.pop_complete()
    if len(book.assembler):
        assert len(book.assembler) == incomplete, (len(book.assembler), incomplete)
    return Round(episodes, book.prompts, book.proposals, scored, incomplete, cut)


def _open_episodes(game, sources, P, M, prompt_ids, proposed, texts, step, heldout, where):
    """Check every proposal and open its episode with its proposer rollout (a valid one expects M
    solvers); a proposal of a held-out problem is recorded as invalid and opens none."""
    book = _Assembly()
    for b, source in enumerate(sources):
        for k in range(P):
            text = texts[b][k]
            proposal = game.check(source, text, step + 1, where)
            if proposal.valid and not proposed.finished[b, k]:
                proposal = answer_sources.Proposal(False, "no end of proposal")
            if proposal.valid and proposal.problem in heldout:  # never trained on: no episode at all
                book.proposals.append((source, text, answer_sources.Proposal(False, HELDOUT)))
                book.uid += 1
                continue
            uid = book.uid
            book.proposals.append((source, text, proposal))
            expected = {Role.PROPOSER: 1, Role.SOLVER: M} if proposal.valid else {Role.PROPOSER: 1}
            book.assembler.open(uid, expected)
            rollout = Rollout(uid=uid, role=Role.PROPOSER, episode=uid, source=source.id,
                              tokens=proposed.tokens[b, k, :proposed.lengths[b, k]],
                              logprobs=proposed.logprobs[b, k, :proposed.lengths[b, k]], finished=True)
            book.assembler.add(rollout)
            book.members[uid], book.prompts[uid] = [rollout], prompt_ids[b]
            if proposal.valid:
                book.valid.append((uid, proposal))
            book.uid += 1
    return book


def _solve(game, solver, book, M, solve_key, step, where):
    """M solver rollouts of every valid proposal, each added to its episode, and the episode scored once
    it is whole. A reply cut at solver_max_tokens has given no answer: under cut_solver_replies "wrong"
    it is scored as one with none (a cut reply can hold a wrong sum's digits or the gold's by chance),
    under "drop" it leaves its episode incomplete. → ({proposal uid: Scored}, how many episodes stayed
    incomplete, how many replies were cut)."""
    scored, incomplete = {}, 0
    drop = game.ps.cut_solver_replies == "drop"
    solver_ids, solved, replies = game.solve(solver, [p.problem for _, p in book.valid], M, solve_key)
    for q, (parent, proposal) in enumerate(book.valid):
        ended = [bool(solved.finished[q, k]) for k in range(M)]
        for k in range(M):
            rollout = Rollout(uid=book.uid, role=Role.SOLVER, episode=parent, parent=parent,
                              tokens=solved.tokens[q, k, :solved.lengths[q, k]],
                              logprobs=solved.logprobs[q, k, :solved.lengths[q, k]],
                              finished=ended[k] or not drop)
            book.assembler.add(rollout)
            book.members[parent].append(rollout)
            book.prompts[book.uid] = solver_ids[q]
            book.uid += 1
        if all(r.finished for r in book.members[parent][1:]):  # the episode is assembled: score it
            answered = [reply if done else "" for reply, done in zip(replies[q], ended)]
            scored[parent] = game.score(proposal, answered, step + 1, where)
        else:
            incomplete += 1
    return scored, incomplete, int((~np.asarray(solved.finished, bool)).sum())


def _set_rewards(ps, game, book, scored):
    """Solver reward = correct; proposer reward = f(p̂) minus the repetition share (game.proposer_rewards),
    set on the rollouts of complete episodes and of invalid proposals."""
    proposals, members = book.proposals, book.members
    uids = sorted(scored)
    p_hat = {u: scored[u].p_hat for u in uids}
    shares = {}
    penalise = ps.answer_source == "majority" if ps.repetition_penalty is None else ps.repetition_penalty
    if penalise and uids:
        problems = [proposals[u][2].problem for u in uids]
        shares = dict(zip(uids, repetition_penalty(bleu_clusters(problems, ps.repetition_threshold))))
    n = len(proposals)
    ok = np.array([u in scored for u in range(n)])
    rewards = game.proposer_rewards([p_hat.get(u, 0.0) for u in range(n)], ok,
                                    [shares.get(u, 0.0) for u in range(n)])
    for u in range(n):
        if u not in members:
            continue
        if u in scored or not proposals[u][2].valid:
            members[u][0].reward = float(rewards[u])
        for k, rollout in enumerate(members[u][1:]):
            if u in scored:
                rollout.reward = float(scored[u].correct[k])
