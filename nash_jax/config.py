"""Run configurations: typed dataclasses read from YAML, with `key=value` overrides from the command line.

Every section is a frozen dataclass; `load_config(path, overrides)` builds the whole tree, checking each
key against the dataclass fields and each value against the field's type (a `Literal` lists the allowed
values). Errors name the file, the dotted key, what was given and what was expected.
"""

import dataclasses
import functools
import importlib
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from nash_jax.yaml_files import safe_load_unique

from nash_jax.train.optim import OPTIMIZERS, SCHEDULES

BUILTIN_SYNTHETIC = "builtin:synthetic"  # model/data path of the shipped synthetic task


@dataclass(frozen=True)
class Range:
    """A numeric field's domain: low ≤ value ≤ high (an end open where said), or one of `also`.

    A section lists its fields' domains in a `DOMAINS` class attribute; `build` checks them, and every
    float is checked to be finite whatever its domain."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    also: tuple = ()

    def contains(self, value):
        if value in self.also:
            return True
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return not (self.high is not None and (value >= self.high if self.high_open else value > self.high))

    def __str__(self):
        if self.low is not None and self.high is not None:
            text = (f"a value in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}"
                    f"{')' if self.high_open else ']'}")
        elif self.low is not None:
            text = f"a value {'>' if self.low_open else '≥'} {self.low:g}"
        else:
            text = f"a value {'<' if self.high_open else '≤'} {self.high:g}"
        return text + "".join(f" or {v}" for v in self.also)


AT_LEAST_1 = Range(1)
POSITIVE = Range(0, low_open=True)
NON_NEGATIVE = Range(0)
PROBABILITY = Range(0, 1)


@dataclass(frozen=True)
class ModelConfig:
    path: str = BUILTIN_SYNTHETIC  # a local HF directory, or the synthetic task's warm-started model
    tokenizer: str | None = None  # defaults to the model directory
    dtype: Literal["float32", "bfloat16"] = "float32"  # compute dtype
    param_dtype: Literal["float32", "bfloat16"] | None = None  # storage dtype (default: dtype)
    # per-layer rematerialisation (models/remat.py REMAT_POLICIES); true = "full"
    remat: bool | Literal["none", "full", "dots", "dots_with_no_batch_dims"] = False
    attention: Literal["auto", "reference", "xla", "cudnn", "splash"] = "auto"  # models/attention.py


@dataclass(frozen=True)
class WarmStartConfig:
    """The supervised fit that makes the synthetic task's initial policy π_0 (ignored for HF models)."""

    DOMAINS = {"steps": AT_LEAST_1, "batch_size": AT_LEAST_1, "learning_rate": POSITIVE,
               "hidden_size": Range(4), "num_layers": AT_LEAST_1}
    steps: int = 150
    batch_size: int = 32
    learning_rate: float = 3e-3
    hidden_size: int = 64  # four heads of hidden_size / 4
    num_layers: int = 2

    def __post_init__(self):
        if self.hidden_size % 4:
            raise ValueError(f"warm_start.hidden_size={self.hidden_size}; expected a multiple of 4 "
                             "(four attention heads)")


@dataclass(frozen=True)
class DataConfig:
    DOMAINS = {"prompts_per_iteration": AT_LEAST_1, "max_prompt_tokens": AT_LEAST_1,
               "builtin_prompts": AT_LEAST_1}
    path: str = BUILTIN_SYNTHETIC  # jsonl / json / parquet / arrow file, a directory of them, a
    #                                datasets.save_to_disk directory, or a built-in prompt set
    #                                (builtin:synthetic, builtin:arithmetic; nash_jax.tasks)
    prompt_column: str = "prompt"
    split: str = "train"  # which split of a save_to_disk DatasetDict
    prompts_per_iteration: int | None = None  # default: the prompts left after evaluation, split evenly
    shuffle: bool = True  # shuffle (by seed) before splitting
    system_prompt: str | None = None
    max_prompt_tokens: int = 512  # after the chat template
    too_long: Literal["skip", "truncate_left", "error"] = "skip"
    builtin_prompts: int = 1024  # how many prompts a built-in prompt set draws


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
        unread = sorted(set(_changed_fields(self)) - self.READS[self.kind] - {"kind"})
        if unread:
            name = unread[0]
            readers = " or ".join(kind for kind, names in self.READS.items() if name in names)
            raise ValueError(f"{key}.{name}={getattr(self, name)!r}: {key}.kind={self.kind} does not "
                             f"read it; expected {key}.kind={readers}, or {key}.{name} left unset")
        _check_labels(self.labels, f"{key}.labels")


