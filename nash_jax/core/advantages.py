"""Advantages and rewards of self-play RL, as pure jit-able JAX functions on fixed-shape arrays.

Every function takes padded arrays with a mask, computes in float32, and keeps the number of groups,
baselines or clusters static, so one compiled program serves every batch of a run. Comparison groups are
explicit integer ids made on the host (`nash_jax.selfplay.episodes.group_ids`), never read off the batch
layout. An entry counts as padding when its mask is false or its id lies outside [0, num_groups), so −1
is a fine padding id.

  comparison groups   segment_moments, group_advantages (GRPO, Dr. GRPO, RLOO), degenerate_groups,
                      signal_share
  difficulty rewards  pass_rate, learnability, tent, spice_variance_reward, ssr_injector_reward,
                      gate_invalid, rzero_challenger_reward
  pseudo-labels       majority_vote, pseudo_label_rewards, band_filter
  games               rae_advantages (SPIRAL), turn_discount, move_entropy_bonus, game_outcome_rewards,
                      win_draw_loss_rate
  loss aggregation    aggregate_loss
  (diversity of what a proposer writes: core.diversity)

GRPO: Shao et al. 2024. Dr. GRPO: Liu et al. 2025. RLOO: Ahmadian et al. 2024. R-Zero: arXiv 2508.05004.
SPICE: arXiv 2510.24684. SSR: arXiv 2512.18552. SPIRAL: arXiv 2506.24119. The formulas and their test
vectors are those of reference/notes_self_play.md §3–§4.
"""

import jax
import jax.numpy as jnp

from nash_jax.core.segments import F32, choice, in_range, masked_segments, read, safe_divide

# ---------------------------------------------------------------------------------------------------
# Comparison groups


def segment_moments(x, segments, mask=None, *, num_segments, ddof=1):
    """(n_g, m_g, s_g) of the valid x in each segment g, each [G] float32.

    n_g = Σ_i [g_i = g],  m_g = Σ x_i / n_g,  s_g = sqrt(Σ (x_i − m_g)² / (n_g − ddof)),
    with m_g = 0 for an empty segment and s_g = 0 where n_g ≤ ddof. Two passes (mean, then squared
    deviations), not E[x²] − m², so a large common offset does not cancel digits away.
    """
    valid, ids, count = masked_segments(segments, mask, num_segments)
    x = jnp.where(valid, x.astype(F32), 0.0)
    mean = safe_divide(jax.ops.segment_sum(x, ids, num_segments), count)
    deviation = jnp.where(valid, x - read(mean, ids), 0.0)
    square_sum = jax.ops.segment_sum(deviation**2, ids, num_segments)
    std = jnp.sqrt(safe_divide(square_sum, jnp.maximum(count - ddof, 0.0)))
    return count, mean, std


def _grpo(r, n, m, s, eps):
    return safe_divide(r - m, s + eps)


def _drgrpo(r, n, m, s, eps):
    return r - m


def _rloo(r, n, m, s, eps):
    return safe_divide(n, n - 1.0) * (r - m)


GROUP_ADVANTAGES = {"grpo": _grpo, "drgrpo": _drgrpo, "rloo": _rloo}


def group_advantages(rewards, groups, mask=None, *, num_groups, mode="grpo", ddof=1, eps=1e-6):
    """A_i of rollout i against the other rollouts of its comparison group → [N] float32.

      grpo     (r_i − m_g) / (s_g + eps), s with `ddof` (1: unbiased, torch.std as in verl and EasyR1)
      drgrpo   r_i − m_g                  (Dr. GRPO: no division by the std)
      rloo     r_i − mean_{j≠i} r_j = n_g/(n_g − 1) · (r_i − m_g)

    rewards [N], groups [N] int ids in [0, num_groups), mask [N] bool. A rollout alone in its group and
    padding get exactly 0. (verl gives a singleton its raw reward, which pushes on the reward's absolute
    level instead of on beating peers.) An all-equal group gets 0 in every mode, eps = 0 included.
    """
    advantage = choice(GROUP_ADVANTAGES, mode, "advantage mode")
    valid = in_range(groups, mask, num_groups)
    n, m, s = segment_moments(rewards, groups, valid, num_segments=num_groups, ddof=ddof)
    n_i = read(n, groups)
    a = advantage(rewards.astype(F32), n_i, read(m, groups), read(s, groups), eps)
    return jnp.where(valid & (n_i > 1), a, 0.0)


