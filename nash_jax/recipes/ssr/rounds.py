"""One round: the SSR roles of the two-role round (selfplay.two_role): inject into repositories,
validate each artifact (the seven checks in the sandbox), repair every valid one G times, grade each
repair by the oracle tests (solver reward 1 when every test passes, else 0), and reward the injector by
ssr_injector_reward over its solvers' solve rate (−1 for an invalid artifact)."""

from dataclasses import dataclass

import numpy as np

from nash_jax.core import advantages as adv
from nash_jax.selfplay.two_role import Check, Round, play_round

__all__ = ["Round", "play"]


def play(config, game, repos, model, step, *, inject_key, solve_key, crash_prefix=None,
         num_injectors=None):
    """Inject into `repos`, validate, repair every valid artifact G times; → Round (records: (Repository,
    text, Verdict) of every injector rollout; scored: {injector uid: solve rate})."""
    b = config.ssr
    roles = _Roles(game, model, b.ssr_alpha, inject_key, solve_key)
    return play_round(roles, repos, num_injectors or b.injectors_per_repository, b.solvers_per_artifact,
                      step, crash_prefix)


@dataclass
class _Roles:
    game: object
    model: object  # the policy plays both roles
    alpha: float
    inject_key: object
    solve_key: object
    check_stage = "validate"
    keep_cut_replies = True  # a repair cut short is graded as it stands

    def source_id(self, repo):
        return repo.entry

    def propose(self, repos, injectors):
        return self.game.inject(self.model, repos, injectors, self.inject_key)

    def check(self, repo, text, finished):
        verdict = self.game.validate(text, repo, finished=finished)
        return Check(verdict.valid, (repo, text, verdict))

    def solve(self, records, solvers):
        return self.game.solve(self.model, [(v.artifact, repo) for repo, _, v in records], solvers,
                               self.solve_key)

    def score(self, record, repairs, finished):
        repo, _, verdict = record
        grades = [self.game.grade(verdict.artifact, repo, repair) for repair in repairs]
        return grades, float(np.mean(grades))

    def proposer_rewards(self, checks, scored):
        n = len(checks)
        valid = np.array([u in scored for u in range(n)])
        rates = np.array([scored.get(u, 0.0) for u in range(n)], np.float32)
        return np.asarray(adv.ssr_injector_reward(valid, rates, self.alpha), np.float64)