def _changed_fields(section):
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
class OptimConfig:
    DOMAINS = {"learning_rate": POSITIVE, "warmup_ratio": Range(0, 1, high_open=True),
               "weight_decay": NON_NEGATIVE, "clip_norm": POSITIVE}
    name: str = "rmsprop"
    learning_rate: float = 5e-7
    schedule: str = "linear"
    warmup_ratio: float = 0.1
    weight_decay: float = 0.0
    clip_norm: float | None = 1.0  # global-norm clipping; null for none

    def __post_init__(self):
        _check_choice("train.optimizer.name", self.name, OPTIMIZERS)
        _check_choice("train.optimizer.schedule", self.schedule, SCHEDULES)


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
    optimizer: OptimConfig = field(default_factory=OptimConfig)


_BYTE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text, key="device memory"):
    """'80GiB', '141GB', '1.5 TiB', '1024' → bytes (GB = 10⁹, GiB = 2³⁰)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    unit = match and match.group(2).lower()
    if not match or unit not in _BYTE_UNITS or float(match.group(1)) <= 0:
        raise ValueError(f"{key}={text!r}; expected a positive size such as 80GiB or 141GB")
    return int(float(match.group(1)) * _BYTE_UNITS[unit])


@dataclass(frozen=True)
class MeshConfig:
    DOMAINS = {"data": AT_LEAST_1, "fsdp": Range(1, also=(-1,)), "tensor": AT_LEAST_1}
    data: int = 1
    fsdp: int = -1  # -1: all the devices left
    tensor: int = 1
    # memory of one device ("80GiB", "141GB"): a run whose parameters, optimiser state and gradients
    # cannot fit it stops before loading any weights (nash_jax/plan.py); default: what the device
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
    # greedy accuracy on the held-out prompts (nash_jax/heldout.py)
    verifier: str | None = None

    def __post_init__(self):
        if self.best_of_n is not None and self.best_of_n < 2:
            raise ValueError(f"eval.best_of_n={self.best_of_n}; expected an integer ≥ 2, or null for no "
                             "reranking")
        if not 0 <= self.saturation_threshold <= 0.5:
            raise ValueError(f"eval.saturation_threshold={self.saturation_threshold}; expected a value "
                             "in [0, 0.5] (a mean |P̂ − ½|)")


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


# ---------------------------------------------------------------------------------------------------
# recipes: their names and config sections, registered by the recipe modules themselves

ENTRY_POINT_GROUP = "nash_jax.recipes"  # installed packages list their recipe modules here
_RECIPES = {}  # recipe name -> (section name, section dataclass) or None
_discovered = False


def register_recipe(name, section=None, section_type=None):
    """Make `name` a valid `recipe:` value, with its own config section `section` (a dataclass)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"recipe name {name!r}; expected an identifier")
    reserved = {f.name for f in dataclasses.fields(RunConfig)}
    if section in reserved:
        raise ValueError(f"recipe {name!r}: config section {section!r} is taken by a shared section")
    for other, entry in _RECIPES.items():
        if other != name and entry and section and entry[0] == section and entry[1] is not section_type:
            raise ValueError(f"recipe {name!r}: config section {section!r} is recipe {other!r}'s")
    _RECIPES[name] = (section, section_type) if section else None
    run_config_type.cache_clear()


def discover_recipes(imports=()):
    """Import the recipe modules of installed packages (entry points) and the modules `imports` names,
    so that their recipes register themselves."""
    global _discovered
    if not _discovered:
        from importlib.metadata import entry_points

        for entry in entry_points(group=ENTRY_POINT_GROUP):
            try:
                entry.load()
            except Exception as err:  # noqa: BLE001  (a broken plugin: say which)
                raise ValueError(f"the recipe entry point {entry.name!r} ({entry.value}) fails to "
                                 f"import: {type(err).__name__}: {err}") from None
        _discovered = True
    for module in imports:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise ValueError(f"imports: cannot import {module!r} ({err}); expected a module on the "
                             "Python path that registers a recipe") from None


def recipe_names():
    discover_recipes()
    return sorted(_RECIPES)


@functools.cache
def run_config_type():
    """RunConfig plus the section of every registered recipe, as one frozen dataclass."""
    sections = sorted({entry for entry in _RECIPES.values() if entry}, key=lambda e: e[0])
    return dataclasses.make_dataclass(
        "RunConfig", [(name, cls, field(default_factory=cls)) for name, cls in sections],
        bases=(RunConfig,), frozen=True)


def _check_choice(key, value, allowed):
    if value not in allowed:
        raise ValueError(f"{key}={value!r}; expected one of {list(allowed)}")


