"""Run configurations: typed dataclasses read from YAML, with `key=value` overrides from the command line.

Every section is a frozen dataclass; `load_config(path, overrides)` builds the whole tree, checking each
key against the dataclass fields and each value against the field's type (a `Literal` lists the allowed
values). Errors name the file, the dotted key, what was given and what was expected.
"""

import dataclasses
import functools
import importlib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from nash_jax.train.optim import OPTIMIZERS, SCHEDULES

BUILTIN_SYNTHETIC = "builtin:synthetic"  # model/data path of the shipped synthetic task


@dataclass(frozen=True)
class ModelConfig:
    path: str = BUILTIN_SYNTHETIC  # a local HF directory, or the synthetic task's warm-started model
    tokenizer: str | None = None  # defaults to the model directory
    dtype: Literal["float32", "bfloat16"] = "float32"  # compute dtype
    param_dtype: Literal["float32", "bfloat16"] | None = None  # storage dtype (default: dtype)
    remat: bool = False


@dataclass(frozen=True)
class WarmStartConfig:
    """The supervised fit that makes the synthetic task's initial policy π_0 (ignored for HF models)."""

    steps: int = 150
    batch_size: int = 32
    learning_rate: float = 3e-3
    hidden_size: int = 64
    num_layers: int = 2


@dataclass(frozen=True)
class DataConfig:
    path: str = BUILTIN_SYNTHETIC  # jsonl / json / parquet / arrow file, a directory of them, or a
    #                                datasets.save_to_disk directory
    prompt_column: str = "prompt"
    split: str = "train"  # which split of a save_to_disk DatasetDict
    prompts_per_iteration: int | None = None  # default: the prompts left after evaluation, split evenly
    shuffle: bool = True  # shuffle (by seed) before splitting
    system_prompt: str | None = None
    max_prompt_tokens: int = 512  # after the chat template
    too_long: Literal["skip", "truncate_left", "error"] = "skip"
    synthetic_prompts: int = 1024  # size of the synthetic task's prompt set


@dataclass(frozen=True)
class SamplingConfig:
    num_samples: int = 5  # K
    max_new_tokens: int = 512
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    prompts_per_batch: int = 64  # prompts per generate call


@dataclass(frozen=True)
class JudgeConfig:
    kind: Literal["pairrm", "synthetic", "file"] = "synthetic"
    path: str | None = None  # PairRM directory or preference file
    mode: Literal["pairwise", "blender"] = "pairwise"  # PairRM only
    batch_size: int = 16  # encoder rows per call (PairRM)
    prompts_per_call: int = 64


@dataclass(frozen=True)
class OptimConfig:
    name: str = "rmsprop"
    learning_rate: float = 5e-7
    schedule: str = "linear"
    warmup_ratio: float = 0.1
    weight_decay: float = 0.0
    clip_norm: float | None = 1.0

    def __post_init__(self):
        _check_choice("train.optimizer.name", self.name, OPTIMIZERS)
        _check_choice("train.optimizer.schedule", self.schedule, SCHEDULES)


@dataclass(frozen=True)
class TrainConfig:
    batch_size: int = 64  # examples per step (global)
    micro_batches: int = 1
    epochs: int = 1
    checkpoint_every: int = 50  # steps
    optimizer: OptimConfig = field(default_factory=OptimConfig)


@dataclass(frozen=True)
class MeshConfig:
    data: int = 1
    fsdp: int = -1  # -1: all the devices left
    tensor: int = 1


@dataclass(frozen=True)
class EvalConfig:
    prompts: int = 64  # held-out prompts, never trained on
    samples_per_prompt: int = 4
    max_new_tokens: int | None = None  # default: sampling.max_new_tokens
    second_judge: JudgeConfig | None = None  # an independent judge for the cross-iteration table
    average_iterates: bool = False  # add the parameter average of π_1 … π_T (a row and a column)
    best_of_n: int | None = None  # add the last iterate reranked best-of-n by the training judge
    saturation_threshold: float = 0.05  # warn when an iteration's mean |P̂ − ½| falls below this

    def __post_init__(self):
        if self.best_of_n is not None and self.best_of_n < 2:
            raise ValueError(f"eval.best_of_n={self.best_of_n}; expected an integer ≥ 2, or null for no "
                             "reranking")
        if not 0 <= self.saturation_threshold <= 0.5:
            raise ValueError(f"eval.saturation_threshold={self.saturation_threshold}; expected a value "
                             "in [0, 0.5] (a mean |P̂ − ½|)")


# eval fields that change only the report, not what a run trains or samples for its iterates: `nash-jax
# report RUN_DIR eval.KEY=VALUE` may change them on a finished run
REPORT_ONLY_EVAL_FIELDS = ("second_judge", "average_iterates", "best_of_n", "saturation_threshold")


@dataclass(frozen=True)
class RunConfig:
    """The sections every recipe shares. The type that configs are built as (`run_config_type()`)
    adds one section per registered recipe that has one (`sppo`, `nash_md`, ...)."""

    name: str = "run"
    recipe: str = ""  # a registered recipe's name (required)
    imports: list[str] = field(default_factory=list)  # modules to import first (recipes of your own)
    seed: int = 0
    run_dir: str | None = None  # default: runs/<name>-<timestamp>
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
            entry.load()
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


# Fields that must be positive (≥ 1 for integers, > 0 for floats), by dotted key suffix.
POSITIVE = {"steps", "batch_size", "hidden_size", "num_layers", "synthetic_prompts", "num_samples",
            "max_new_tokens", "prompts_per_batch", "prompts_per_call", "micro_batches", "epochs",
            "checkpoint_every", "iterations", "prompts_per_step", "eval_every", "snapshots", "samples_per_prompt",
            "max_prompt_tokens", "prompts_per_iteration", "refresh_every", "eta"}
UNIT_INTERVAL = {"top_p", "mixture_beta", "warmup_ratio"}


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
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML reads 1e-3 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise ValueError(f"{key}={value!r}; expected a number")
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
        _check_range(key, name, value)
        kwargs[name] = value
    return cls(**kwargs)


def _check_range(key, name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if name in POSITIVE and not value > 0:
        raise ValueError(f"{key}={value!r}; expected a positive number")
    if name in UNIT_INTERVAL and not 0.0 <= value <= 1.0:
        raise ValueError(f"{key}={value!r}; expected a value in [0, 1]")
    if name in ("temperature", "learning_rate", "weight_decay", "tau", "beta") and value < 0:
        raise ValueError(f"{key}={value!r}; expected a value ≥ 0")


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
        values = yaml.safe_load(path.read_text()) or {}
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
    """A saved config dict as this version reads it (sections added since filled with defaults), or
    None if it no longer reads."""
    try:
        return to_dict(build_run_config(values))
    except (ValueError, TypeError):
        return None


def to_dict(config):
    return dataclasses.asdict(config)


def to_yaml(config):
    return yaml.safe_dump(to_dict(config), sort_keys=False)
