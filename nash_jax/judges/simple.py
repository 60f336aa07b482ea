"""Judges without a neural model of their own: rewards from a Python callable, a Bradley-Terry judge over
any scalar reward, a judge from a Python callable (or one named by import path), and a judge that reads
preferences computed elsewhere."""

import hashlib
import importlib
import json
from pathlib import Path

import numpy as np
from scipy.special import expit

from nash_jax.judges.base import PreferenceModel, RewardModel
from nash_jax.judges.user_code import call_user, function_name


class CallableReward(RewardModel):
    """Rewards from fn(prompts, responses) -> [N] scores (a verifier or scoring function); `name`: what
    an error calls it (its config key)."""

    def __init__(self, fn, name=None):
        self.fn, self.name = fn, name or function_name(fn)

    def _rewards(self, prompts, responses):
        return call_user(self.name, self.fn, prompts, responses)


class RewardJudge(PreferenceModel):
    """P(a ≻ b) = σ(r(a) − r(b)) for a RewardModel, or a function (prompts, responses) -> [N] scores
    (transitive by nature)."""

    def __init__(self, reward, name=None):
        self.reward = reward if isinstance(reward, RewardModel) else CallableReward(reward, name)

    def rewards(self, prompts, responses):
        """[N] the scalar rewards behind the preferences (what a scalar-reward recipe trains on)."""
        return self.reward.rewards(prompts, responses)

    def _prob_matrix(self, prompts, candidates):
        k = len(candidates[0])
        flat_prompts = [p for p in prompts for _ in range(k)]
        scores = self.reward.rewards(flat_prompts, [c for cs in candidates for c in cs])
        scores = scores.reshape(len(prompts), k)
        return expit(scores[:, :, None] - scores[:, None, :])


class CallableJudge(PreferenceModel):
    """P from fn(prompt, a, b) -> P(a ≻ b), asked once per unordered pair; P(b ≻ a) = 1 − P(a ≻ b)."""

    def __init__(self, fn, name=None):
        self.fn, self.name = fn, name or function_name(fn)

    def _prob_matrix(self, prompts, candidates):
        return matrix_from_pairs(prompts, candidates,
                                 lambda b, prompt, x, y: call_user(self.name, self.fn, prompt, x, y))


class FunctionJudge(PreferenceModel):
    """P from fn(prompts, candidates) -> [B, K, K] (a user's judge), validated like every judge's."""

    def __init__(self, fn, name=None):
        self.fn, self.name = fn, name or function_name(fn)

    def _prob_matrix(self, prompts, candidates):
        return call_user(self.name, self.fn, prompts, candidates)


def import_function(spec, key="judge.function"):
    """The callable that "package.module:name" names; errors name the module path and what failed."""
    module_name, sep, name = (spec or "").partition(":")
    if not sep or not module_name or not name:
        raise ValueError(f"{key}={spec!r}; expected \"package.module:name\"")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # noqa: BLE001  (the user's module: say which and why)
        raise ValueError(f"{key}={spec!r}: cannot import module {module_name!r} "
                         f"({type(err).__name__}: {err}); expected a module on the Python path") from None
    function = module
    for part in name.split("."):
        function = getattr(function, part, None)
    if not callable(function):
        raise ValueError(f"{key}={spec!r}: module {module_name!r} ({getattr(module, '__file__', '?')}) "
                         f"has no callable {name!r}")
    return function


def matrix_from_pairs(prompts, candidates, prob):
    """[B, K, K] from prob(b, prompt, a, c) = P(a ≻ c), asked once per unordered pair i < j."""
    k = len(candidates[0])
    pref = np.full((len(prompts), k, k), 0.5)
    for b, (prompt, cands) in enumerate(zip(prompts, candidates)):
        for i in range(k):
            for j in range(i + 1, k):
                p = float(prob(b, prompt, cands[i], cands[j]))
                pref[b, i, j], pref[b, j, i] = p, 1.0 - p
    return pref


def text_hash(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class FileJudge(PreferenceModel):
    """Preferences computed elsewhere (an LLM judge, human labels), read from JSONL lines
    {"prompt": sha256, "a": sha256, "b": sha256, "p": P(a ≻ b)} (hashes of the UTF-8 texts;
    `text_hash` computes them). Either orientation of a pair may be stored."""

    def __init__(self, path):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"preference file {self.path} does not exist")
        self.table = {}
        for n, line in enumerate(self.path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                key, p = (row["prompt"], row["a"], row["b"]), float(row["p"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
                raise ValueError(f"{self.path}:{n}: expected a JSON object with prompt, a, b "
                                 f"(sha256 hex) and p; {err}") from None
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{self.path}:{n}: p={p}; expected a probability in [0, 1]")
            self.table[key] = p

    def _lookup(self, b, prompt, x, y):
        key = (text_hash(prompt), text_hash(x), text_hash(y))
        if key in self.table:
            return self.table[key]
        flipped = (key[0], key[2], key[1])
        if flipped in self.table:
            return 1.0 - self.table[flipped]
        raise ValueError(f"{self.path} has no preference for prompt {b} ({key[0][:12]}…) between "
                         f"responses {key[1][:12]}… and {key[2][:12]}…; expected every pair judged")

    def _prob_matrix(self, prompts, candidates):
        # The same text ties with itself; every other pair must be in the file.
        return matrix_from_pairs(prompts, candidates, lambda b, prompt, x, y: 0.5 if x == y
                                 else self._lookup(b, prompt, x, y))
