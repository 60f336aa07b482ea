"""The package's import direction is its layering (../shared/DESIGN.md): a module imports only from its
own layer or the layers below it. Every import counts, also those inside functions."""

import ast
from pathlib import Path

import nash_jax

PACKAGE = Path(nash_jax.__file__).parent

# lowest first; a module belongs to the layer of the longest prefix that names it
LAYERS = [
    ["nash_jax.core"],                       # pure math: imports nothing of the package
    ["nash_jax.parallel"],                   # mesh, sharding rules, buckets
    ["nash_jax.runs"],                       # run directories, atomic files, checkpoints
    ["nash_jax.sandbox"],                    # running policy-written code: the security boundary
    ["nash_jax.train"],                      # optimisers, state, objectives, the one step
    ["nash_jax.config"],                     # the run config's schema and loader
    ["nash_jax.models"],                     # decoders, encoders, HF in/out, GGUF
    ["nash_jax.data", "nash_jax.judges.base",  # prompt datasets; the judge contracts and the errors
     "nash_jax.judges.user_code"],             # of a user's judge
    ["nash_jax.rollout"],                    # the sampler, sample columns, batches
    ["nash_jax.selfplay"],                   # generic self-play: episodes, groups, diversity, the two-role round
    ["nash_jax.judges", "nash_jax.tasks"],   # judges; the task families and their registry
    ["nash_jax.evaluation"],
    ["nash_jax.reporting"],
    ["nash_jax.engine"],                     # what every recipe runs on: registry, loop, learner, plan
    ["nash_jax.recipes"],                    # the only layer that sequences stages
    ["nash_jax.cli", "nash_jax"],            # the command (and the package's own __init__)
]


def layer_of(module):
    best = None
    for rank, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and \
                    (best is None or len(prefix) > len(best[1])):
                best = (rank, prefix)
    return best[0]


def modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, path


def imported(name, path):
    """(line, module) of every nash_jax module `path` imports, relative imports resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "nash_jax")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            if base.split(".")[0] == "nash_jax":
                for alias in node.names:  # `from nash_jax import parallel` imports nash_jax.parallel
                    yield node.lineno, f"{base}.{alias.name}" if base == "nash_jax" else base


def test_every_import_points_down_the_layers():
    known = {name for name, _ in modules()}
    upward = []
    for name, path in modules():
        for line, target in imported(name, path):
            while target not in known and "." in target:
                target = target.rpartition(".")[0]
            if layer_of(target) > layer_of(name):
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line} {name} imports {target}")
    assert not upward, "imports against the layering:\n" + "\n".join(upward)


def test_core_imports_nothing_of_the_package():
    for name, path in modules():
        if name.startswith("nash_jax.core"):
            outside = [t for _, t in imported(name, path) if not t.startswith("nash_jax.core")]
            assert not outside, f"{name} imports {outside}"


def test_every_module_has_a_layer_and_the_top_level_holds_packages_only():
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules at the top of the package (put each in its layer's package): {loose}"
    for name, _ in modules():
        assert layer_of(name) is not None, name


def test_selfplay_names_no_task_family():
    """selfplay/ is generic: it imports nothing of tasks/, not even through a string ("module:Class",
    importlib); the task families register with it instead."""
    found = []
    for name, path in modules():
        if name.startswith("nash_jax.selfplay"):
            found += [f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}"
                      for line, target in imported(name, path) if target.startswith("nash_jax.tasks")]
            found += [f"{path.relative_to(PACKAGE.parent)}:{node.lineno} names {node.value!r}"
                      for node in ast.walk(ast.parse(path.read_text()))
                      if isinstance(node, ast.Constant) and isinstance(node.value, str)
                      and ("nash_jax.tasks" in node.value or "nash_jax/tasks" in node.value)]
    assert not found, "selfplay/ reaches into tasks/:\n" + "\n".join(found)


def _names_recipe(node):
    return (isinstance(node, ast.Attribute) and node.attr == "recipe") or \
        (isinstance(node, ast.Name) and node.id == "recipe")


def _names_a_string(node):
    return isinstance(node, ast.Constant) and isinstance(node.value, str) or \
        isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(map(_names_a_string, node.elts))


def nodes_below(layer):
    """(path, node) of every syntax node of every module below `layer`'s."""
    for name, path in modules():
        if layer_of(name) < layer_of(layer):
            yield from ((path, node) for node in ast.walk(ast.parse(path.read_text())))


def test_nothing_below_the_recipes_branches_on_a_recipe():
    """Below recipes/, no code compares a config's `recipe` with anything: a new recipe is a package
    that registers itself, not a branch in a shared module."""
    branches = []
    for path, node in nodes_below("nash_jax.recipes"):
        operands = [node.left, *node.comparators] if isinstance(node, ast.Compare) else []
        if any(map(_names_recipe, operands)) and any(map(_names_a_string, operands)):
            branches.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not branches, "branches on the recipe's name: " + ", ".join(branches)


def _run_config_sections():
    """The run config's sections (model, train, mesh, ...), every registered recipe's, and `recipe`."""
    import dataclasses

    from nash_jax import config as config_lib

    config_lib.discover_recipes()
    return {f.name for f in dataclasses.fields(config_lib.run_config_type())
            if dataclasses.is_dataclass(f.type) or f.name == "recipe" or
            f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory)}


def _names_a_config(node):
    """`config`, `cfg`, `run_config`, `self.config`: what a run config travels as."""
    if isinstance(node, ast.Attribute):
        return node.attr == "config"
    return isinstance(node, ast.Name) and (node.id in ("config", "cfg") or node.id.endswith("_config"))


def test_nothing_below_the_engine_reads_the_run_config():
    """Below engine/, no code reads a section of the whole run config (`config.train.…`,
    `config.model`, `config.recipe`): a lower layer takes the section or the values it needs (a model
    section, an optimiser config, shapes, mesh sizes, paths); the engine and the recipes unpack the
    run config."""
    sections = _run_config_sections()
    assert {"model", "train", "mesh", "data", "eval", "recipe", "sppo"} <= sections, sections
    reads = [f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {ast.unparse(node)}"
             for path, node in nodes_below("nash_jax.engine")
             if isinstance(node, ast.Attribute) and node.attr in sections and _names_a_config(node.value)]
    assert not reads, "run-config sections read below the recipes:\n" + "\n".join(reads)