def _convert(value, hint, key):
    """`value` as type `hint`, or ValueError saying what `key` expected."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(value, option, key)
            except ValueError as err:
                errors.append(str(err))
        raise ValueError(errors[0] if len(errors) == 1 else f"{key}={value!r}; expected one of: "
                         + "; ".join(e.split("; ", 1)[-1] for e in errors) + " or null")
    if origin is list:
        if not isinstance(value, list):
            raise ValueError(f"{key}={value!r}; expected a list")
        (item,) = typing.get_args(hint)
        return [_convert(v, item, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is Literal:
        _check_choice(key, value, typing.get_args(hint))
        return value
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise ValueError(f"{key}: expected a mapping of {hint.__name__} fields; got {value!r}")
        return build(hint, value, key)
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ValueError(f"{key}={value!r}; expected true or false")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        raise ValueError(f"{key}={value!r}; expected an integer")
    if hint is float:
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):  # YAML reads 1e-3 (no dot) as a string
            try:
                number = float(value)
            except ValueError:
                pass
        if number is None or not math.isfinite(number):
            raise ValueError(f"{key}={value!r}; expected a finite number")
        return number
    if hint is str:
        if isinstance(value, str):
            return value
        raise ValueError(f"{key}={value!r}; expected a string")
    raise TypeError(f"unsupported config type {hint} for {key}")


def build(cls, values, prefix=""):
    """An instance of dataclass `cls` from a dict, every key and value checked."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for name in values:
        if name not in names:
            where = f"{prefix}.{name}" if prefix else name
            raise ValueError(f"unknown key {where!r}; expected one of {sorted(names)}")
    kwargs = {}
    for name, value in values.items():
        key = f"{prefix}.{name}" if prefix else name
        value = _convert(value, hints[name], key)
        _check_domain(cls, key, name, value)
        kwargs[name] = value
    section = cls(**kwargs)
    if hasattr(section, "check_fields"):  # checks across fields, naming the section's key
        section.check_fields(prefix)
    return section


def _check_domain(cls, key, name, value):
    domain = getattr(cls, "DOMAINS", {}).get(name)
    if domain is None or value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if not domain.contains(value):
        raise ValueError(f"{key}={value!r}; expected {domain}")


def parse_override(text):
    """'a.b=value' -> (['a', 'b'], value parsed as YAML: numbers, true/false, null, lists)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"override {text!r}; expected KEY=VALUE (dotted keys for nested fields)")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.strip().split("."), value


def apply_overrides(values, overrides):
    """A copy of the nested dict `values` with each 'a.b=value' override set."""
    values = _copy(values)
    for text in overrides:
        keys, value = parse_override(text)
        node = values
        for depth, part in enumerate(keys[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                raise ValueError(f"override {text!r}: {'.'.join(keys[:depth + 1])} is not a section")
            node = child
        node[keys[-1]] = value
    return values


def _copy(values):
    return {k: _copy(v) if isinstance(v, dict) else v for k, v in values.items()}


def read_yaml(path):
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    try:
        values = safe_load_unique(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(values, dict):
        raise ValueError(f"{path}: expected a mapping of config sections at the top level")
    return values



def load_config(path, overrides=()):
    """RunConfig from a YAML file plus 'key=value' overrides; errors name the file and the key."""
    values = apply_overrides(read_yaml(path), overrides)
    values.setdefault("name", Path(path).stem)
    try:
        return build_run_config(values)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


def build_run_config(values):
    """The run config of a dict (a YAML file's): its `imports` imported, its recipe checked."""
    imports = values.get("imports") or []
    if not isinstance(imports, list) or not all(isinstance(m, str) for m in imports):
        raise ValueError(f"imports={imports!r}; expected a list of module names")
    discover_recipes(imports)
    recipe = values.get("recipe")
    if recipe is None:
        raise ValueError(f"recipe: missing; expected one of {recipe_names()}")
    _check_choice("recipe", recipe, recipe_names())
    return build(run_config_type(), values)


def normalised(values):
    """A config dict as this version reads it, for comparison: sections added since filled with their
    defaults, and the sections of recipes other than its own left out (their defaults may change
    without changing this run). None if it no longer reads."""
    try:
        values = to_dict(build_run_config(values))
    except (ValueError, TypeError):
        return None
    own = _RECIPES.get(values["recipe"])
    others = {entry[0] for entry in _RECIPES.values() if entry} - {own[0] if own else None}
    return {k: v for k, v in values.items() if k not in others and k not in RESULT_NEUTRAL}


RESULT_NEUTRAL = {"compilation_cache_dir"}  # settings that cannot change a run: a resume may change them


def to_dict(config):
    return dataclasses.asdict(config)


def to_yaml(config):
    return yaml.safe_dump(to_dict(config), sort_keys=False)
