"""The sections every run config shares, each a frozen dataclass with its fields' domains.

A recipe adds its own section (nash_jax.config.recipes); `build` (nash_jax.config.loader) checks every
key and value against these types and domains.
"""

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Literal

from nash_jax.config.domains import (AT_LEAST_1, NON_NEGATIVE, POSITIVE, PROBABILITY, Range, check_choice,
                                     parse_bytes)
from nash_jax.train.optim import OPTIMIZERS, SCHEDULES

BUILTIN_SYNTHETIC = "builtin:synthetic"  # model/data path of the shipped synthetic task
_BUILTIN_PATH = re.compile(r"(builtin:[^:]+)(?::([^:]*))?")


def builtin_path_parts(path):
    """(name, count text or None) of a `builtin:NAME` or `builtin:NAME:COUNT` path, else None: the
    syntax only (nash_jax.tasks.builtin_prompt_set says which names exist and checks the count)."""
    match = _BUILTIN_PATH.fullmatch(str(path))
    return (match.group(1), match.group(2)) if match else None


LORA_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
LORA_BASES = ("none", "int8", "nf4")


@dataclass(frozen=True)
class LoraConfig:
    """Low-rank adapters trained over a frozen base (models/lora.py): W x + (alpha / rank) B A x on
    each projection named in `targets` (PEFT's names); the base stays as loaded (`base`: its
    quantisation). adapter: a PEFT adapter directory to start from (its rank, alpha and targets must
    be these) instead of B = 0."""

    DOMAINS = {"rank": AT_LEAST_1, "alpha": POSITIVE, "dropout": Range(0, 1, high_open=True)}
    rank: int = 16
    alpha: float = 32.0
    dropout: float = 0.0
    targets: list[str] = field(default_factory=lambda: list(LORA_PROJECTIONS))
    base: Literal["none", "int8", "nf4"] = "none"
    # with a quantised base the merged exports (every iterate's HF directory) are the dequantised base
    # plus the adapters: fp weights off the original base by the quantisation error; say yes to that
    merged_from_quantised: bool = False
    adapter: str | None = None

    def check_fields(self, prefix):
        unknown = [t for t in self.targets if t not in LORA_PROJECTIONS]
        if unknown or not self.targets or len(set(self.targets)) != len(self.targets):
            raise ValueError(f"{prefix}.targets={self.targets!r}; expected distinct names among "
                             f"{list(LORA_PROJECTIONS)}")
        if self.base != "none" and not self.merged_from_quantised:
            raise ValueError(f"{prefix}.base={self.base}: every recipe exports its iterates as merged "
                             "fp weights (the dequantised base plus the adapters, which differ from the "
                             f"original base by the quantisation error); set {prefix}."
                             "merged_from_quantised=true to accept that")
        if self.merged_from_quantised and self.base == "none":
            raise ValueError(f"{prefix}.merged_from_quantised=true: {prefix}.base is none, so there is "
                             "no quantised base to merge; leave it unset")
        if self.dropout:
            raise ValueError(f"{prefix}.dropout={self.dropout!r}; only 0 is supported so far (the "
                             "training step draws no dropout masks)")


@dataclass(frozen=True)
class ModelConfig:
    path: str = BUILTIN_SYNTHETIC  # a local HF directory, or the synthetic task's warm-started model
    tokenizer: str | None = None  # defaults to the model directory
    dtype: Literal["float32", "bfloat16"] = "float32"  # compute dtype
    param_dtype: Literal["float32", "bfloat16"] | None = None  # storage dtype (default: dtype)
    # per-layer rematerialisation (models/remat.py REMAT_POLICIES); true = "full"
    remat: bool | Literal["none", "full", "dots", "dots_with_no_batch_dims"] = False
    attention: Literal["auto", "reference", "xla", "cudnn", "splash"] = "auto"  # models/attention.py
    lora: LoraConfig | None = None  # train low-rank adapters over a frozen base (null: full weights)


@dataclass(frozen=True)
class WarmStartConfig:
    """The supervised fit that makes π_0: a built-in task's tiny model always; a model directory's
    (model.path) only with `fit_model`, in a recipe that has demonstrations to fit (SSR)."""

    DOMAINS = {"steps": AT_LEAST_1, "batch_size": AT_LEAST_1, "learning_rate": POSITIVE,
               "hidden_size": Range(4), "num_layers": AT_LEAST_1, "checkpoint_every": AT_LEAST_1}
    steps: int = 150
    batch_size: int = 32
    learning_rate: float = 3e-3
    hidden_size: int = 64  # four heads of hidden_size / 4 (a built-in model's size)
    num_layers: int = 2  # (a built-in model's)
    # fit model.path itself on the recipe's demonstrations before self-play; π_0 is then the fitted
    # model, RUN_DIR/init/policy (a built-in model is always fitted)
    fit_model: bool = False
    checkpoint_every: int | None = None  # steps between the fit's checkpoints (null: train.checkpoint_every)

    def __post_init__(self):
        if self.hidden_size % 4:
            raise ValueError(f"warm_start.hidden_size={self.hidden_size}; expected a multiple of 4 "
                             "(four attention heads)")


