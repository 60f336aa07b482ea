"""Recipes' names and config sections, registered by the recipe modules themselves."""

import dataclasses
import functools
import importlib
import warnings
from dataclasses import field

from nash_jax.config.sections import RunConfig, changed_fields

ENTRY_POINT_GROUP = "nash_jax.recipes"  # installed packages list their recipe modules here
_RECIPES = {}  # recipe name -> (section name, section dataclass) or None
_READS = {}  # recipe name -> {shared section: the fields of it the recipe reads}; absent: all of them
_RENAMED = {}  # a recipe's former name -> (its name, the former name of its section)
_REFUSALS = {}  # recipe name -> {"section.field": why the recipe cannot use the field}
_discovered = False


def register_recipe(name, section=None, section_type=None, reads=None, formerly=None, refusals=None):
    """Make `name` a valid `recipe:` value, with its own config section `section` (a dataclass).
    reads: {shared section: the names of its fields the recipe reads}, for the sections it reads only
    in part; a field it does not read is refused when a config sets it (check_reads), with the reason
    `refusals` gives for it ({"section.field": why}) where there is one. formerly: the
    recipe's name (and its section's) before a rename, which a config may still give (renamed)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"recipe name {name!r}; expected an identifier")
    reserved = {f.name for f in dataclasses.fields(RunConfig)}
    if section in reserved:
        raise ValueError(f"recipe {name!r}: config section {section!r} is taken by a shared section")
    for other, entry in _RECIPES.items():
        if other != name and entry and section and entry[0] == section and entry[1] is not section_type:
            raise ValueError(f"recipe {name!r}: config section {section!r} is recipe {other!r}'s")
    _RECIPES[name] = (section, section_type) if section else None
    _READS[name] = {k: frozenset(v) for k, v in (reads or {}).items()}
    _REFUSALS[name] = dict(refusals or {})
    if formerly:
        _RENAMED[formerly] = (name, formerly)
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
def run_config_type(recipe=None):
    """RunConfig plus the section of `recipe` (a config of that recipe holds no other recipe's
    section), as one frozen dataclass; without a recipe, plus every registered recipe's section."""
    if recipe is None:
        sections = sorted({entry for entry in _RECIPES.values() if entry}, key=lambda e: e[0])
    else:
        sections = [_RECIPES[recipe]] if _RECIPES.get(recipe) else []
    return dataclasses.make_dataclass(
        "RunConfig", [(name, cls, field(default_factory=cls)) for name, cls in sections],
        bases=(RunConfig,), frozen=True)


def check_sections(recipe, values):
    """ValueError naming a section of `values` that belongs to another recipe than `recipe`."""
    own, others = section_names(recipe)
    for key in values:
        if key in others:
            owner = section_owner(key)
            raise ValueError(f"section {key!r} is recipe {owner}'s; this config runs recipe {recipe}"
                             + (f", whose section is {own!r}" if own else "") + ": remove it, or set "
                             f"recipe: {owner}")


def section_names(recipe):
    """(the config section of `recipe` or None, the sections of every other registered recipe)."""
    own = _RECIPES.get(recipe)
    own = own[0] if own else None
    return own, {entry[0] for entry in _RECIPES.values() if entry} - {own}


def check_reads(recipe, built):
    """ValueError naming a shared field that the built run config `built` of `recipe` sets away from
    its default but the recipe does not read (its registered `reads`): a setting nothing reads is an
    error, not a silent no-op."""
    for section, read in _READS.get(recipe, {}).items():
        values = getattr(built, section)
        for name in changed_fields(values):
            why = _REFUSALS.get(recipe, {}).get(f"{section}.{name}")
            if name not in read and why:
                raise ValueError(f"{section}.{name}={getattr(values, name)!r}: recipe {recipe} cannot "
                                 f"use it: {why}; leave it unset")
            if name not in read:
                reads = ", ".join(sorted(read)) or "none of them"
                raise ValueError(f"{section}.{name}={getattr(values, name)!r}: recipe {recipe} does "
                                 f"not read it (of {section}.* it reads {reads}); leave it unset")


def section_owner(section):
    """The recipe whose config section is `section`, or None for a shared section."""
    return next((name for name, entry in _RECIPES.items() if entry and entry[0] == section), None)


class RenamedRecipe(UserWarning):
    """A config names a recipe (or its section) by the name it had before a rename."""


def renamed(values):
    """`values` (a config dict) with a recipe's former name and its section's replaced by today's, and
    a one-line note saying so; the same dict if it uses today's names."""
    if not isinstance(values.get("recipe"), str) or values["recipe"] not in _RENAMED:
        return values
    old = values["recipe"]
    name, old_section = _RENAMED[old]
    own = _RECIPES.get(name)
    warnings.warn(f"recipe: {old} is now recipe: {name} (and its section {own[0] if own else name}:); "
                  "the old names still work", RenamedRecipe, stacklevel=3)
    values = {**values, "recipe": name}
    if old_section in values and own:
        values[own[0]] = values.pop(old_section)
    return values
