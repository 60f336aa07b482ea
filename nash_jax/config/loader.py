"""Run configs read from YAML and `key=value` overrides, every key and value checked against the
section dataclasses (nash_jax.config.sections) and their domains."""

import dataclasses
import math
import types
import typing
import warnings
from pathlib import Path
from typing import Literal

import yaml

from nash_jax.config.domains import check_choice
from nash_jax.config.recipes import (check_reads, check_sections, renamed, discover_recipes, recipe_names, run_config_type,
                                     section_names)
from nash_jax.config.sections import BUILTIN_SYNTHETIC, builtin_path_parts
from nash_jax.config.yaml_files import safe_load_unique


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
        check_choice(key, value, typing.get_args(hint))
        return value
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise ValueError(f"{key}: expected a mapping of {hint.__name__} fields; got {value!r}")
        return build(hint, value, key)
    return _scalar(value, hint, key)


def _scalar(value, hint, key):
    """`value` as the scalar type `hint` (bool, int, float, str), or ValueError naming `key`."""
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
    renamed = getattr(cls, "RENAMED", {})
    for name in values:
        where = f"{prefix}.{name}" if prefix else name
        if name in renamed:
            raise ValueError(f"{where} is now {renamed[name]}: set that instead")
        if name not in names:
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


def build_run_config(values, saved=False):
    """The run config of a dict (a YAML file's: one a user wrote, or a run directory's `saved` one):
    its `imports` imported, its recipe checked."""
    imports = values.get("imports") or []
    if not isinstance(imports, list) or not all(isinstance(m, str) for m in imports):
        raise ValueError(f"imports={imports!r}; expected a list of module names")
    discover_recipes(imports)
    values = builtin_count_in_path(renamed(values), saved)
    recipe = values.get("recipe")
    if recipe is None:
        raise ValueError(f"recipe: missing; expected one of {recipe_names()}")
    check_choice("recipe", recipe, recipe_names())
    check_sections(recipe, values)
    config = build(run_config_type(recipe), values)
    check_reads(recipe, config)
    return config


class MovedField(UserWarning):
    """A config sets a field by the name or in the place it had before a change."""


_OLD_BUILTIN_PROMPTS = 1024  # data.builtin_prompts' default while it was a field of its own


def builtin_count_in_path(values, saved=False):
    """`values` with a data.builtin_prompts of before (the count of a built-in prompt set, now part of
    data.path: builtin:arithmetic:352) moved into a bare built-in data.path. A config one writes gets a
    warning for that, and a ValueError where data.path already gives a count or is a prompt set of
    one's own (nothing would read it). A run directory's saved config (`saved`) held every field
    whatever the path, so there the count is dropped, without a word, wherever it was never read."""
    data = values.get("data")
    if not isinstance(data, dict) or "builtin_prompts" not in data:
        return values
    data = dict(data)
    count, path = data.pop("builtin_prompts"), str(data.get("path", BUILTIN_SYNTHETIC))
    name, given = builtin_path_parts(path) or (None, None)
    if name and given is None:
        data["path"] = name if count == _OLD_BUILTIN_PROMPTS else f"{name}:{count}"
        if not saved:
            warnings.warn(f"data.builtin_prompts={count} is now part of data.path: "
                          f"data.path={data['path']}", MovedField, stacklevel=4)
    elif not saved and name:
        raise ValueError(f"data.builtin_prompts={count}: the count of a built-in prompt set is part of "
                         f"data.path now (data.path={path}); set data.path={name}:{count} instead")
    elif not saved:
        raise ValueError(f"data.builtin_prompts={count}: nothing reads it with data.path={path} (a "
                         "prompt set of your own); leave it unset")
    return {**values, "data": data}


def normalised(values):
    """A config dict as this version reads it, for comparison: sections added since filled with their
    defaults, and the sections of recipes other than its own left out (a config saved by an earlier
    version holds every recipe's). None if it no longer reads."""
    try:
        discover_recipes(values.get("imports") or [])
        values = renamed(values)
        _, others = section_names(values.get("recipe"))
        values = to_dict(build_run_config({k: v for k, v in values.items() if k not in others}, saved=True))
    except (ValueError, TypeError):
        return None
    return {k: v for k, v in values.items() if k not in RESULT_NEUTRAL}


# settings that cannot change a run: a resume may change them (and may add W&B to a run started without)
RESULT_NEUTRAL = {"compilation_cache_dir", "logging"}


def to_dict(config):
    return dataclasses.asdict(config)


def to_yaml(config):
    return yaml.safe_dump(to_dict(config), sort_keys=False)