@dataclass(frozen=True)
class DataConfig:
    DOMAINS = {"prompts_per_iteration": AT_LEAST_1, "max_prompt_tokens": AT_LEAST_1}
    path: str = BUILTIN_SYNTHETIC  # jsonl / json / parquet / arrow file, a directory of them, a
    #                                datasets.save_to_disk directory, or a built-in prompt set
    #                                (builtin:synthetic, builtin:arithmetic: 1024 prompts;
    #                                builtin:arithmetic:352 for 352; nash_jax.tasks)
    prompt_column: str = "prompt"
    split: str = "train"  # which split of a save_to_disk DatasetDict
    prompts_per_iteration: int | None = None  # default: the prompts left after evaluation, split evenly
    shuffle: bool = True  # shuffle (by seed) before splitting
    system_prompt: str | None = None
    max_prompt_tokens: int = 512  # after the chat template
    too_long: Literal["skip", "truncate_left", "error"] = "skip"


@dataclass(frozen=True)
class SamplingConfig:
    DOMAINS = {"num_samples": AT_LEAST_1, "max_new_tokens": AT_LEAST_1, "temperature": NON_NEGATIVE,
               "top_p": Range(0, 1, low_open=True), "top_k": NON_NEGATIVE,
               "prompts_per_batch": AT_LEAST_1}
    num_samples: int = 5  # K
    max_new_tokens: int = 512
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: no top-k truncation
    prompts_per_batch: int = 64  # prompts per generate call
    # who samples a fixed policy (SPPO's generate stage, the evaluation's samples, best-of-n):
    # nash_jax's sampler, or vLLM on the policy's exported HF directory (rollout/engines.py)
    engine: Literal["nash_jax", "vllm"] = "nash_jax"
    vllm_python: str | None = None  # engine vllm: the Python whose environment has vllm (null: this one)

    def check_fields(self, key="sampling"):
        """vllm_python means something only with engine vllm."""
        if self.vllm_python is not None and self.engine != "vllm":
            raise ValueError(f"{key}.vllm_python={self.vllm_python!r}: nothing reads it with "
                             f"{key}.engine={self.engine}; expected {key}.engine=vllm, or "
                             f"{key}.vllm_python left unset")


@dataclass(frozen=True)
class JudgeConfig:
    """The judge (nash_jax.judges.make_judge builds it). kind: synthetic (the synthetic task's oracle),
    pairrm, file (preferences computed elsewhere), llm (a decoder asked `template` in both orders),
    reward_model (an HF sequence-classification model, Bradley-Terry), python (`function`)."""

    DOMAINS = {"batch_size": AT_LEAST_1, "prompts_per_call": AT_LEAST_1, "max_tokens": AT_LEAST_1}
    kind: Literal["pairrm", "synthetic", "file", "llm", "reward_model", "python"] = "synthetic"
    path: str | None = None  # PairRM, LLM judge or reward model directory, or preference file
    mode: Literal["pairwise", "blender"] = "pairwise"  # PairRM only
    # the most rows per device call: PairRM encoder rows, the LLM judge's ordered pairs (whole
    # prompts), the reward model's responses; rounded down to a multiple of the mesh's data shards,
    # but at least one row (the LLM judge: one prompt's K(K − 1)) per shard
    batch_size: int = 16
    prompts_per_call: int = 64
    dtype: Literal["float32", "bfloat16"] = "float32"  # llm, reward_model
    # llm: the question, with {prompt}, {a} and {b}; null: judges/llm.py's DEFAULT_TEMPLATE
    template: str | None = None
    labels: list[str] = field(default_factory=lambda: ["A", "B"])  # llm: the answers "a" and "b"
    max_tokens: int = 4096  # llm, reward_model: the longest text the judge may be given
    function: str | None = None  # python: "package.module:name"
    returns: Literal["preferences", "rewards"] = "preferences"  # python: what `function` returns

    # the fields each kind reads besides `kind` (make_judge's builders; prompts_per_call: the callers);
    # a field set away from its default for a kind that does not read it is refused
    READS = {"synthetic": {"prompts_per_call"},
             "file": {"path", "prompts_per_call"},
             "pairrm": {"path", "mode", "batch_size", "prompts_per_call"},
             "llm": {"path", "batch_size", "prompts_per_call", "dtype", "template", "labels",
                     "max_tokens"},
             "reward_model": {"path", "batch_size", "prompts_per_call", "dtype", "max_tokens"},
             "python": {"function", "returns", "prompts_per_call"}}

    def check_fields(self, key="judge"):
        """The checks across fields (`build` runs them; errors name `key`, e.g. eval.second_judge)."""
        if self.kind == "python" and not self.function:
            raise ValueError(f"{key}.kind=python needs {key}.function: \"package.module:name\"")
        unread = sorted(set(changed_fields(self)) - self.READS[self.kind] - {"kind"})
        if unread:
            name = unread[0]
            readers = " or ".join(kind for kind, names in self.READS.items() if name in names)
            raise ValueError(f"{key}.{name}={getattr(self, name)!r}: {key}.kind={self.kind} does not "
                             f"read it; expected {key}.kind={readers}, or {key}.{name} left unset")
        _check_labels(self.labels, f"{key}.labels")


