"""How the package reads (../shared/STYLE.md): small modules with one job each and short functions.
A module over 400 lines or a function over 60 is a sign that two jobs share a place."""

import ast
from pathlib import Path

import nash_jax

PACKAGE = Path(nash_jax.__file__).parent
MODULE_LINES, FUNCTION_LINES = 400, 60


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(PACKAGE.parent)): n for p in sorted(PACKAGE.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MODULE_LINES}
    assert not long, f"modules over {MODULE_LINES} lines: {long}"


def test_no_function_is_over_60_lines():
    long = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if (n := node.end_lineno - node.lineno + 1) > FUNCTION_LINES:
                    long[f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}"] = n
    assert not long, f"functions over {FUNCTION_LINES} lines: {long}"
