"""Advantages and rewards of self-play against the hand-computed vectors of
reference/notes_self_play.md §4 (A–M), and their invariants."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nash_jax.core import advantages as adv
from nash_jax.core import diversity


def close(actual, expected, atol=1e-6, **kwargs):
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), atol=atol, rtol=0, **kwargs)


def one_group(rewards, mode, **kwargs):
    r = jnp.asarray(rewards, jnp.float32)
    return adv.group_advantages(r, jnp.zeros(r.shape, jnp.int32), num_groups=1, mode=mode, **kwargs)


# A. One group r = [1, 0, 0, 0]


def test_vector_a_grpo_unbiased_std():
    close(one_group([1, 0, 0, 0], "grpo", eps=0.0), [1.5, -0.5, -0.5, -0.5])
    close(one_group([1, 0, 0, 0], "grpo", eps=1e-6), [1.499997, -0.499999, -0.499999, -0.499999])


def test_vector_a_grpo_population_std():
    close(one_group([1, 0, 0, 0], "grpo", ddof=0, eps=0.0), [1.7320508] + [-0.5773503] * 3)


def test_vector_a_drgrpo_and_rloo():
    close(one_group([1, 0, 0, 0], "drgrpo"), [0.75, -0.25, -0.25, -0.25])
    close(one_group([1, 0, 0, 0], "rloo"), [1.0, -1 / 3, -1 / 3, -1 / 3])


def test_two_distinct_values_give_plus_minus_one_over_root_two():
    close(one_group([3.0, -2.0], "grpo", eps=0.0), [0.7071068, -0.7071068])


# B. Proposer / solver groups (the group ids come from selfplay.episodes.group_ids; see tests/unit/selfplay)

SOLVER_SCORES = np.array([[1, 1, 0, 0], [1, 0, 0, 0]], np.float32)  # solvers of P1 and P2


def test_vector_b_proposer_rewards_from_solver_pass_rates():
    p = adv.pass_rate(jnp.asarray(SOLVER_SCORES))
    close(p, [0.5, 0.25])
    close(adv.learnability(p), [1.0, 0.75])
    close(adv.tent(p), [1.0, 0.5])
    proposers = adv.learnability(p)
    close(one_group(proposers, "drgrpo"), [0.125, -0.125])
    close(one_group(proposers, "grpo", eps=0.0), [0.7071068, -0.7071068])


def test_vector_b_solvers_grouped_by_parent():
    r = jnp.asarray(SOLVER_SCORES.reshape(-1))
    parent = jnp.array([0] * 4 + [1] * 4)
    close(adv.group_advantages(r, parent, num_groups=2, mode="drgrpo"),
          [0.5, 0.5, -0.5, -0.5, 0.75, -0.25, -0.25, -0.25])
    close(adv.group_advantages(r, parent, num_groups=2, mode="grpo", eps=0.0),
          [0.8660254, 0.8660254, -0.8660254, -0.8660254, 1.5, -0.5, -0.5, -0.5])


# C. Majority vote, m = 10


def test_vector_c_majority_vote():
    ids = jnp.array([[3, 3, 5, 3, 7, 5, 3, -1, 5, 3]])
    label, count, p_all = adv.majority_vote(ids)
    assert (int(label[0]), int(count[0])) == (3, 5)
    close(p_all, [0.5])
    close(adv.majority_vote(ids, denominator="valid")[2], [0.5555556])
    close(adv.pseudo_label_rewards(ids, label), [[1, 1, 0, 1, 0, 0, 1, 0, 0, 1]])
    close(adv.tent(p_all), [1.0])
    close(jnp.minimum(p_all, 1 - p_all), [0.5])
    assert bool(adv.band_filter(p_all, 0.25, 0.75)[0])


def test_vector_c_tie_goes_to_first_seen_answer():
    ids = jnp.array([[2, 4, 4, 2, -1]])
    label, count, p_all = adv.majority_vote(ids)
    assert (int(label[0]), int(count[0])) == (2, 2)
    close(p_all, [0.4])
    close(adv.majority_vote(ids, denominator="valid")[2], [0.5])


def test_band_filter_is_inclusive_at_both_ends():
    p = jnp.array([0.2, 0.3, 0.5, 0.8, 0.9])
    assert adv.band_filter(p, 0.3, 0.8).tolist() == [False, True, True, True, False]
    p9 = jnp.arange(10) / 9.0  # R-Zero code: 9 valid answers, band [0.3, 0.8] keeps 3..7 of 9
    assert np.flatnonzero(adv.band_filter(p9, 0.3, 0.8)).tolist() == [3, 4, 5, 6, 7]


# D. R-Zero challenger composite

P_D = jnp.array([0.5, 0.3, 0.7, 1.0])
SHARE_D = jnp.array([0.5, 0.5, 0.25, 0.25])


def test_vector_d_rzero_paper_and_code_forms():
    ok = jnp.ones(4, bool)
    close(adv.tent(P_D), [1.0, 0.6, 0.6, 0.0])
    close(adv.rzero_challenger_reward(P_D, SHARE_D, ok, form="paper"), [0.5, 0.1, 0.35, 0.0])
    close(adv.rzero_challenger_reward(P_D, SHARE_D, ok, form="code"), [0.0, -0.2, 0.05, -0.25])


def test_rzero_unparsed_question_paper_zero_code_minus_one_minus_share():
    ok = jnp.array([True, False, True, False])
    close(adv.rzero_challenger_reward(P_D, SHARE_D, ok, form="paper"), [0.5, 0.0, 0.35, 0.0])
    close(adv.rzero_challenger_reward(P_D, SHARE_D, ok, form="code"), [0.0, -1.5, 0.05, -1.25])


# E. SPICE Gaussian reward, σ² = 0.01


def test_vector_e_spice_variance_reward():
    p = jnp.array([0.5, 0.25, 0.75, 0.125, 0.0, 1.0])
    close(adv.spice_variance_reward(p),
          [1.0, 0.8225776, 0.8225776, 0.3720342, 0.0439369, 0.0439369])
    close(adv.gate_invalid(adv.spice_variance_reward(p), jnp.zeros(6, bool), -0.1), [-0.1] * 6)
    close(adv.learnability(jnp.array([0.25, 0.125])), [0.75, 0.4375])
    close(adv.tent(jnp.array([0.25, 0.125])), [0.5, 0.25])


def test_vector_e_population_variance_not_unbiased():
    # The bug to catch: with the unbiased variance at K = 8 the peak at p = 1/2 would be 0.9382156.
    k = 8
    unbiased = np.exp(-((k / (k - 1) * 0.25 - 0.25) ** 2) / 0.02)
    close(unbiased, 0.9382156)
    got = float(adv.spice_variance_reward(jnp.asarray(adv.pass_rate(jnp.array([[1, 0] * 4])))[0]))
    assert got == pytest.approx(1.0) and abs(got - unbiased) > 0.05, got


def test_difficulty_rewards_share_their_argmax():
    p = jnp.linspace(0, 1, 101)
    t = adv.tent(p)
    close(adv.learnability(p), t * (2 - t))
    close(adv.spice_variance_reward(p), jnp.exp(-(1 - adv.learnability(p)) ** 2 / 0.32), atol=1e-6)


# F. SSR injector, α = 0.8


def test_vector_f_ssr_injector():
    s = jnp.array([0.5, 0.0, 1.0, 0.125, 0.25, 0.5, 0.875])
    valid = jnp.array([False, True, True, True, True, True, True])
    close(adv.ssr_injector_reward(valid, s), [-1.0, -0.8, -0.8, 0.775, 0.55, 0.1, -0.575])


# G. RAE (SPIRAL), decay 0.95, b0 = 0

KUHN_P0, KUHN_P1, TTT_P0 = 0, 1, 2  # baseline keys (game, seat)
G_KEYS = jnp.array([KUHN_P0, KUHN_P1, KUHN_P0, KUHN_P1, KUHN_P0, KUHN_P1, TTT_P0])
G_REWARDS = jnp.array([1.0, -1.0, -1.0, 1.0, 1.0, -1.0, 0.0])


@pytest.mark.parametrize("jit", [False, True])
def test_vector_g_rae_sequential(jit):
    fn = jax.jit(adv.rae_advantages, static_argnames=("decay", "sequential")) if jit else \
        adv.rae_advantages
    a, b = fn(G_REWARDS, G_KEYS, jnp.zeros(3))
    close(a, [1.0, -1.0, -1.05, 1.05, 1.0025, -1.0025, 0.0])
    close(b, [0.047625, -0.047625, 0.0])


def test_vector_g_intermediate_kuhn_p0_baselines():
    b, seen = jnp.zeros(3), []
    for r, k in zip(G_REWARDS.tolist(), G_KEYS.tolist()):
        _, b = adv.rae_advantages(jnp.array([r]), jnp.array([k]), b)
        if k == KUHN_P0:
            seen.append(float(b[KUHN_P0]))
    close(seen, [0.05, -0.0025, 0.047625])


@pytest.mark.parametrize("jit", [False, True])
def test_vector_g_rae_batched_same_final_state(jit):
    fn = jax.jit(functools.partial(adv.rae_advantages, sequential=False)) if jit else \
        functools.partial(adv.rae_advantages, sequential=False)
    a, b = fn(jnp.array([1.0, -1.0, 1.0]), jnp.zeros(3, jnp.int32), jnp.zeros(1))
    close(a, [1.0, -1.0, 1.0])
    close(b, [0.047625])


def test_rae_masked_entries_get_no_advantage_and_no_update():
    mask = jnp.array([True, True, False, True, True, True, True])
    keys = G_KEYS.at[5].set(-1)  # an out-of-range key is padding too
    for sequential in (True, False):
        a, b = adv.rae_advantages(G_REWARDS, keys, jnp.zeros(3), mask, sequential=sequential)
        assert float(a[2]) == 0.0 and float(a[5]) == 0.0
        kept = np.array([0, 1, 3, 4, 6])
        a_ref, b_ref = adv.rae_advantages(G_REWARDS[kept], G_KEYS[kept], jnp.zeros(3),
                                          sequential=sequential)
        close(a[kept], a_ref)
        close(b, b_ref)


RAE_JIT = jax.jit(adv.rae_advantages, static_argnames=("sequential",))


@given(n=st.integers(1, 40), keys=st.integers(1, 5), decay=st.floats(0.5, 0.999),
       seed=st.integers(0, 2**31 - 1))
@settings(max_examples=30, deadline=None)
def test_rae_batched_state_equals_sequential_state(n, keys, decay, seed):
    # fixed shapes (40 rollouts, 5 baselines) with n real rollouts over `keys` baselines: one compile
    rng = np.random.default_rng(seed)
    r = jnp.asarray(rng.normal(size=40), jnp.float32)
    k = jnp.asarray(np.where(np.arange(40) < n, rng.integers(-1, keys, 40), 7))
    b0 = jnp.asarray(rng.normal(size=5), jnp.float32)
    mask = jnp.asarray(rng.uniform(size=40) < 0.8)
    _, b_seq = RAE_JIT(r, k, b0, mask, decay=decay, sequential=True)
    a_bat, b_bat = RAE_JIT(r, k, b0, mask, decay=decay, sequential=False)
    close(b_bat, b_seq, atol=1e-5)
    valid = np.asarray(mask) & (np.asarray(k) >= 0) & (np.asarray(k) < 5)
    expected = np.where(valid, np.asarray(r) - np.asarray(b0)[np.clip(np.asarray(k), 0, 4)], 0)
    close(a_bat, expected, atol=1e-6)


def test_rae_baselines_round_trip_through_orbax_checkpoint(tmp_path):
    from nash_jax import runs

    _, baselines = adv.rae_advantages(G_REWARDS, G_KEYS, jnp.zeros(3))
    manager = runs.checkpoint_manager(tmp_path / "checkpoints", every=1)
    runs.save_checkpoint(manager, 7, {"rae": {"baselines": baselines}}, {"games": ["kuhn", "ttt"]})
    step, trees, extra = runs.restore_checkpoint(manager, {"rae": {"baselines": jnp.zeros(3)}})
    manager.close()
    assert step == 7 and extra == {"games": ["kuhn", "ttt"]}
    restored = np.asarray(trees["rae"]["baselines"])
    np.testing.assert_array_equal(restored, np.asarray(baselines))
    # and training continues from the restored state exactly as it would have without the restart
    a1, _ = adv.rae_advantages(G_REWARDS, G_KEYS, baselines)
    a2, _ = adv.rae_advantages(G_REWARDS, G_KEYS, jnp.asarray(restored))
    np.testing.assert_array_equal(np.asarray(a1), np.asarray(a2))


# H. Turn discount


def test_vector_h_turn_discount():
    steps = jnp.array([2, 1, 0])
    close(adv.turn_discount(jnp.ones(3), steps, 0.9), [0.81, 0.9, 1.0])
    close(adv.turn_discount(jnp.ones(3), steps, 1.0), [1.0, 1.0, 1.0])


def test_game_outcome_rewards():
    winner = jnp.array([0, 1, -1, 0, 1, 0])
    invalid = jnp.array([-1, -1, -1, 1, 0, -1])
    truncated = jnp.array([False, False, False, False, False, True])
    close(adv.game_outcome_rewards(winner, invalid, truncated),
          [[1, -1], [-1, 1], [0, 0], [0.5, -1.5], [-1.5, 0.5], [0, 0]])


# I. Loss aggregation

I_LOSS = jnp.array([[1.0, 1.0, 0, 0, 0, 0, 0, 0], [1.0, 1.0, 1.0, 1.0, 0, 0, 0, 0]])
I_MASK = I_LOSS > 0


@pytest.mark.parametrize("mode,expected", [("token-mean", 1.0), ("seq-mean-token-mean", 1.0),
                                           ("seq-mean-token-sum", 3.0), ("drgrpo", 0.375)])
def test_vector_i_loss_aggregation(mode, expected):
    close(adv.aggregate_loss(I_LOSS, I_MASK, mode, max_len=8), expected)
    # a padding row (no tokens) and garbage under the mask change nothing
    loss = jnp.concatenate([I_LOSS + 7.0 * ~I_MASK, jnp.full((1, 8), 5.0)])
    mask = jnp.concatenate([I_MASK, jnp.zeros((1, 8), bool)])
    close(adv.aggregate_loss(loss, mask, mode, max_len=8), expected)


def test_vector_i_verl_sum_norm_is_drgrpo_without_one_over_b():
    batch = 2
    close(batch * adv.aggregate_loss(I_LOSS, I_MASK, "drgrpo", max_len=8), 0.75)


def test_drgrpo_aggregation_needs_max_len():
    with pytest.raises(ValueError, match="max_len"):
        adv.aggregate_loss(I_LOSS, I_MASK, "drgrpo")


# J. Diversity (the host-side distinct-2 is in tests/unit/selfplay/test_diversity.py)


def test_vector_j_cluster_entropy():
    normalised, raw = diversity.cluster_entropy(jnp.array([0, 0, 1, 2]))
    close(raw, 1.0397208)
    close(normalised, 0.75)
    padded = diversity.cluster_entropy(jnp.array([0, 0, 1, 2, 1, -1]), jnp.array([1, 1, 1, 1, 0, 1], bool))
    close(padded, (0.75, 1.0397208))


def test_vector_j_pairwise_cosine_and_archive_novelty():
    e = jnp.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    close(diversity.mean_pairwise_cosine_distance(e), 0.5285955)
    padded = jnp.concatenate([e, jnp.array([[5.0, -3.0]])])
    close(diversity.mean_pairwise_cosine_distance(padded, jnp.array([1, 1, 1, 0], bool)), 0.5285955)
    archive = jnp.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])
    close(diversity.archive_novelty(jnp.array([0.0, 1.0]), archive, jnp.array([True, True, False])), 0.2)
    close(diversity.archive_novelty(jnp.array([0.0, 1.0]), archive, jnp.zeros(3, bool)), 1.0)


# K. Group health (the group ids of K are built in tests/unit/selfplay/test_episodes.py)


def test_vector_k_effective_group_ratio():
    r = jnp.array([1, 1, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1], jnp.float32)
    g = jnp.repeat(jnp.arange(3), 4)
    assert adv.degenerate_groups(r, g, num_groups=3).tolist() == [False, False, True]
    close(adv.signal_share(r, g, num_groups=3), 2 / 3)
    close(adv.signal_share(r, g, num_groups=5), 2 / 3)  # empty groups are not counted


def test_vector_k_singleton_group_gets_zero_not_its_raw_reward():
    r = jnp.array([0.3, 0.9, 0.7, 1.0, 0.0])
    g = jnp.array([0, 0, 1, 2, 2])  # group 1 is a singleton
    for mode in adv.GROUP_ADVANTAGES:
        a = adv.group_advantages(r, g, num_groups=3, mode=mode)
        assert float(a[2]) == 0.0, (mode, a)
    assert bool(adv.degenerate_groups(r, g, num_groups=3)[1])


# M. Frozen-opponent table (W, D, L)


def test_vector_m_win_draw_loss_rates():
    table = jnp.array([[[7, 1, 0], [5, 1, 2]],  # against random: seat 0, seat 1
                       [[4, 2, 2], [3, 0, 5]]])  # against the frozen initial model
    rates = adv.win_draw_loss_rate(table)
    close(rates, [[0.9375, 0.6875], [0.625, 0.375]])
    close(rates.mean(axis=-1), [0.8125, 0.5])
    assert np.isnan(float(adv.win_draw_loss_rate(jnp.zeros(3))))


# Padding, errors, jit


def test_padding_and_out_of_range_groups_get_zero_and_change_nothing():
    r = jnp.array([1.0, 0.0, 0.0, 0.0, 100.0, -50.0])
    g = jnp.array([0, 0, 0, 0, -1, 0])
    mask = jnp.array([True, True, True, True, True, False])
    for mode in adv.GROUP_ADVANTAGES:
        a = adv.group_advantages(r, g, mask, num_groups=1, mode=mode)
        close(a[:4], one_group([1, 0, 0, 0], mode))
        assert a[4:].tolist() == [0.0, 0.0], (mode, a)


def test_all_equal_group_gives_zero_even_without_eps():
    assert one_group([0.1, 0.1, 0.1], "grpo", eps=0.0).tolist() == [0.0, 0.0, 0.0]


def test_unknown_mode_names_the_choices():
    with pytest.raises(ValueError, match=r"unknown advantage mode 'ppo'.*drgrpo.*grpo.*rloo"):
        one_group([1, 0], "ppo")
    with pytest.raises(ValueError, match=r"unknown loss aggregation 'sum'.*token-mean"):
        adv.aggregate_loss(I_LOSS, I_MASK, "sum")
    with pytest.raises(ValueError, match=r"unknown denominator 'k'.*'all', 'valid'"):
        adv.majority_vote(jnp.zeros((1, 3), jnp.int32), denominator="k")
    with pytest.raises(ValueError, match=r"unknown R-Zero reward form 'v2'.*code.*paper"):
        adv.rzero_challenger_reward(P_D, SHARE_D, jnp.ones(4, bool), form="v2")


def test_group_advantages_jit_with_static_group_count():
    fn = jax.jit(adv.group_advantages, static_argnames=("num_groups", "mode", "ddof", "eps"))
    r = jnp.array([1.0, 0, 0, 0, 1, 1, 0, 0])
    g = jnp.repeat(jnp.arange(2), 4)
    close(fn(r, g, num_groups=2, mode="grpo"), adv.group_advantages(r, g, num_groups=2))


def test_segment_moments():
    x = jnp.array([1.0, 2.0, 3.0, 10.0, 7.0])
    g = jnp.array([0, 0, 0, 2, 1])
    n, m, s = adv.segment_moments(x, g, num_segments=4)
    close(n, [3, 1, 1, 0])
    close(m, [2, 7, 10, 0])
    close(s, [1, 0, 0, 0])


# Properties

GROUP_ADVANTAGES_JIT = jax.jit(adv.group_advantages, static_argnames=("num_groups", "mode"))
MAX_GROUPS, MAX_ROLLOUTS = 6, 40

# (number of groups, [(group id or −1, reward)]), padded to fixed shapes below: few compiles
groups_and_rewards = st.integers(1, MAX_GROUPS).flatmap(lambda g: st.tuples(
    st.just(g),
    st.lists(st.tuples(st.integers(-1, g - 1), st.sampled_from([0.0, 1.0, 0.5, -2.0, 3.25])),
             min_size=1, max_size=MAX_ROLLOUTS)))


def padded(pairs):
    g = np.full(MAX_ROLLOUTS, -1)
    r = np.zeros(MAX_ROLLOUTS, np.float32)
    g[:len(pairs)] = [p[0] for p in pairs]
    r[:len(pairs)] = [p[1] for p in pairs]
    return jnp.asarray(g), jnp.asarray(r)


@given(data=groups_and_rewards, mode=st.sampled_from(sorted(adv.GROUP_ADVANTAGES)))
@settings(max_examples=60, deadline=None)
def test_advantages_sum_to_zero_within_every_group(data, mode):
    num_groups, pairs = data
    g, r = padded(pairs)
    a = np.asarray(GROUP_ADVANTAGES_JIT(r, g, num_groups=MAX_GROUPS, mode=mode))
    for group in range(num_groups):
        members = np.asarray(g) == group
        assert abs(a[members].sum()) < 1e-4 * max(1, members.sum()), (group, a[members])
    assert np.all(a[np.asarray(g) < 0] == 0.0)


@given(data=groups_and_rewards, mode=st.sampled_from(sorted(adv.GROUP_ADVANTAGES)),
       seed=st.integers(0, 2**31 - 1))
@settings(max_examples=40, deadline=None)
def test_permuting_rollouts_permutes_advantages(data, mode, seed):
    _, pairs = data
    g, r = padded(pairs)
    perm = np.random.default_rng(seed).permutation(MAX_ROLLOUTS)
    a = GROUP_ADVANTAGES_JIT(r, g, num_groups=MAX_GROUPS, mode=mode)
    a_perm = GROUP_ADVANTAGES_JIT(r[perm], g[perm], num_groups=MAX_GROUPS, mode=mode)
    close(a_perm, np.asarray(a)[perm], atol=1e-5)
    b0 = jnp.linspace(-1, 1, MAX_GROUPS)
    a_rae, _ = RAE_JIT(r, g, b0, sequential=False)
    a_rae_perm, _ = RAE_JIT(r[perm], g[perm], b0, sequential=False)
    close(a_rae_perm, np.asarray(a_rae)[perm])


def first_seen_majority(row):
    """R-Zero's vote in plain Python: classes in insertion order, max() keeps the first maximum."""
    counts = {}
    for answer in row:
        if answer >= 0:
            counts[answer] = counts.get(answer, 0) + 1
    if not counts:
        return -1, 0
    label = max(counts, key=counts.get)
    return label, counts[label]