def changed_fields(section):
    """The names of the fields of dataclass `section` that differ from their defaults."""
    for f in dataclasses.fields(section):
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        if getattr(section, f.name) != default:
            yield f.name


def _check_labels(labels, key):
    if (len(labels) != 2 or not all(isinstance(label, str) and label.strip() for label in labels)
            or labels[0] == labels[1]):
        raise ValueError(f"{key}={list(labels)!r}; expected two different non-empty labels (the "
                         "answers for the first and the second response)")


@dataclass(frozen=True)
class OptimizerConfig:
    """The optimiser (train.optim.make_optimizer builds it over a run's steps). The defaults are what
    the official SPPO scripts run: RMSprop (their CLI overrides the YAML's AdamW), lr 5e-7, a linear
    schedule with 10 % warm-up, HF Trainer's default clipping at 1.0 and no weight decay."""

    DOMAINS = {"learning_rate": POSITIVE, "warmup_ratio": Range(0, 1, high_open=True),
               "weight_decay": NON_NEGATIVE, "clip_norm": POSITIVE, "b1": Range(0, 1, high_open=True),
               "b2": Range(0, 1, high_open=True), "eps": POSITIVE,
               "rmsprop_decay": Range(0, 1, high_open=True)}
    name: str = "rmsprop"
    learning_rate: float = 5e-7
    schedule: str = "linear"  # warm-up, then linear or cosine decay to 0, or constant
    warmup_ratio: float = 0.1
    weight_decay: float = 0.0  # AdamW: decoupled; RMSprop/SGD: added to the gradient as torch does;
    #                            never applied to norm scales and biases (1-d parameters)
    clip_norm: float | None = 1.0  # global-norm clipping; null for none
    b1: float = 0.9  # AdamW
    b2: float = 0.999  # AdamW
    eps: float = 1e-8  # AdamW, RMSprop
    rmsprop_decay: float = 0.99  # RMSprop: torch's alpha

    def __post_init__(self):
        check_choice("train.optimizer.name", self.name, OPTIMIZERS)
        check_choice("train.optimizer.schedule", self.schedule, SCHEDULES)
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ValueError(f"train.optimizer.warmup_ratio={self.warmup_ratio!r}; expected [0, 1)")
        if self.learning_rate < 0:
            raise ValueError(f"train.optimizer.learning_rate={self.learning_rate!r}; expected ≥ 0")


@dataclass(frozen=True)
class TrainConfig:
    DOMAINS = {"batch_size": AT_LEAST_1, "micro_batches": AT_LEAST_1, "epochs": AT_LEAST_1,
               "checkpoint_every": AT_LEAST_1, "max_skipped_fraction": PROBABILITY,
               "logprob_chunk": NON_NEGATIVE}
    batch_size: int = 64  # examples per step (global)
    micro_batches: int = 1
    epochs: int = 1
    checkpoint_every: int = 50  # steps
    # a training stage stops with an error once more than this share of its steps were skipped as
    # non-finite (loss, gradient or parameters)
    max_skipped_fraction: float = 0.1
    # token positions whose fp32 logits a step holds at once (0: the whole [N, T, V] logits); the
    # same log-probs and gradients either way, far less memory for large vocabularies
    logprob_chunk: int = 1024
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)


