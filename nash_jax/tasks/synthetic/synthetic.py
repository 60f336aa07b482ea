"""A synthetic prompt/response task whose preference oracle is known exactly.

Prompts read "write a <tone> reply about <topic>"; a response opens with one of four styles and goes on
"reply about <topic> [fillers] .". The oracle looks at the style only (the first word; anything else is
`off-task`) and prefers style i to style j with probability σ(q_i − q_j + c_ij): a transitive quality
part q, under which `plain` and `off-task` are poor, and a cyclic part c in which witty ≻ formal ≻
poetic ≻ witty, as in the seed's four-response game. Because the style is the first response token, a
policy's distribution over styles, and so its exploitability under the oracle, is exact from one forward
pass per prompt.

The tokenizer (word level, built with the `tokenizers` library) ships beside this file and loads through
transformers like any other; `build_tokenizer` rebuilds it, and a test checks the shipped copy.
"""


import numpy as np
from scipy.special import expit

from nash_jax.core import game
from nash_jax.judges.base import PreferenceModel
from nash_jax.models.tokenizer import build_word_tokenizer
from nash_jax.tasks import registry

TOKENIZER_DIR = registry.MODELS["builtin:synthetic"].tokenizer_dir

STYLES = ("plain", "witty", "formal", "poetic")
CLASSES = (*STYLES, "off-task")
QUALITY = np.array([-1.0, 0.2, 0.0, -0.2, -3.0])
CYCLE = 1.2  # witty ≻ formal ≻ poetic ≻ witty, on the logit scale
# The supervised warm start imitates a policy that mostly answers plainly: a poor start to improve on.
DEMONSTRATION_STYLES = np.array([0.55, 0.25, 0.1, 0.1])

TOPICS = ("rivers", "mountains", "cities", "music", "gardens", "trains", "stars", "oceans",
          "forests", "markets", "bridges", "storms", "islands", "deserts", "libraries", "kitchens")
TONES = ("short", "kind", "clear", "fresh")
FILLERS = ("indeed", "truly", "really", "so")
WORDS = ("write", "a", "reply", "about", ".", *STYLES, *TOPICS, *TONES, *FILLERS)


def preference_matrix():
    """P[i, j] = P(class i ≻ class j) over CLASSES (the styles, then off-task)."""
    cycle = np.zeros((len(CLASSES), len(CLASSES)))
    for a, b in ((1, 2), (2, 3), (3, 1)):
        cycle[a, b], cycle[b, a] = CYCLE, -CYCLE
    pref = expit(QUALITY[:, None] - QUALITY[None, :] + cycle)
    np.fill_diagonal(pref, 0.5)
    return game.validate_preference_matrix(pref)


def response_class(text):
    """Index into CLASSES of a response text: its first word's style, else off-task."""
    words = text.split()
    return STYLES.index(words[0]) if words and words[0] in STYLES else len(STYLES)


class SyntheticOracle(PreferenceModel):
    """The task's exact preference model: P(y ≻ y') = preference_matrix()[class(y), class(y')]."""

    def __init__(self):
        self.pref = preference_matrix()

    def _prob_matrix(self, prompts, candidates):
        classes = np.array([[response_class(c) for c in cands] for cands in candidates])
        return self.pref[classes[:, :, None], classes[:, None, :]]


def warm_start_win_rate(prompts, responses):
    """A scalar reward for `judge.kind: python` with `returns: rewards` (configs/grpo_demo.yaml): the
    oracle's probability that the response's style beats a style drawn from the warm start's
    demonstration mix, r(y) = Σ_j DEMONSTRATION_STYLES_j · P(class(y) ≻ style j). Its mean over a policy's
    responses is that policy's expected win rate against the demonstrations; witty maximises it."""
    mix = np.append(DEMONSTRATION_STYLES, 0.0)  # the demonstrations are never off-task
    win_rates = preference_matrix() @ mix
    return win_rates[[response_class(text) for text in responses]]


def prompt_texts(n, seed=0):
    rng = np.random.default_rng(seed)
    return [f"write a {TONES[t]} reply about {TOPICS[s]}"
            for t, s in zip(rng.integers(len(TONES), size=n), rng.integers(len(TOPICS), size=n))]


def demonstration(prompt, rng, style_probs=DEMONSTRATION_STYLES):
    """A response to `prompt` in a style drawn from style_probs, with 0-3 fillers."""
    style = STYLES[rng.choice(len(STYLES), p=style_probs)]
    fillers = list(rng.choice(FILLERS, size=rng.integers(0, 4)))
    return " ".join([style, "reply", "about", prompt.split()[-1], *fillers, "."])


def class_probabilities(first_token_logprobs, tokenizer):
    """[B, len(CLASSES)]: each prompt's probability of every class, from the log-probs [B, V] of the
    first response token (a style word's id; the rest of the mass is off-task)."""
    ids = [tokenizer.convert_tokens_to_ids(s) for s in STYLES]
    styles = np.exp(np.asarray(first_token_logprobs, np.float64)[:, ids])
    return np.concatenate([styles, np.clip(1.0 - styles.sum(1, keepdims=True), 0.0, 1.0)], axis=1)


def mean_exploitability(class_probs):
    """Mean over prompts of max_y P(y ≻ π_x) − 1/2 under the oracle (exact, from class_probabilities)."""
    pref = preference_matrix()
    return float(np.mean([game.exploitability(pref, p / p.sum()) for p in class_probs]))


def build_tokenizer(path):
    """Build the task's word-level tokenizer and save it (tokenizer.json + config) into `path`."""
    return build_word_tokenizer(path, WORDS)
