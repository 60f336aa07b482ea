"""One round: inject, validate (the seven checks in the sandbox), repair, grade, assemble, reward.
Only complete episodes (one artifact and, when it is valid, all G of its solvers) leave the
EpisodeAssembler, and rewards are set once an episode is whole: solver = 1 when every oracle test
passes after its repair, else 0; injector = ssr_injector_reward over its solvers' solve rate (−1 for
an invalid artifact)."""

from dataclasses import dataclass, field

import numpy as np

from nash_jax.core import advantages as adv
from nash_jax.runs.control import crash_point
from nash_jax.selfplay.episodes import EpisodeAssembler, Role, Rollout


@dataclass
class Round:
    episodes: list  # complete episodes, rewards set
    prompts: dict  # rollout uid -> prompt token ids
    artifacts: list  # (Repository, text, Verdict) of every injector rollout, uid order
    solve_rates: dict  # injector uid -> solve rate of its G solvers (valid artifacts)


@dataclass
class _Book:
    assembler: EpisodeAssembler = field(default_factory=EpisodeAssembler)
    members: dict = field(default_factory=dict)  # episode uid -> [injector rollout, solvers...]
    prompts: dict = field(default_factory=dict)
    artifacts: list = field(default_factory=list)
    uid: int = 0


def play(config, game, repos, model, step, *, inject_key, solve_key, crash_prefix=None,
         num_injectors=None):
    """Inject into `repos`, validate, repair every valid artifact G times; → Round."""
    b = config.bug_injection
    I, G = num_injectors or b.injectors_per_repository, b.solvers_per_artifact
    prompt_ids, injected, texts = game.inject(model, repos, I, inject_key)
    book = _Book()
    for r, repo in enumerate(repos):
        for k in range(I):
            verdict = game.validate(texts[r][k], repo, finished=bool(injected.finished[r, k]))
            uid = book.uid
            book.assembler.open(uid, {Role.PROPOSER: 1, Role.SOLVER: G} if verdict.valid else
                                {Role.PROPOSER: 1})
            rollout = Rollout(uid=uid, role=Role.PROPOSER, episode=uid, source=repo.entry,
                              tokens=injected.tokens[r, k, :injected.lengths[r, k]],
                              logprobs=injected.logprobs[r, k, :injected.lengths[r, k]], finished=True)
            book.assembler.add(rollout)
            book.members[uid], book.prompts[uid] = [rollout], prompt_ids[r]
            book.artifacts.append((repo, texts[r][k], verdict))
            book.uid += 1
    if crash_prefix:  # the sandbox's verdicts are in; a kill here redoes them on resumption
        crash_point(f"{crash_prefix}:validate:step={step + 1}")
    solve_rates = _solve(game, model, book, G, solve_key)
    if crash_prefix:
        crash_point(f"{crash_prefix}:solve:step={step + 1}")
    _set_rewards(b, book, solve_rates)
    return Round(book.assembler.pop_complete(), book.prompts, book.artifacts, solve_rates)


def _solve(game, model, book, G, key):
    """G repairs of every valid artifact, graded; → {injector uid: solve rate}."""
    valid = [(uid, repo, verdict.artifact) for uid, (repo, _, verdict) in enumerate(book.artifacts)
             if verdict.valid]
    if not valid:
        return {}
    solver_ids, solved, repairs = game.solve(model, [(a, repo) for _, repo, a in valid], G, key)
    rates = {}
    for q, (parent, repo, artifact) in enumerate(valid):
        grades = [game.grade(artifact, repo, repairs[q][k]) for k in range(G)]
        for k in range(G):
            rollout = Rollout(uid=book.uid, role=Role.SOLVER, episode=parent, parent=parent,
                              tokens=solved.tokens[q, k, :solved.lengths[q, k]],
                              logprobs=solved.logprobs[q, k, :solved.lengths[q, k]], finished=True,
                              reward=grades[k])
            book.members[parent].append(rollout)
            book.prompts[book.uid] = solver_ids[q]
            book.assembler.add(rollout)
            book.uid += 1
        rates[parent] = float(np.mean(grades))
    return rates


def _set_rewards(b, book, solve_rates):
    n = len(book.artifacts)
    valid = np.array([u in solve_rates for u in range(n)])
    rates = np.array([solve_rates.get(u, 0.0) for u in range(n)], np.float32)
    rewards = np.asarray(adv.ssr_injector_reward(valid, rates, b.ssr_alpha), np.float64)
    for u in range(n):
        book.members[u][0].reward = float(rewards[u])
