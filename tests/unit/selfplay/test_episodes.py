"""Episodes and comparison groups (notes §4 B, K, L): whole episodes only, role-pure groups."""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nash_jax.core import advantages as adv
from nash_jax.selfplay.episodes import (EpisodeAssembler, Role, Rollout, check_role_purity,
                                        comparison_key, group_ids, pack_episodes)


def proposer(uid, source, reward=None, episode=0):
    return Rollout(uid=uid, role=Role.PROPOSER, episode=episode, source=source, reward=reward,
                   finished=True)


def solver(uid, parent, reward=None, episode=0):
    return Rollout(uid=uid, role=Role.SOLVER, episode=episode, parent=parent, reward=reward,
                   finished=True)


def vector_k_rollouts():
    """idx 0–1 proposers from S1, 2–5 solvers of 0, 6–9 solvers of 1, 10 proposer from S2, 11–14
    solvers of 10."""
    rollouts = [proposer(0, "S1"), proposer(1, "S1")]
    rollouts += [solver(i, 0) for i in range(2, 6)] + [solver(i, 1) for i in range(6, 10)]
    rollouts += [proposer(10, "S2")] + [solver(i, 10) for i in range(11, 15)]
    return rollouts


def groups_of(rollouts):
    return group_ids([r.role for r in rollouts], [comparison_key(r) for r in rollouts])


def test_vector_k_group_ids_by_first_appearance():
    assert groups_of(vector_k_rollouts()).tolist() == [0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 4, 4, 4, 4]


def vector_b_batch():
    """P1, P2 from source S1; solvers of P1 score [1, 1, 0, 0], of P2 [1, 0, 0, 0]; proposers are
    rewarded by learnability of their solvers' pass rate."""
    scores = np.array([[1, 1, 0, 0], [1, 0, 0, 0]], np.float32)
    proposer_rewards = adv.learnability(adv.pass_rate(jnp.asarray(scores)))
    rollouts = [proposer(0, "S1", float(proposer_rewards[0])),
                proposer(1, "S1", float(proposer_rewards[1]))]
    rollouts += [solver(2 + i, 0, float(s)) for i, s in enumerate(scores[0])]
    rollouts += [solver(6 + i, 1, float(s)) for i, s in enumerate(scores[1])]
    return rollouts


def test_vector_b_group_ids_give_role_pure_drgrpo_advantages():
    rollouts = vector_b_batch()
    groups = groups_of(rollouts)
    check_role_purity(groups, [r.role for r in rollouts])
    a = adv.group_advantages(jnp.array([r.reward for r in rollouts]), jnp.asarray(groups),
                             num_groups=int(groups.max()) + 1, mode="drgrpo")
    np.testing.assert_allclose(np.asarray(a), [0.125, -0.125, 0.5, 0.5, -0.5, -0.5,
                                               0.75, -0.25, -0.25, -0.25], atol=1e-6)


def test_vector_b_wrong_poolings_are_not_what_group_ids_produce():
    rollouts = vector_b_batch()
    rewards = jnp.array([r.reward for r in rollouts])
    groups = groups_of(rollouts)
    ours = np.asarray(adv.group_advantages(rewards, jnp.asarray(groups),
                                           num_groups=int(groups.max()) + 1, mode="drgrpo"))
    # The wrong groupings themselves, to be sure the numbers of the notes are what they produce:
    solvers_pooled = np.asarray(adv.group_advantages(
        rewards, jnp.array([0, 1] + [2] * 8), num_groups=3, mode="drgrpo"))
    np.testing.assert_allclose(solvers_pooled[2:], [0.625, 0.625, -0.375, -0.375,
                                                    0.625, -0.375, -0.375, -0.375], atol=1e-6)
    everything_pooled = np.asarray(adv.group_advantages(rewards, jnp.zeros(10, jnp.int32),
                                                        num_groups=1, mode="drgrpo"))
    np.testing.assert_allclose(everything_pooled[:2], [0.525, 0.275], atol=1e-6)
    # ... and group_ids does not produce them
    assert not np.allclose(ours[2:], solvers_pooled[2:]), ours
    assert not np.allclose(ours[:2], everything_pooled[:2]), ours
    assert len(set(groups[2:6]) & set(groups[6:10])) == 0, groups


def test_same_key_different_roles_are_different_groups():
    assert group_ids([Role.PROPOSER, Role.SOLVER, Role.PROPOSER], [7, 7, 7]).tolist() == [0, 1, 0]


def test_role_purity_error_names_the_group_and_roles():
    with pytest.raises(ValueError, match=r"comparison group 4 mixes roles: PROPOSER \(first at index 0\), "
                                         r"SOLVER \(first at index 2\)"):
        check_role_purity([4, 4, 4, 5], [Role.PROPOSER, Role.PROPOSER, Role.SOLVER, Role.SOLVER])


@given(st.lists(st.tuples(st.sampled_from(list(Role)), st.integers(0, 4)), max_size=30))
@settings(max_examples=80, deadline=None)
def test_group_ids_are_dense_role_pure_and_first_seen(pairs):
    roles = [role for role, _ in pairs]
    groups = group_ids(roles, [key for _, key in pairs])
    check_role_purity(groups, roles)
    first_seen = list(dict.fromkeys(groups.tolist()))
    assert first_seen == list(range(len(first_seen)))
    for i, j in zip(*np.triu_indices(len(pairs), 1)):
        assert (groups[i] == groups[j]) == (pairs[i] == pairs[j])