def degenerate_groups(rewards, groups, mask=None, *, num_groups):
    """[G] bool: the group has rollouts and all their rewards are equal (max_g = min_g).

    Such a group gives every member a zero advantage: it costs compute and teaches nothing. A
    singleton group is degenerate. Empty groups are not.
    """
    valid, ids, count = masked_segments(groups, mask, num_groups)
    r = rewards.astype(F32)
    high = jax.ops.segment_max(jnp.where(valid, r, -jnp.inf), ids, num_groups)
    low = jax.ops.segment_min(jnp.where(valid, r, jnp.inf), ids, num_groups)
    return (count > 0) & (high == low)


def signal_share(rewards, groups, mask=None, *, num_groups):
    """Effective-group ratio: share of the non-empty groups that are not degenerate (scalar float32).

    0 when there is no group at all. Log it every step: a falling share means the task distribution
    has become too easy or too hard for the comparison to carry signal.
    """
    _, _, count = masked_segments(groups, mask, num_groups)
    degenerate = degenerate_groups(rewards, groups, mask, num_groups=num_groups)
    non_empty = jnp.sum(count > 0, dtype=F32)
    return safe_divide(non_empty - jnp.sum(degenerate, dtype=F32), non_empty)


# ---------------------------------------------------------------------------------------------------
# Difficulty rewards: a proposer scored by how its task splits the solvers


_PASS_DENOMINATORS = ("all", "valid")


def _check_denominator(denominator):
    if denominator not in _PASS_DENOMINATORS:
        raise ValueError(f"unknown denominator {denominator!r}; expected one of "
                         f"{list(_PASS_DENOMINATORS)}")


def pass_rate(success, valid=None, *, denominator="all"):
    """p_q = Σ_k success[q,k]·valid[q,k] / D_q → [Q] float32, with D_q = K ("all") or Σ_k valid[q,k]
    ("valid"); success [Q, K] bool or 0/1, valid [Q, K] bool. p = 0 for a row with no valid sample."""
    _check_denominator(denominator)
    valid = jnp.ones(success.shape, bool) if valid is None else jnp.asarray(valid, bool)
    solved = jnp.sum(jnp.where(valid, success.astype(F32), 0.0), axis=-1)
    if denominator == "all":
        return solved / success.shape[-1]
    return safe_divide(solved, jnp.sum(valid, axis=-1, dtype=F32))


def learnability(p):
    """4 p (1 − p): the variance of one solve, scaled to 1 at p = 1/2 (0 for tasks always or never
    solved)."""
    p = jnp.asarray(p, F32)
    return 4.0 * p * (1.0 - p)


def tent(p):
    """1 − 2 |p − 1/2| (R-Zero paper's uncertainty reward r_unc). R-Zero's code uses min(p, 1 − p) =
    tent / 2."""
    return 1.0 - 2.0 * jnp.abs(jnp.asarray(p, F32) - 0.5)


def spice_variance_reward(p, var=0.01):
    """exp(−(p (1 − p) − 1/4)² / (2 var)) (SPICE challenger reward, 1 at p = 1/2).

    p (1 − p) is the population variance of the K correctness bits. The unbiased estimate
    K/(K − 1) p (1 − p) would put the peak below 1 (0.938 at K = 8).
    """
    p = jnp.asarray(p, F32)
    return jnp.exp(-((p * (1.0 - p) - 0.25) ** 2) / (2.0 * var))


