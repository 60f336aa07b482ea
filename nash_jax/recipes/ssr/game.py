"""Injecting, validating, repairing and grading with one policy: the repositories in, the sampler's
rollouts out, the seven checks' verdicts (in the sandbox) and the oracle tests' grades; what a round,
the anchors and the report share."""

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from nash_jax import data
from nash_jax.engine.learner import sampling_settings
from nash_jax.rollout.sampling import generate
from nash_jax.tasks.code import ssr_checks, ssr_prompts, ssr_repair
from nash_jax.tasks.code.ssr_artifact import parse_policy_text

UNPARSED = "parses"  # the failure of a text that is no artifact (a section missing, a diff malformed)
UNFINISHED = "finished"  # of an artifact cut off at injector_max_tokens


@dataclass
class Verdict:
    """What validating one injector text found: the artifact (None if it did not parse), the
    Validation (None if no check ran) and the first failure (None: valid)."""
    artifact: object
    validation: object
    failure: str | None

    @property
    def valid(self):
        return self.failure is None


class Game:
    def __init__(self, config, tokenizer, mesh):
        self.config, self.tokenizer, self.mesh = config, tokenizer, mesh
        self.b = config.ssr
        self.settings = self.b.check_settings()
        self.sampling = sampling_settings(config, tokenizer, mesh)
        self.sandbox_s = 0.0  # wall time in sandboxed test runs so far (a step's share is logged)

    def encode(self, texts, where):
        ids, _, _ = data.encode_prompts(self.tokenizer, texts, max_tokens=self.config.data.max_prompt_tokens,
                                        too_long="truncate_left", where=where)
        return ids

    def _generate(self, model, texts, num_samples, max_new_tokens, key, where, greedy=False):
        ids = self.encode(texts, where)
        sampling = dict(self.sampling, temperature=0.0) if greedy else self.sampling
        samples = generate(model, ids, num_samples=num_samples, max_new_tokens=max_new_tokens, key=key,
                           **sampling)
        decoded = [[self.tokenizer.decode(samples.tokens[b, k, :samples.lengths[b, k]],
                                          skip_special_tokens=True) for k in range(num_samples)]
                   for b in range(len(texts))]
        return ids, samples, decoded

    def inject(self, model, repos, num_samples, key):
        """(prompt ids per repository, Samples, texts [R][I])."""
        prompts = [ssr_prompts.injector_prompt(r.entry, r.root) for r in repos]
        return self._generate(model, prompts, num_samples, self.b.injector_max_tokens, key,
                              "injector prompts")

    def validate(self, text, repo, finished=True):
        """The Verdict of one injector text for `repo`: parsed, then the seven checks in the sandbox."""
        try:
            artifact = parse_policy_text(text, repo.entry)
        except ValueError:
            return Verdict(None, None, UNPARSED if finished else UNFINISHED)
        start = time.perf_counter()
        validation = ssr_checks.validate(artifact, repo.root, self.settings)
        self.sandbox_s += time.perf_counter() - start
        return Verdict(artifact, validation, validation.failure if not validation.valid else None)

    def solve(self, model, bugs, num_samples, key, greedy=False):
        """(prompt ids per bug, Samples, repair texts [Q][G]) for bugs [(artifact, Repository)]."""
        prompts = [solver_prompt(artifact, repo) for artifact, repo in bugs]
        return self._generate(model, prompts, num_samples, self.b.solver_max_tokens, key, "solver prompts",
                              greedy)

    def grade(self, artifact, repo, repair):
        """1.0 when every oracle test passes after `repair` (test files reset), else 0.0."""
        start = time.perf_counter()
        grade = ssr_repair.grade_repair(artifact, repo.root, repair, self.settings.limits)
        self.sandbox_s += time.perf_counter() - start
        return grade.reward

    def repair_rate(self, model, bugs, key):
        """Greedy repair rate over bugs (task.Bug)."""
        if not bugs:
            return float("nan")
        _, _, repairs = self.solve(model, [(b.artifact, b.repository) for b in bugs], 1, key, greedy=True)
        return sum(self.grade(b.artifact, b.repository, r[0]) for b, r in zip(bugs, repairs)) / len(bugs)


def solver_prompt(artifact, repo):
    """The solver's prompt of `artifact`: the buggy, weakened repository and the reversed weakening."""
    with tempfile.TemporaryDirectory(prefix="nash-jax-solver-") as scratch:
        folder = Path(scratch) / "repo"
        specification = ssr_repair.build_solver_repo(artifact, repo.root, folder)
        return ssr_prompts.solver_prompt(folder, specification)
