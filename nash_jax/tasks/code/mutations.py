"""Bugs made by rule: small AST-located edits of a repository's source files (mutation testing).

Each operator finds places in a module's syntax tree and rewrites only the characters of that place
(an operator token, a constant, a bound), so the rest of the file stays byte-identical and the bug
patch is a one-line hunk:

  comparison   <  <=, >  >=, == !=, in  not in, is  is not (each to its partner)
  arithmetic   + -, - +, * +, / *, // /, % //   (binary operators and augmented assignments)
  boolean      and  or
  negation     `not x` -> `x`
  constant     an integer literal n -> n + 1 and n - 1
  bound        a range() argument or slice bound e that is not a literal -> e + 1 and e - 1
  return       return True  False; return <value> -> return None

`mutants(repo, seed)` lists every mutant of a repository's source files whose tree differs from the
original, in an order drawn by `seed`; whether its bug is caught by a test is for the caller to run
(tasks.code.ssr_demonstrations). `unified_diff` writes a patch `git apply --unidiff-zero` reads (a/ b/
prefixes, no context lines by default).
"""

import ast
import difflib
import io
import random
import tokenize
from dataclasses import dataclass
from pathlib import Path

from nash_jax.tasks.code import code_repositories

COMPARISONS = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "==",
               "in": "not in", "not in": "in", "is": "is not", "is not": "is"}
ARITHMETIC = {"+": "-", "-": "+", "*": "+", "/": "*", "//": "/", "%": "//"}
BOOLEAN = {"and": "or", "or": "and"}
_ATOMS = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)
# No context lines: a one-token bug is a hunk of its `-old` and `+new` lines, the shortest text a
# policy can write that git still checks (the old line must be in the file; a wrong line number is
# found at its offset).
CONTEXT = 0


def unified_diff(path, before, after, context=CONTEXT):
    """The patch turning text `before` into `after` of file `path` (relative, POSIX), with a/ b/
    prefixes and git's marker for a last line without a newline, so that `git apply` reads it
    (`--unidiff-zero`, as tasks.code.ssr_patch applies every patch, for zero context lines)."""
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 f"a/{path}", f"b/{path}", n=context)
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                   for line in lines)


@dataclass(frozen=True)
class Mutant:
    file: str  # relative POSIX path of the changed source file
    operator: str  # a key of OPERATORS
    line: int  # 1-based line of the edit
    description: str  # "roman.py:17:9: `<` -> `<=` (comparison)"
    original: str  # the file's text before
    mutated: str  # and after

    @property
    def bug_diff(self):
        return unified_diff(self.file, self.original, self.mutated)

    @property
    def repair_diff(self):
        """The reversed bug patch: what a solver that finds the bug writes."""
        return unified_diff(self.file, self.mutated, self.original)


class _Source:
    """A module's text with character offsets for AST positions (which count UTF-8 bytes) and its
    operator and keyword tokens."""

    def __init__(self, text):
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))
        self.tokens = [(self._at(*t.start, chars=True), self._at(*t.end, chars=True), t.string)
                       for t in tokenize.generate_tokens(io.StringIO(text).readline)
                       if t.type in (tokenize.OP, tokenize.NAME)]

    def _at(self, lineno, col, chars=False):
        if not chars:  # an AST column: a byte offset into the line
            col = len(self.lines[lineno - 1].encode("utf-8")[:col].decode("utf-8", "replace"))
        return self.starts[lineno - 1] + col

    def start(self, node):
        return self._at(node.lineno, node.col_offset)

    def end(self, node):
        return self._at(node.end_lineno, node.end_col_offset)

    def segment(self, node):
        return self.text[self.start(node):self.end(node)]

    def operator_between(self, left, right):
        """(start, end, text) of the operator tokens between two nodes (parentheses skipped)."""
        found = [t for t in self.tokens if self.end(left) <= t[0] and t[1] <= self.start(right)
                 and t[2] not in "()"]
        if not found:
            return None
        return found[0][0], found[-1][1], " ".join(t[2] for t in found)


# An edit: (start, end, replacement) of characters. Each operator: (node, source) -> edits.
def _comparison(node, src):
    if not isinstance(node, ast.Compare):
        return []
    edits = []
    for left, right in zip([node.left, *node.comparators], node.comparators):
        found = src.operator_between(left, right)
        if found and found[2] in COMPARISONS:
            edits.append((found[0], found[1], COMPARISONS[found[2]]))
    return edits


def _arithmetic(node, src):
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant):
            return []  # "..." % args formats a string
        found, suffix = src.operator_between(node.left, node.right), ""
    elif isinstance(node, ast.AugAssign):
        found, suffix = src.operator_between(node.target, node.value), "="
    else:
        return []
    if not found or found[2].removesuffix(suffix) not in ARITHMETIC:
        return []
    return [(found[0], found[1], ARITHMETIC[found[2].removesuffix(suffix)] + suffix)]