def ssr_injector_reward(valid, solve_rate, alpha=0.8):
    """SSR bug injector: −1 if the bug artifact fails the consistency checks, −α if the solvers
    always or never fix it (s ∈ {0, 1}), else 1 − (1 + α) s."""
    s = jnp.asarray(solve_rate, F32)
    shaped = jnp.where((s == 0.0) | (s == 1.0), -alpha, 1.0 - (1.0 + alpha) * s)
    return jnp.where(jnp.asarray(valid, bool), shaped, -1.0)


def gate_invalid(reward, ok, invalid_value):
    """reward where ok, else invalid_value. Papers differ: −1 (R-Zero code, SSR), −0.1 (SPICE), 0
    (SSP after its −0.1 penalty drove the valid-question rate to zero)."""
    return jnp.where(jnp.asarray(ok, bool), jnp.asarray(reward, F32), jnp.asarray(invalid_value, F32))


def _rzero_paper(p, share, ok):
    return jnp.where(ok, jnp.maximum(0.0, tent(p) - share), 0.0)


def _rzero_code(p, share, ok):
    return jnp.where(ok, jnp.minimum(p, 1.0 - p), -1.0) - share


RZERO_FORMS = {"paper": _rzero_paper, "code": _rzero_code}


def rzero_challenger_reward(p, share, ok, *, form="paper"):
    """R-Zero challenger reward from the solvers' majority share p and the repetition penalty share.

      paper   0 if not ok, else max(0, tent(p) − share)
      code    min(p, 1 − p) − share if ok, else −1 − share   (examples/reward_function/caller_penalty.py:
              half the paper's scale, no clipping at 0, −1 for an unparsed question)

    share = |C_k| / B of the question's BLEU cluster (`selfplay.diversity.repetition_penalty`).
    """
    form_fn = choice(RZERO_FORMS, form, "R-Zero reward form")
    return form_fn(jnp.asarray(p, F32), jnp.asarray(share, F32), jnp.asarray(ok, bool))


# ---------------------------------------------------------------------------------------------------
# Majority vote: pseudo-labels from the solvers' own answers


def majority_vote(answer_ids, *, denominator="all"):
    """(label [Q] int32, count [Q] int32, p_hat [Q] float32) of each row of answers [Q, M].

    answer_ids are equivalence-class ids made on the host (−1: no answer). count = size of the largest
    class, label = its id, p_hat = count / M ("all", as R-Zero's questioner reward) or count / number
    of answered samples ("valid", as R-Zero's dataset filter). Ties go to the class seen first, as
    Python's max over R-Zero's insertion-ordered dict does: argmax returns the first index of the
    largest count, and that index is the class's first member. A row with no answer gives label −1,
    count 0, p_hat 0.
    """
    _check_denominator(denominator)
    ids = jnp.asarray(answer_ids)
    answered = ids >= 0
    same = (ids[..., :, None] == ids[..., None, :]) & answered[..., None, :]
    counts = jnp.sum(same, axis=-1, dtype=jnp.int32)  # [Q, M]: size of sample j's class
    first = jnp.argmax(counts, axis=-1)[..., None]
    count = jnp.take_along_axis(counts, first, axis=-1)[..., 0]
    label = jnp.where(count > 0, jnp.take_along_axis(ids, first, axis=-1)[..., 0], -1)
    total = ids.shape[-1] if denominator == "all" else jnp.sum(answered, axis=-1, dtype=F32)
    return label.astype(jnp.int32), count, safe_divide(count.astype(F32), jnp.asarray(total, F32))


def pseudo_label_rewards(answer_ids, label):
    """[Q, M] float32: 1 where a sample's answer is in the majority class label[q], else 0 (also for
    no answer, and for every sample of a row without a label)."""
    ids = jnp.asarray(answer_ids)
    return ((ids == jnp.asarray(label)[..., None]) & (ids >= 0)).astype(F32)


def band_filter(p, lo, hi):
    """lo ≤ p ≤ hi, both ends inclusive: the tasks kept for the solver. R-Zero paper: [1/2 − δ, 1/2 + δ],
    δ = 1/4; R-Zero code: [0.3, 0.8]."""
    p = jnp.asarray(p, F32)
    return (p >= lo) & (p <= hi)