def test_players_are_grouped_by_game():
    turns = [Rollout(uid=i, role=Role.PLAYER, episode=i // 4, game="kuhn", seat=i % 2)
             for i in range(8)]
    assert groups_of(turns).tolist() == [0, 0, 0, 0, 1, 1, 1, 1]


def test_missing_comparison_key_is_an_error():
    with pytest.raises(ValueError, match="SOLVER rollout 3 has no parent"):
        comparison_key(Rollout(uid=3, role=Role.SOLVER, episode=0))


# L. Episode assembly and packing


def test_vector_l_pop_complete_returns_only_whole_episodes():
    assembler = EpisodeAssembler()
    for episode in (1, 2):
        assembler.open(episode, {Role.PROPOSER: 1, Role.SOLVER: 4})
    assembler.add(proposer(10, "S1", 0.75, episode=1))
    for uid in range(11, 15):
        assembler.add(solver(uid, 10, 1.0, episode=1))
    unscored = proposer(20, "S2", None, episode=2)
    assembler.add(unscored)
    for uid in range(21, 23):
        assembler.add(solver(uid, 20, 0.0, episode=2))
    done = assembler.pop_complete()
    assert [e.episode_id for e in done] == [1] and len(done[0].rollouts) == 5
    assert len(assembler) == 1 and assembler.pop_complete() == []
    for uid in range(23, 25):
        assembler.add(solver(uid, 20, 1.0, episode=2))
    assert assembler.pop_complete() == []  # the proposer is not scored yet
    unscored.reward = 0.75
    assert [e.episode_id for e in assembler.pop_complete()] == [2]


def test_unfinished_rollouts_keep_an_episode_open():
    assembler = EpisodeAssembler()
    assembler.open(0, {Role.PLAYER: 2})
    assembler.add(Rollout(uid=0, role=Role.PLAYER, episode=0, game="ttt", seat=0, reward=1.0,
                          finished=True))
    late = Rollout(uid=1, role=Role.PLAYER, episode=0, game="ttt", seat=1, reward=-1.0)
    assembler.add(late)
    assert assembler.pop_complete() == []
    late.finished = True
    assert len(assembler.pop_complete()) == 1


def test_assembler_errors():
    assembler = EpisodeAssembler()
    with pytest.raises(ValueError, match="episode 3, which is not open"):
        assembler.add(proposer(0, "S", episode=3))
    assembler.open(3, {Role.PROPOSER: 1})
    with pytest.raises(ValueError, match="already open"):
        assembler.open(3, {Role.PROPOSER: 1})
    with pytest.raises(ValueError, match="expects 0 SOLVER rollouts; expected a positive integer"):
        assembler.open(4, {Role.SOLVER: 0})
    assembler.add(proposer(0, "S", episode=3))
    with pytest.raises(ValueError, match="already has 1 PROPOSER rollouts; it expects 1"):
        assembler.add(proposer(1, "S", episode=3))
    with pytest.raises(ValueError, match="rollout 2 is a SOLVER, but episode 3 expects only PROPOSER"):
        assembler.add(solver(2, 0, episode=3))


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2)), max_size=60),
       st.randoms(use_true_random=False))
@settings(max_examples=60, deadline=None)
def test_assembler_never_returns_an_episode_with_missing_members(plan, rnd):
    expected = {e: {Role.PROPOSER: 1, Role.SOLVER: 1 + e % 3} for e in range(4)}
    assembler = EpisodeAssembler()
    for e, counts in expected.items():
        assembler.open(e, counts)
    pending = [Rollout(uid=10 * e + i, role=role, episode=e, finished=False)
               for e, counts in expected.items()
               for i, role in enumerate([r for r, c in counts.items() for _ in range(c)])]
    rnd.shuffle(pending)
    added = []
    for step, action in plan:
        if action == 0 and pending:
            rollout = pending.pop()
            assembler.add(rollout)
            added.append(rollout)
        elif action == 1 and added:
            rollout = added[step % len(added)]
            rollout.finished, rollout.reward = True, float(step)
        for episode in assembler.pop_complete():
            counts = {role: sum(r.role == role and r.ready for r in episode.rollouts)
                      for role in Role}
            assert all(counts[role] == n for role, n in expected[episode.episode_id].items())
            assert len(episode.rollouts) == sum(expected[episode.episode_id].values())


def sized_episode(episode_id, size):
    assembler = EpisodeAssembler()
    assembler.open(episode_id, {Role.SOLVER: size})
    for uid in range(size):
        assembler.add(solver(uid, 0, 1.0, episode=episode_id))
    return assembler.pop_complete()[0]


def test_vector_l_pack_episodes_never_splits_an_episode():
    episodes = [sized_episode(i, n) for i, n in enumerate([5, 5, 3])]
    packed, carry = pack_episodes(episodes, capacity=12)
    assert [e.episode_id for e in packed] == [0, 1] and sum(e.size for e in packed) == 10
    assert [e.episode_id for e in carry] == [2]
    packed, carry = pack_episodes(carry + [sized_episode(3, 9)], capacity=12)
    assert [e.episode_id for e in packed] == [2, 3] and carry == []


def test_pack_counts_trainable_rollouts_and_refuses_an_oversized_episode():
    episode = sized_episode(0, 6)
    for rollout in episode.rollouts[:3]:
        rollout.trainable = False  # frozen solvers only score the proposer
    assert episode.size == 3
    assert pack_episodes([episode], capacity=3) == ([episode], [])
    with pytest.raises(ValueError, match="episode 9 has 13 trainable rollouts, more than the batch "
                                         "capacity 12"):
        pack_episodes([sized_episode(9, 13)], capacity=12)
