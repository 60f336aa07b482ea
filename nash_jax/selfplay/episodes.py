"""Rollouts, whole episodes and comparison groups of multi-agent self-play (host side).

An episode is everything one task or one game produces: a proposer's question and the solver answers
that score it, or every turn of both players of a game. A reward often depends on other rollouts of
the same episode (the proposer's on the solvers' pass rate). So the learner sees only complete episodes:
`EpisodeAssembler` buffers rollouts until every role has the expected number finished and scored, and
`pack_episodes` fills learner batches with whole episodes only.

Comparison groups are explicit (`group_ids`): solvers are compared with the solvers of the same
proposal, proposers with the proposers of the same source task, players with the players of the same
game. Pooling two roles in one group mixes their reward scales into one baseline and gives wrong credit
with no error, so `check_role_purity` refuses it.
"""

from collections import Counter
from dataclasses import dataclass, field
from enum import IntEnum

import jax.numpy as jnp
import numpy as np

from nash_jax.core import advantages as adv


class Role(IntEnum):
    PROPOSER = 0  # writes a task: R-Zero's challenger, SPICE's challenger, SSR's bug injector
    SOLVER = 1  # answers another rollout's task
    PLAYER = 2  # takes turns in a game; which side it plays is the rollout's seat


@dataclass
class Rollout:
    """One trajectory of one role: a proposal, an answer, or one player's turn in a game."""

    uid: int  # unique in the run; a child names its parent by it
    role: Role
    episode: int
    parent: int | None = None  # uid of the rollout whose output is this rollout's task (solvers)
    source: object = None  # the task, document or repository a proposer worked from
    game: object = None  # game name (players)
    seat: int | None = None  # player's seat in the game
    reward: float | None = None  # None until scored
    tokens: np.ndarray | None = None  # [T] response tokens
    logprobs: np.ndarray | None = None  # [T] log-probs under the distribution actually sampled
    steps_from_end: int = 0  # turns of this player left after this one (0 = its last turn)
    trainable: bool = True  # False: it only scores another role (R-Zero's frozen solver)
    finished: bool = False

    @property
    def ready(self):
        """Finished and scored: the learner may read it."""
        return self.finished and self.reward is not None


@dataclass
class Episode:
    """The rollouts of one episode and how many of each role it needs before it is complete."""

    episode_id: int
    expected: dict  # {Role: count}
    rollouts: list = field(default_factory=list)

    def complete(self):
        """Every expected role has exactly its count of finished, scored rollouts."""
        ready = Counter(r.role for r in self.rollouts if r.ready)
        return ready == Counter(self.expected)

    @property
    def size(self):
        """The learner rows it takes: its trainable rollouts."""
        return sum(r.trainable for r in self.rollouts)


class EpisodeAssembler:
    """Buffers rollouts by episode and hands out only complete episodes.

        assembler.open(7, {Role.PROPOSER: 1, Role.SOLVER: 8})
        assembler.add(rollout)            # any order, scored now or later (rollout.reward)
        ready = assembler.pop_complete()  # complete episodes, in the order they were opened

    A game opens its episode when it ends, with the turn count of each seat's player.
    """

    def __init__(self):
        self._episodes = {}

    def __len__(self):
        """Episodes opened and not yet handed out."""
        return len(self._episodes)

    def open(self, episode_id, expected):
        if episode_id in self._episodes:
            raise ValueError(f"episode {episode_id} is already open")
        expected = {Role(role): count for role, count in expected.items()}
        for role, count in expected.items():
            if not isinstance(count, int) or count < 1:
                raise ValueError(f"episode {episode_id} expects {count!r} {role.name} rollouts; "
                                 "expected a positive integer")
        self._episodes[episode_id] = Episode(episode_id, expected)

    def add(self, rollout):
        episode = self._episodes.get(rollout.episode)
        if episode is None:
            raise ValueError(f"rollout {rollout.uid} belongs to episode {rollout.episode}, which is not "
                             "open; call open(episode_id, expected={role: count}) first")
        role = Role(rollout.role)
        if role not in episode.expected:
            raise ValueError(f"rollout {rollout.uid} is a {role.name}, but episode {rollout.episode} "
                             f"expects only {', '.join(r.name for r in episode.expected)}")
        have = sum(r.role == role for r in episode.rollouts)
        if have >= episode.expected[role]:
            raise ValueError(f"rollout {rollout.uid}: episode {rollout.episode} already has {have} "
                             f"{role.name} rollouts; it expects {episode.expected[role]}")
        episode.rollouts.append(rollout)

    def pop_complete(self):
        """Remove and return the complete episodes; incomplete ones stay buffered."""
        done = [e for e in self._episodes.values() if e.complete()]
        for episode in done:
            del self._episodes[episode.episode_id]
        return done