# ---------------------------------------------------------------------------------------------------
# Games: role-conditioned baselines, turns, outcomes


def _rae_sequential(r, keys, valid, b, decay):
    def update(baselines, item):
        reward, key, ok = item
        old = baselines[key]
        new = jnp.where(ok, decay * old + (1.0 - decay) * reward, old)
        return baselines.at[key].set(new), jnp.where(ok, reward - old, 0.0)

    b, a = jax.lax.scan(update, b, (r, jnp.where(valid, keys, 0), valid))
    return a, b


def _rae_batched(r, keys, valid, b, decay):
    """The loop's final state in closed form: after n updates with R_1..R_n in order,
    b_n = d^n b_0 + (1 − d) Σ_j d^(n − j) R_j. The exponent n − j of an entry is the number of later
    entries with its key, a reverse cumulative count over a one-hot [N, E] (E, the number of
    (game, seat) pairs, is small)."""
    one_hot = (keys[:, None] == jnp.arange(b.shape[0])) & valid[:, None]  # [N, E]
    at_or_after = jax.lax.cumsum(one_hot.astype(jnp.int32), axis=0, reverse=True)
    later = jnp.sum(jnp.where(one_hot, at_or_after - 1, 0), axis=-1).astype(F32)
    weighted = jnp.where(valid, (1.0 - decay) * decay**later * r, 0.0)
    count = jnp.sum(one_hot, axis=0, dtype=F32)
    new_b = decay**count * b + jnp.sum(jnp.where(one_hot, weighted[:, None], 0.0), axis=0)
    return jnp.where(valid, r - read(b, keys), 0.0), new_b


def rae_advantages(rewards, keys, baselines, mask=None, *, decay=0.95, sequential=True):
    """SPIRAL's role-conditioned advantage: (A [N], new baselines [E]) float32.

    keys [N] int index baselines [E], one per (game, seat), e.g. key = game_id · num_seats + seat with
    game ids fixed by the config (the baselines live in the checkpoint, so the numbering must not
    change between runs). For each valid rollout, in order:

        A_i = R_i − b_k          (b_k read before this rollout's update)
        b_k ← decay · b_k + (1 − decay) · R_i

    sequential=True is that loop (`lax.scan`), as SPIRAL runs it: the order of the rollouts matters.
    sequential=False reads every A_i against the baselines passed in and leaves the same final state
    as the loop (computed in closed form, in parallel). Padding (mask false, key out of range) gets
    A = 0 and changes no baseline.
    """
    valid = in_range(keys, mask, baselines.shape[0])
    advantage = _rae_sequential if sequential else _rae_batched
    return advantage(rewards.astype(F32), keys, valid, baselines.astype(F32), decay)


def turn_discount(advantages, steps_from_end, gamma):
    """A · γ^steps_from_end: a player's advantage spread over its turns (0 = the last turn)."""
    return jnp.asarray(advantages, F32) * jnp.asarray(gamma, F32) ** jnp.asarray(steps_from_end, F32)


def move_entropy_bonus(probs, actions, coef):
    """Per turn, (coef · (−log π(a|s) − H(π(·|s))), H(π(·|s))), both [N] float32, from the policy over
    the legal moves probs [N, A] (rows sum to 1) at each turn's state and the move a = actions [N] it
    made.

    Added to a turn's advantage, its expectation over a ~ π is coef · ∇H(π(·|s)) (the score-function
    form of an entropy bonus; H is the zero-mean baseline), so the policy gradient maximises return +
    coef · entropy: the entropy-regularised game, whose fixed point is a quantal response equilibrium
    rather than a pure strategy. An action of probability 0 counts as log 1e-30, not −inf."""
    p = jnp.asarray(probs, F32)
    logp = jnp.log(jnp.maximum(p, 1e-30))
    entropy = -jnp.sum(jnp.where(p > 0, p * logp, 0.0), axis=-1)
    chosen = jnp.take_along_axis(logp, jnp.asarray(actions)[:, None], axis=-1)[:, 0]
    return (jnp.asarray(coef, F32) * (-chosen - entropy)).astype(F32), entropy.astype(F32)