def _boolean(node, src):
    if not isinstance(node, ast.BoolOp):
        return []
    # one edit per operator: `a and b and c` -> `a or b and c` is a tree of its own
    spans = [src.operator_between(a, b) for a, b in zip(node.values, node.values[1:])]
    return [(s[0], s[1], BOOLEAN[s[2]]) for s in spans if s and s[2] in BOOLEAN]


def _negation(node, src):
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return [(src.start(node), src.start(node.operand), "")]
    return []


def _constant(node, src):
    if not (isinstance(node, ast.Constant) and type(node.value) is int):
        return []
    return [(src.start(node), src.end(node), str(node.value + step)) for step in (1, -1)]


def _bound_nodes(node):
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
        return node.args[:2]
    if isinstance(node, ast.Slice):
        return [b for b in (node.lower, node.upper) if b is not None]
    return []


def _bound(node, src):
    edits = []
    for bound in _bound_nodes(node):
        if isinstance(bound, ast.Constant):
            continue  # the constant operator moves literals
        text = src.segment(bound)
        wrapped = text if isinstance(bound, _ATOMS) else f"({text})"
        edits += [(src.start(bound), src.end(bound), f"{wrapped} {sign} 1") for sign in "+-"]
    return edits


def _return(node, src):
    if not isinstance(node, ast.Return) or node.value is None:
        return []
    value = node.value
    if isinstance(value, ast.Constant) and value.value is None:
        return []
    if isinstance(value, ast.Constant) and isinstance(value.value, bool):
        new = str(not value.value)
    else:
        new = "None"
    return [(src.start(value), src.end(value), new)]


OPERATORS = {"comparison": _comparison, "arithmetic": _arithmetic, "boolean": _boolean,
             "negation": _negation, "constant": _constant, "bound": _bound, "return": _return}


def file_mutants(path, text, operators=tuple(OPERATORS)):
    """Every mutant of one module's text (in source order) whose syntax tree differs from the
    original's; `path` is the file's relative path, used in the patch."""
    unknown = sorted(set(operators) - set(OPERATORS))
    if unknown:
        raise ValueError(f"mutation operators {unknown}: unknown; expected some of "
                         f"{', '.join(OPERATORS)}")
    tree = ast.parse(text, filename=path)
    original, src, out, seen = ast.dump(tree), _Source(text), [], set()
    docstrings = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(
        n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and ast.get_docstring(n)}
    for node in ast.walk(tree):
        if id(node) in docstrings:
            continue
        for name in operators:
            for start, end, new in OPERATORS[name](node, src):
                mutated = text[:start] + new + text[end:]
                if mutated in seen or not _parses_differently(mutated, original):
                    continue
                seen.add(mutated)
                out.append(_mutant(path, name, text, mutated, start, end, new))
    return sorted(out, key=lambda m: (m.line, m.description))


def _mutant(path, operator, text, mutated, start, end, new):
    line = text.count("\n", 0, start) + 1
    column = start - (text.rfind("\n", 0, start) + 1) + 1
    old = " ".join(text[start:end].split())
    old = old if len(old) <= 40 else old[:37] + "..."
    change = f"`{old}` removed" if not new else f"`{old}` -> `{new}`"
    return Mutant(path, operator, line, f"{path}:{line}:{column}: {change} ({operator})", text, mutated)


def _parses_differently(text, original_dump):
    try:
        return ast.dump(ast.parse(text)) != original_dump
    except SyntaxError:
        return False


def mutants(repository, seed, operators=tuple(OPERATORS)):
    """Every mutant of the source files (not tests) of a repository (a shipped name or a path), in
    an order drawn by `seed`: the same seed gives the same list."""
    root = code_repositories.resolve(repository)
    out = []
    for relative in code_repositories.check_repository(root):
        if code_repositories.is_source_file(relative):
            text = (Path(root) / relative).read_text(encoding="utf-8")
            out += file_mutants(relative, text, operators)
    return _interleaved(out, random.Random(seed))


def _interleaved(items, rng):
    """Mutants shuffled within each operator, then dealt out one operator after another (in an
    order drawn once), so that the first few of a list are of different kinds: literals are the
    most frequent places and would otherwise crowd out the rest."""
    groups = {}
    for item in items:
        groups.setdefault(item.operator, []).append(item)
    order = sorted(groups)
    rng.shuffle(order)
    for name in order:
        rng.shuffle(groups[name])
    out = []
    while any(groups.values()):
        out += [groups[name].pop() for name in order if groups[name]]
    return out
