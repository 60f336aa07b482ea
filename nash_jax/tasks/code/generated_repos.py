"""A procedural family of tiny Python repositories for SSR: a seeded generator, shipped as code.

Sixteen hand-written training repositories are too few for a tiny model to learn a repair it can
carry to unseen code; a distribution of repositories is not. Each generated repository is one module of
`functions` one-line integer functions, by default named for what they compute (`add_3`, `above_7`,
`mod_4`, ...), and its pytest file, one test per function, whose asserts catch every one-token mutant
of the function (tasks.code.mutations: the operator flipped, the constant moved by one, the value
replaced by None):

    def add_3(x):
        return x + 3

    def test_add_3():
        assert add_3(2) == 5
        ...

With `names="opaque"` a function is named by a word drawn per repository (`kilo`, `tango`, ...)
instead: its name no longer gives the answer, and a repair has to be read off the failing test's
asserts in the solver's specification (`assert kilo(2) == 5`). The functions are the same ones as
with descriptive names for the same seed; only their names differ.

A function is a (family, constant) pair, the constant from 2 to `max_constant` (9 by default). The
pairs are split once, by a fixed hash, into those the `train` split draws from and those the `heldout`
split draws from, so no held-out function's body occurs in a training repository: a held-out repair
has to compose the family's operator and the constant (from a descriptive name, or from the asserts),
not recall a line it was trained on. With a larger `max_constant` a training repository's functions
are mostly ones a model has not seen either, so that repairing them, too, takes finding the constant.

    write_repositories(folder, "train", n=48, seed=0)   # [Path of folder/gen_train_000, ...]
"""

import ast
import hashlib
import random
from pathlib import Path

from nash_jax.runs.files import write_dir_atomically

# family -> (the body's expression of x and K, the test inputs as offsets from K)
FAMILIES = {
    "add": ("x + {k}", (-1, 2)),
    "sub": ("x - {k}", (0, 5)),
    "times": ("x * {k}", (1, 3)),
    "mod": ("x % {k}", (1, 2)),  # x = K + 1 and K + 2: K // gives 1, K % gives 1 and 2
    "above": ("x > {k}", (0, 1)),  # both sides of the boundary catch every mutant
    "below": ("x < {k}", (-1, 0)),
    "at_least": ("x >= {k}", (-1, 0)),
    "equals": ("x == {k}", (0, 1)),
}
MAX_CONSTANT = 9
CONSTANTS = tuple(range(2, MAX_CONSTANT + 1))
MODULES = ("ops", "calc", "arith", "checks", "funcs", "rules")
SPLITS = ("train", "heldout")
NAMINGS = ("descriptive", "opaque")
# opaque names: words that say nothing of a family or a constant
OPAQUE_NAMES = ("alpha", "bravo", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
                "kilo", "lima", "mike", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
                "victor", "whiskey", "xray", "yankee", "zulu")
HELDOUT_SHARE = 4  # one (family, constant) pair in HELDOUT_SHARE is held out


def split_of(family, k):
    """The split whose repositories may use function (family, k): fixed, not drawn per run."""
    digest = hashlib.sha256(f"{family}_{k}".encode()).digest()
    return "heldout" if digest[0] % HELDOUT_SHARE == 0 else "train"


def pairs(split, max_constant=MAX_CONSTANT):
    return [(f, k) for f in FAMILIES for k in range(2, max_constant + 1) if split_of(f, k) == split]


def descriptive_name(family, k):
    return f"{family}_{k}"


def function_text(family, k, name=None):
    expression = FAMILIES[family][0].format(k=k)
    return f"def {name or descriptive_name(family, k)}(x):\n    return {expression}\n"


def test_text(family, k, name=None):
    name, expression = name or descriptive_name(family, k), FAMILIES[family][0].format(k=k)
    lines = []
    for offset in FAMILIES[family][1]:
        x = k + offset
        value = eval(expression, {"x": x})  # noqa: S307 - our own template, an integer expression
        expected = repr(value) if isinstance(value, bool) else str(value)
        lines.append(f"    assert {name}({x}) {'is' if isinstance(value, bool) else '=='} {expected}\n")
    return f"def test_{name}():\n" + "".join(lines)


def covering_test(source, line):
    """The name of the test (of `test_text`) that checks the function of module text `source` whose
    definition holds 1-based `line`."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.lineno <= line <= node.end_lineno:
            return f"test_{node.name}"
    raise ValueError(f"generated repositories: line {line} is in no function of the module")


def repository_files(split, index, seed, functions=3, max_constant=MAX_CONSTANT, names="descriptive"):
    """{relative path: text} of repository `index` of `split` for `seed`, its functions named
    `names` ("descriptive": add_3; "opaque": a word)."""
    if split not in SPLITS:
        raise ValueError(f"generated repositories: split {split!r}; expected one of {', '.join(SPLITS)}")
    if names not in NAMINGS:
        raise ValueError(f"generated repositories: names={names!r}; expected one of {', '.join(NAMINGS)}")
    if max_constant < MAX_CONSTANT:
        raise ValueError(f"generated repositories: max_constant={max_constant}; expected at least "
                         f"{MAX_CONSTANT}, the top of the default range")
    available = pairs(split, max_constant)
    families = sorted({f for f, _ in available})
    if not 1 <= functions <= len(families):
        raise ValueError(f"generated repositories: functions={functions}; expected 1 to "
                         f"{len(families)} (one function per family)")
    # the default keeps the seeds' repositories of before the option existed
    key = f"{seed}:{split}:{index}" + ("" if max_constant == MAX_CONSTANT else f":{max_constant}")
    rng = random.Random(key)
    chosen = []
    for family in rng.sample(families, functions):
        chosen.append((family, rng.choice([k for f, k in available if f == family])))
    module = rng.choice(MODULES)
    # drawn after the functions and the module, so that both naming schemes give the same functions
    labels = (rng.sample(OPAQUE_NAMES, functions) if names == "opaque"
              else [descriptive_name(f, k) for f, k in chosen])
    imports = ", ".join(sorted(labels))
    return {f"{module}.py": "\n\n".join(function_text(f, k, n) for (f, k), n in zip(chosen, labels)),
            f"test_{module}.py": f"from {module} import {imports}\n\n\n"
                                 + "\n\n".join(test_text(f, k, n) for (f, k), n in zip(chosen, labels))}


def path_of(folder, split, index):
    return Path(folder) / f"gen_{split}_{index:03d}"


def write_repositories(folder, split, n, seed, functions=3, max_constant=MAX_CONSTANT,
                       names="descriptive"):
    """Write n repositories of `split` as folder/gen_SPLIT_NNN (each whole or not at all; one already
    there is kept) and return their paths."""
    out = []
    for index in range(n):
        path = path_of(folder, split, index)
        if not path.is_dir():
            files = repository_files(split, index, seed, functions, max_constant, names)
            write_dir_atomically(path, lambda d, files=files: [
                (Path(d) / name).write_text(text, encoding="utf-8") for name, text in files.items()])
        out.append(path)
    return out