def game_outcome_rewards(winner, invalid_player, truncated, *, invalid_penalty=-1.5,
                         invalid_bonus=0.5):
    """Rewards [G, 2] float32 of the two seats of G two-player games (SPIRAL's rules).

    winner [G]: the winning seat, or −1 for a draw. invalid_player [G]: the seat whose invalid move
    ended the game, or −1. truncated [G] bool: the game hit its turn limit. In order of precedence:
    an invalid move gives the offender invalid_penalty and the other seat invalid_bonus (not zero-sum);
    truncation is a draw; otherwise the winner gets +1 and the loser −1, a draw 0 and 0.
    """
    seat = jnp.arange(2)
    winner, offender = jnp.asarray(winner)[:, None], jnp.asarray(invalid_player)[:, None]
    outcome = jnp.where(winner < 0, 0.0, jnp.where(seat == winner, 1.0, -1.0))
    outcome = jnp.where(jnp.asarray(truncated, bool)[:, None], 0.0, outcome)
    invalid = jnp.where(seat == offender, invalid_penalty, invalid_bonus)
    return jnp.where(offender >= 0, invalid, outcome).astype(F32)


def win_draw_loss_rate(counts):
    """(W + D/2) / (W + D + L) from counts [..., 3] of (wins, draws, losses) → [...] float32; NaN where
    no game was played (no result, which a mean would otherwise hide as a loss)."""
    counts = jnp.asarray(counts, F32)
    wins, draws = counts[..., 0], counts[..., 1]
    games = jnp.sum(counts, axis=-1)
    return jnp.where(games > 0, (wins + 0.5 * draws) / jnp.where(games > 0, games, 1.0), jnp.nan)


# ---------------------------------------------------------------------------------------------------
# Loss aggregation over tokens and sequences


def _token_mean(loss, tokens, max_len):
    return safe_divide(jnp.sum(loss), jnp.sum(tokens))


def _seq_mean_token_mean(loss, tokens, max_len):
    per_sequence = safe_divide(jnp.sum(loss, axis=-1), tokens)
    return safe_divide(jnp.sum(per_sequence), jnp.sum(tokens > 0, dtype=F32))


def _seq_mean_token_sum(loss, tokens, max_len):
    return safe_divide(jnp.sum(loss), jnp.sum(tokens > 0, dtype=F32))


def _drgrpo_sum(loss, tokens, max_len):
    if max_len is None:
        raise ValueError("aggregation 'drgrpo' divides by the generation budget L_max; pass max_len "
                         "(the sampler's max_new_tokens), not None")
    return safe_divide(jnp.sum(loss), jnp.sum(tokens > 0, dtype=F32) * max_len)


AGGREGATIONS = {"token-mean": _token_mean, "seq-mean-token-mean": _seq_mean_token_mean,
                "seq-mean-token-sum": _seq_mean_token_sum, "drgrpo": _drgrpo_sum}


def aggregate_loss(token_loss, mask, mode, max_len=None):
    """One scalar from per-token losses [N, T] under mask [N, T] (float32).

      token-mean            Σ_it ℓ / Σ_it mask                 (every token weighs the same)
      seq-mean-token-mean   mean_i (Σ_t ℓ_it / n_i)            (every sequence weighs the same)
      seq-mean-token-sum    mean_i Σ_t ℓ_it
      drgrpo                Σ_it ℓ / (B · L_max)               (Dr. GRPO: no length normalisation)

    n_i = response tokens of sequence i; B = sequences with at least one token, so padding rows do not
    dilute the mean. verl's `seq-mean-token-sum-norm` is drgrpo without the 1/B.
    """
    aggregate = choice(AGGREGATIONS, mode, "loss aggregation")
    mask = jnp.asarray(mask, bool)
    loss = jnp.where(mask, token_loss.astype(F32), 0.0)
    return aggregate(loss, jnp.sum(mask, axis=-1, dtype=F32), max_len)
