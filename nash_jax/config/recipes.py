"""Recipes' names and config sections, registered by the recipe modules themselves."""

import dataclasses
import functools
import importlib
from dataclasses import field

from nash_jax.config.sections import RunConfig

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


def section_names(recipe):
    """(the config section of `recipe` or None, the sections of every other registered recipe)."""
    own = _RECIPES.get(recipe)
    own = own[0] if own else None
    return own, {entry[0] for entry in _RECIPES.values() if entry} - {own}
