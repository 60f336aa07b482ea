"""The `game_selfplay:` config section, the checks between its fields, the games it names, and the
names of the stages a run records."""

from dataclasses import dataclass, field
from typing import Literal

from nash_jax.config import AT_LEAST_1, NON_NEGATIVE, PROBABILITY, Range
from nash_jax.tasks.games import games as games_lib
from nash_jax.tasks.games.kuhn_chat import KuhnChatRendering

STAGE = "game_selfplay"
EVAL_STAGE = "game_selfplay_eval"
# game_selfplay.rendering: how a state becomes a prompt and a reply a move
RENDERINGS = {"words": games_lib.WordRendering,  # the games' own words, for the tiny policies
              "chat": KuhnChatRendering}  # plain words through a real model's chat template


@dataclass(frozen=True)
class GameSelfPlayConfig:
    RENAMED = {"epochs": "train.epochs"}  # pg updates on each step's batch
    DOMAINS = {"steps": AT_LEAST_1, "games_per_step": AT_LEAST_1, "max_turns": AT_LEAST_1,
               "rae_decay": Range(0, 1, high_open=True), "gamma": Range(0, 1, low_open=True),
               "clip_low": Range(0, 1), "clip_high": NON_NEGATIVE,
               "kl_coef": NON_NEGATIVE, "entropy_coef": NON_NEGATIVE,
               "eval_every": AT_LEAST_1, "snapshots": AT_LEAST_1, "eval_games": AT_LEAST_1,
               "warm_start_jitter": PROBABILITY, "warm_start_repeat": PROBABILITY}
    games: list[str] = field(default_factory=lambda: ["kuhn_poker"])  # OpenSpiel names
    rendering: Literal["words", "chat"] = "words"  # RENDERINGS
    steps: int = 100
    games_per_step: int = 64  # of every game
    max_turns: int | None = None  # player turns before a draw; default: the game's longest play
    reward: Literal["outcome", "returns"] = "outcome"  # ±1/0 (SPIRAL) or OpenSpiel's returns (chips)
    invalid_penalty: float = -1.5
    invalid_bonus: float = 0.5
    advantage: Literal["rae", "grpo", "none"] = "rae"
    rae_decay: float = 0.95
    gamma: float = 1.0  # turn discount
    drop_zero_advantage: bool = True
    clip_low: float = 0.2
    clip_high: float = 0.2
    kl_coef: float = 0.0  # > 0: the pg_kl objective, a k3 KL penalty towards the initial policy π_0
    # > 0: each valid move's advantage gains entropy_coef · (−log π(a|s) − H(π(·|s))), π the policy over
    # the legal moves read from the first response token at the turn's prompt (the exact evaluation's
    # reading): an entropy bonus on the moves alone, not on their spellings or on invalid replies,
    # which keeps a policy that is learning the format from collapsing onto one move
    entropy_coef: float = 0.0
    aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                         "drgrpo"] = "drgrpo"
    eval_every: int = 10  # steps between exact exploitability evaluations
    snapshots: int = 2  # policies exported as RUN_DIR/iter_k/policy, evenly spaced
    eval_games: int = 32  # per seat of every pairing in the frozen-opponent table
    warm_start_jitter: float = 0.5  # builtin:game's demonstrations: see demonstration_policy
    warm_start_repeat: float = 0.5  # share of warm-start states also asked to repeat the state


def check(config):
    g = config.game_selfplay
    if g.steps % g.snapshots:
        raise ValueError(f"game_selfplay.steps={g.steps} is not a multiple of game_selfplay.snapshots="
                         f"{g.snapshots}")
    if not g.games or len(set(g.games)) != len(g.games):
        raise ValueError(f"game_selfplay.games={g.games}; expected a non-empty list of distinct "
                         "OpenSpiel game names")
    make_games(config)  # unknown games fail here, before anything starts


def make_games(config):
    g = config.game_selfplay
    return [games_lib.TextGame(name, max_turns=g.max_turns, reward=g.reward,
                               invalid_penalty=g.invalid_penalty, invalid_bonus=g.invalid_bonus,
                               rendering=RENDERINGS[g.rendering]())
            for name in g.games]
