"""The PreferenceModel contract that every recipe judges with, and the one validator of its output."""

import numpy as np

from nash_jax.core.game import validate_preference_matrix
from nash_jax.judges.user_code import UserCodeError

# float32 judges: P + Pᵀ = 1 holds to rounding, not exactly.
JUDGE_ATOL = 1e-5


class PreferenceModel:
    """P(y ≻ y' | x) for candidate responses to prompts.

    Subclasses implement `_prob_matrix` (or `_judgments`, to record per-prompt figures beside the
    matrices); callers use `prob_matrix` (validated), `judgments` and `prob`.
    """

    def prob_matrix(self, prompts, candidates):
        """[B, K, K] with P[b, i, j] = P(candidates[b][i] ≻ candidates[b][j] | prompts[b]), diagonal
        0.5 and P + Pᵀ = 1. Every prompt needs the same number K ≥ 1 of candidates."""
        return self.judgments(prompts, candidates)[0]

    def judgments(self, prompts, candidates):
        """(prob_matrix's [B, K, K], {name: [B] per-prompt figures}): what the judge records beside its
        matrices (the LLM judge: position_inconsistency); {} for most judges."""
        check_request(prompts, candidates)
        pref, notes = self._judgments(list(prompts), [list(c) for c in candidates])
        return validate_prob_matrices(pref, source=type(self).__name__), notes

    def _judgments(self, prompts, candidates):
        return self._prob_matrix(prompts, candidates), {}

    def prob(self, prompts, a, b):
        """[B]: P(a[i] ≻ b[i] | prompts[i])."""
        if not len(prompts) == len(a) == len(b):
            raise ValueError(f"{len(prompts)} prompts, {len(a)} first and {len(b)} second responses; "
                             "expected one of each per prompt")
        return self.prob_matrix(prompts, [[x, y] for x, y in zip(a, b)])[:, 0, 1]

    def _prob_matrix(self, prompts, candidates):
        raise NotImplementedError


def check_request(prompts, candidates):
    if len(prompts) != len(candidates):
        raise ValueError(f"{len(prompts)} prompts but {len(candidates)} candidate lists")
    sizes = {len(c) for c in candidates}
    if len(sizes) > 1 or 0 in sizes:
        raise ValueError(f"every prompt needs the same number (≥ 1) of candidates; got sizes "
                         f"{[len(c) for c in candidates]}")
    for b, (prompt, cands) in enumerate(zip(prompts, candidates)):
        if not isinstance(prompt, str) or not all(isinstance(c, str) for c in cands):
            raise ValueError(f"prompt {b}: prompts and candidates must be strings")


def validate_prob_matrices(pref, source="judge", atol=JUDGE_ATOL):
    """Return pref [B, K, K] as float64, or raise naming the judge, the prompt and the entry."""
    pref = np.asarray(pref, dtype=np.float64)
    if pref.ndim != 3 or pref.shape[1] != pref.shape[2]:
        raise ValueError(f"{source} returned shape {list(pref.shape)}; expected [B, K, K]")
    for b, matrix in enumerate(pref):
        try:
            pref[b] = validate_preference_matrix(matrix, atol=atol)
        except ValueError as err:
            raise ValueError(f"{source} returned, for prompt {b}: {err}") from None
    return pref


def judge_in_chunks(judge, prompts, candidates, *, per_call, where, after_call=None, notes=None):
    """[B, K, K] from `judge`, asked `per_call` prompts at a time; a bad answer names `where` and the
    prompts; after_call(number of prompts judged in the call, call index) runs after each call.
    notes: a dict that receives the judge's per-prompt figures ({name: [B] list}), when given."""
    out = []
    for start in range(0, len(prompts), per_call):
        try:
            pref, figures = judge.judgments(prompts[start:start + per_call],
                                            candidates[start:start + per_call])
            out.append(pref)
            if notes is not None:
                for name, values in figures.items():
                    notes.setdefault(name, []).extend(np.asarray(values, np.float64).tolist())
        except ValueError as err:
            raise ValueError(f"{where}, prompts {start}-{min(start + per_call, len(prompts)) - 1}: "
                             f"{err}") from None
        except UserCodeError as err:
            raise err.located(f"{where}, prompts {start}-{min(start + per_call, len(prompts)) - 1}")
        if after_call is not None:
            after_call(len(out[-1]), len(out))
    return np.concatenate(out)


class RewardModel:
    """A scalar score r(y | x) per response: a verifier, a programmatic check, a reward model.

    Subclasses implement `_rewards`; callers use `rewards` (validated): users' code and the recipes that
    train on scalar rewards; `RewardJudge` turns one into the PreferenceModel (Bradley-Terry) that
    recipes judge with.
    """

    def rewards(self, prompts, responses):
        """[N] float64: the reward of responses[i] to prompts[i]; finite."""
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses; expected one "
                             "response per prompt")
        for i, (prompt, response) in enumerate(zip(prompts, responses)):
            if not isinstance(prompt, str) or not isinstance(response, str):
                raise ValueError(f"response {i}: prompts and responses must be strings")
        return validate_rewards(self._rewards(list(prompts), list(responses)), len(prompts),
                                source=type(self).__name__)

    def _rewards(self, prompts, responses):
        raise NotImplementedError


def _shown(value, limit=200):
    """repr(value), cut to `limit` characters: an error names what came back, not all of it."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def validate_rewards(rewards, n, source="reward model"):
    """Return rewards [n] as float64, or raise naming the source, the response and the value."""
    try:
        rewards = np.asarray(rewards, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{source} returned {_shown(rewards)}; expected {n} numbers") from None
    if rewards.shape != (n,):
        raise ValueError(f"{source} returned shape {list(rewards.shape)}; expected [{n}], one reward "
                         "per response")
    bad = np.flatnonzero(~np.isfinite(rewards))
    if bad.size:
        raise ValueError(f"{source} returned, for response {int(bad[0])}: reward={rewards[bad[0]]}; "
                         "expected a finite number")
    return rewards