@dataclass(frozen=True)
class MeshConfig:
    DOMAINS = {"data": AT_LEAST_1, "fsdp": Range(1, also=(-1,)), "tensor": AT_LEAST_1}
    data: int = 1
    fsdp: int = -1  # -1: all the devices left
    tensor: int = 1
    # memory of one device ("80GiB", "141GB"): a run whose parameters, optimiser state and gradients
    # cannot fit it stops before loading any weights (nash_jax/engine/plan.py); default: what the device
    # reports (GPUs and TPUs do; CPUs do not, and then nothing is checked)
    device_memory: str | None = None

    def __post_init__(self):
        if self.device_memory is not None:
            parse_bytes(self.device_memory, "mesh.device_memory")


@dataclass(frozen=True)
class EvalConfig:
    DOMAINS = {"prompts": AT_LEAST_1, "samples_per_prompt": AT_LEAST_1, "max_new_tokens": AT_LEAST_1}
    prompts: int = 64  # held-out prompts, never trained on
    samples_per_prompt: int = 4
    max_new_tokens: int | None = None  # default: sampling.max_new_tokens
    second_judge: JudgeConfig | None = None  # an independent judge for the cross-iteration table
    average_iterates: bool = False  # add the parameter average of π_1 … π_T (a row and a column)
    best_of_n: int | None = None  # add the last iterate reranked best-of-n by the training judge
    rerank_judge: JudgeConfig | None = None  # best-of-n's judge instead of the training judge
    saturation_threshold: float = 0.05  # warn when an iteration's mean |P̂ − ½| falls below this
    # "package.module:function" (prompts, responses) -> [{"correct": bool, ...}]: adds each iterate's
    # greedy accuracy on the held-out prompts (nash_jax/evaluation/heldout.py)
    verifier: str | None = None

    def __post_init__(self):
        if self.best_of_n is not None and self.best_of_n < 2:
            raise ValueError(f"eval.best_of_n={self.best_of_n}; expected an integer ≥ 2, or null for no "
                             "reranking")
        if not 0 <= self.saturation_threshold <= 0.5:
            raise ValueError(f"eval.saturation_threshold={self.saturation_threshold}; expected a value "
                             "in [0, 0.5] (a mean |P̂ − ½|)")


@dataclass(frozen=True)
class LoggingConfig:
    """Where a run's metrics go besides metrics.jsonl and TensorBoard: Weights & Biases when `wandb`
    names a project (nash_jax.runs.metrics; `pip install 'nash-jax[wandb]'`)."""

    wandb: str | None = None  # the W&B project; null: no W&B
    wandb_entity: str | None = None  # the W&B user or team; null: the logged-in user's default
    wandb_mode: Literal["online", "offline", "disabled"] = "online"  # offline: `wandb sync` later
    wandb_tags: list[str] = field(default_factory=list)

    def check_fields(self, key="logging"):
        """The W&B fields mean something only with a project: without one, a set field is refused."""
        if self.wandb is not None and not self.wandb.strip():
            raise ValueError(f"{key}.wandb={self.wandb!r}; expected a W&B project name, or null for no "
                             "W&B")
        unread = sorted(set(changed_fields(self)) - {"wandb"})
        if self.wandb is None and unread:
            name = unread[0]
            raise ValueError(f"{key}.{name}={getattr(self, name)!r}: nothing reads it without "
                             f"{key}.wandb; expected {key}.wandb=PROJECT, or {key}.{name} left unset")


# eval fields that change only the report, not what a run trains or samples for its iterates: `nash-jax
# report RUN_DIR eval.KEY=VALUE` may change them on a finished run
REPORT_ONLY_EVAL_FIELDS = ("second_judge", "average_iterates", "best_of_n", "saturation_threshold",
                           "verifier", "rerank_judge")


@dataclass(frozen=True)
class RunConfig:
    """The sections every recipe shares. The type that configs are built as (`run_config_type()`)
    adds one section per registered recipe that has one (`sppo`, `nash_md`, ...)."""

    DOMAINS = {"seed": Range(0, 2**31 - 1)}
    name: str = "run"
    recipe: str = ""  # a registered recipe's name (required)
    imports: list[str] = field(default_factory=list)  # modules to import first (recipes of your own)
    seed: int = 0
    run_dir: str | None = None  # default: runs/<name>-<timestamp>
    # XLA's persistent compilation cache (relative to the working directory, so runs share it);
    # None: every process compiles afresh
    compilation_cache_dir: str | None = None
    model: ModelConfig = field(default_factory=ModelConfig)
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    data: DataConfig = field(default_factory=DataConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    mesh: MeshConfig = field(default_factory=MeshConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