VOTE_JIT = jax.jit(adv.majority_vote, static_argnames=("denominator",))


@given(rows=st.lists(st.lists(st.integers(-1, 3), min_size=6, max_size=6), min_size=8, max_size=8))
@settings(max_examples=60, deadline=None)
def test_majority_vote_ignores_missing_answers_and_breaks_ties_first_seen(rows):
    ids = jnp.array(rows)
    label, count, p_all = VOTE_JIT(ids)
    _, _, p_valid = VOTE_JIT(ids, denominator="valid")
    for q, row in enumerate(rows):
        expected_label, expected_count = first_seen_majority(row)
        assert (int(label[q]), int(count[q])) == (expected_label, expected_count), row
        answered = sum(a >= 0 for a in row)
        close(p_all[q], expected_count / 6)
        close(p_valid[q], expected_count / answered if answered else 0.0)
    empty = adv.majority_vote(jnp.full((2, 5), -1))
    assert [x.tolist() for x in empty] == [[-1, -1], [0, 0], [0.0, 0.0]]
    assert adv.pseudo_label_rewards(jnp.full((1, 5), -1), empty[0][:1]).tolist() == [[0.0] * 5]


def test_move_entropy_bonus_by_hand():
    # π = (0.2, 0.8): H = −0.2 ln 0.2 − 0.8 ln 0.8 = 0.500402; bonus = coef (−ln π(a) − H)
    probs = jnp.array([[0.2, 0.8], [0.2, 0.8], [0.5, 0.5], [1.0, 0.0]])
    bonus, entropy = adv.move_entropy_bonus(probs, jnp.array([0, 1, 1, 0]), 0.5)
    h = 0.5004024235
    close(bonus, [0.5 * (1.6094379124 - h), 0.5 * (0.2231435513 - h), 0.0, 0.0], atol=1e-6)
    close(entropy, [h, h, np.log(2), 0.0], atol=1e-6)


def test_move_entropy_bonus_is_the_entropy_gradient_in_expectation():
    # Σ_a π(a) bonus(a) ∇ log π(a) = coef ∇H for a softmax policy: the bonus's whole job
    logits = jnp.array([0.3, -1.2, 0.8])

    def entropy(z):
        p = jax.nn.softmax(z)
        return -jnp.sum(p * jnp.log(p))

    p = jax.nn.softmax(logits)
    bonus, _ = adv.move_entropy_bonus(jnp.tile(p, (3, 1)), jnp.arange(3), 0.7)
    score = jax.jacobian(lambda z: jax.nn.log_softmax(z))(logits)  # [a, θ]: ∇ log π(a)
    close(jnp.sum(p[:, None] * bonus[:, None] * score, axis=0), 0.7 * jax.grad(entropy)(logits),
          atol=1e-6)