def pack_episodes(episodes, capacity):
    """(packed, carry): the leading episodes whose trainable rollouts fit in `capacity` rows, and the rest.

    Episodes are taken in order and never split. The first that does not fit starts the carry, to be
    packed first next time, so no episode waits behind later ones. An episode larger than capacity can
    never fit and is an error.
    """
    for episode in episodes:
        if episode.size > capacity:
            raise ValueError(f"episode {episode.episode_id} has {episode.size} trainable rollouts, "
                             f"more than the batch capacity {capacity}; raise the capacity or split "
                             "the task into smaller episodes")
    used = 0
    for index, episode in enumerate(episodes):
        if used + episode.size > capacity:
            return list(episodes[:index]), list(episodes[index:])
        used += episode.size
    return list(episodes), []


def comparison_key(rollout):
    """What a rollout is compared on: its parent proposal (solver), its source task (proposer), its
    game (player)."""
    role = Role(rollout.role)
    key = {Role.SOLVER: rollout.parent, Role.PROPOSER: rollout.source,
           Role.PLAYER: None if rollout.game is None else (rollout.game, rollout.episode)}[role]
    if key is None:
        field_name = {Role.SOLVER: "parent", Role.PROPOSER: "source", Role.PLAYER: "game"}[role]
        raise ValueError(f"{role.name} rollout {rollout.uid} has no {field_name}; its comparison "
                         f"group is keyed by it")
    return key


def group_ids(roles, keys):
    """[N] int32 dense comparison-group ids: one per distinct (role, key), numbered by first appearance.

    Rollouts with the same key but different roles land in different groups, so every group is
    role-pure by construction.
    """
    if len(roles) != len(keys):
        raise ValueError(f"{len(roles)} roles and {len(keys)} keys; expected one key per rollout")
    ids = {}
    return np.array([ids.setdefault((int(role), key), len(ids)) for role, key in zip(roles, keys)],
                    dtype=np.int32)


def _role_name(role):
    return Role(role).name if role in set(Role) else repr(role)


def check_role_purity(groups, roles):
    """Raise ValueError naming the first comparison group that holds rollouts of two or more roles."""
    seen = {}
    for index, (group, role) in enumerate(zip(np.asarray(groups).tolist(), np.asarray(roles).tolist())):
        seen.setdefault(group, {}).setdefault(role, index)
    for group, members in seen.items():
        if len(members) > 1:
            names = ", ".join(f"{_role_name(role)} (first at index {index})"
                              for role, index in members.items())
            raise ValueError(f"comparison group {group} mixes roles: {names}; a group must hold one "
                             "role, or its mean mixes the roles' reward scales")


def role_advantages(episodes, capacity, proposer_mode, solver_mode):
    """(rollouts, roles, groups, rewards, advantages) of whole episodes packed into `capacity` rows:
    each role's group advantages (core.advantages, `proposer_mode` and `solver_mode`) within its own
    comparison groups, computed at the fixed width `capacity` so that one program serves every step."""
    packed, carry = pack_episodes(episodes, capacity)
    assert not carry, "a step's episodes always fit its batch"
    rollouts = [r for e in packed for r in e.rollouts]
    roles = np.array([int(r.role) for r in rollouts], np.int32)
    groups = group_ids(roles, [comparison_key(r) for r in rollouts])
    check_role_purity(groups, roles)
    rewards = np.array([r.reward for r in rollouts], np.float32)
    advantage = np.zeros(len(rollouts), np.float32)
    pad = capacity - len(rollouts)
    for role, mode in ((Role.PROPOSER, proposer_mode), (Role.SOLVER, solver_mode)):
        mask = roles == role
        if mask.any():
            a = adv.group_advantages(jnp.asarray(np.pad(rewards, (0, pad))),
                                     jnp.asarray(np.pad(groups, (0, pad), constant_values=-1)),
                                     jnp.asarray(np.pad(mask, (0, pad))), num_groups=capacity, mode=mode)
            advantage = np.where(mask, np.asarray(a)[:len(rollouts)], advantage)
    return rollouts, roles, groups, rewards, advantage
