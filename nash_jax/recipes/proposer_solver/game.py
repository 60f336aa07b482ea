"""Proposing, solving and scoring with one policy: the task's prompts in, the sampler's rollouts out,
the answer source's verdicts and the proposers' rewards; what a round, the anchors and the report
share."""

import jax.numpy as jnp
import numpy as np

from nash_jax import data
from nash_jax.core import advantages as adv
from nash_jax.engine.learner import sampling_settings
from nash_jax.rollout.sampling import generate
from nash_jax.selfplay import answer_sources


class Game:
    """Proposing, solving and scoring with one policy: the pieces a step, the anchors and the report
    share."""

    def __init__(self, config, tokenizer, mesh, source):
        self.config, self.tokenizer, self.mesh, self.source = config, tokenizer, mesh, source
        self.ps = config.proposer_solver
        self.task = answer_sources.task_class(self.ps.task.name)()
        self.kind = self.task.kind
        self.sampling = sampling_settings(config, tokenizer, mesh)

    def encode(self, texts, where):
        ids, _, _ = data.encode_prompts(self.tokenizer, texts, max_tokens=self.config.data.max_prompt_tokens,
                                        too_long="truncate_left", where=where)
        return ids

    def decode(self, samples, b, k):
        return self.tokenizer.decode(samples.tokens[b, k, :samples.lengths[b, k]], skip_special_tokens=True)

    def propose(self, model, sources, num_samples, key):
        """(prompt ids per source, Samples, texts [S][P])."""
        ids = self.encode([self.task.proposer_prompt(s) for s in sources], "proposer prompts")
        samples = generate(model, ids, num_samples=num_samples, max_new_tokens=self.ps.proposer_max_tokens,
                           key=key, **self.sampling)
        texts = [[self.decode(samples, b, k) for k in range(num_samples)] for b in range(len(sources))]
        return ids, samples, texts

    def solve(self, model, problems, num_samples, key, greedy=False):
        """(prompt ids per problem, Samples, replies [Q][M])."""
        ids = self.encode([self.task.solver_prompt(p) for p in problems], "solver prompts")
        sampling = dict(self.sampling, temperature=0.0) if greedy else self.sampling
        samples = generate(model, ids, num_samples=num_samples, max_new_tokens=self.ps.solver_max_tokens,
                           key=key, **sampling)
        replies = [[self.decode(samples, b, k) for k in range(num_samples)] for b in range(len(problems))]
        return ids, samples, replies

    def check(self, source, text, step, where):
        try:
            return self.source.check(source, text)
        except Exception as err:  # a user's checker: say what it was checking
            raise RuntimeError(f"{where}, step {step}: the {self.ps.answer_source} answer source failed "
                               f"checking the proposal {text!r} from source {source.id!r}: "
                               f"{type(err).__name__}: {err}") from err

    def score(self, proposal, replies, step, where):
        try:
            return self.source.score(proposal, replies)
        except Exception as err:
            raise RuntimeError(f"{where}, step {step}: the {self.ps.answer_source} answer source failed "
                               f"scoring the solvers of problem {proposal.problem!r}: "
                               f"{type(err).__name__}: {err}") from err

    def accuracy(self, model, problems, key, where):
        """Greedy accuracy on (problem, gold) pairs, read as the task reads a reply."""
        return self.accuracies(model, [problems], key, where)[0]

    def accuracies(self, model, problem_sets, key, where):
        """Greedy accuracy on each of several lists of (problem, gold) pairs, in one generate call."""
        flat = [pair for problems in problem_sets for pair in problems]
        if not flat:
            return [float("nan")] * len(problem_sets)
        read = self.task.read
        _, _, replies = self.solve(model, [p for p, _ in flat], 1, key, greedy=True)
        right = []
        for reply, (problem, gold) in zip(replies, flat):
            try:
                right.append(read(reply[0]) == gold)
            except Exception as err:
                raise RuntimeError(f"{where}: the {self.ps.task.name} task failed reading the reply "
                                   f"{reply[0]!r} to problem {problem!r}: {type(err).__name__}: {err}") \
                    from err
        out, start = [], 0
        for problems in problem_sets:
            out.append(float(np.mean(right[start:start + len(problems)])) if problems else float("nan"))
            start += len(problems)
        return out

    def proposer_rewards(self, p_hat, valid, shares):
        """Proposer rewards [N] from p̂ [N], validity [N] and repetition shares [N] (0 unless majority)."""
        ps = self.ps
        p = jnp.asarray(p_hat, jnp.float32)
        base = {"learnability": lambda: adv.learnability(p), "tent": lambda: adv.tent(p),
                "spice_variance": lambda: adv.spice_variance_reward(p, ps.spice_var),
                "ssr": lambda: adv.ssr_injector_reward(valid, p, ps.ssr_alpha)}[ps.proposer_reward]()
        return np.asarray(adv.gate_invalid(base - jnp.asarray(shares, jnp.float32), valid,
                                           ps.invalid_value), np.float64)
