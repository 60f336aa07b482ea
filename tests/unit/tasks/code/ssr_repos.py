"""Tiny repositories and hand-made SSR artifacts for the sandbox and check tests."""

import difflib
from pathlib import Path

from nash_jax.tasks.code.ssr_artifact import Artifact

CALC = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
TEXT = "def shout(word):\n    return word.upper() + '!'\n"
TEST_CALC = ("from calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
             "def test_mul():\n    assert mul(2, 3) == 6\n")
TEST_TEXT = ("from text import shout\n\n\ndef test_shout():\n    assert shout('hi') == 'HI!'\n\n\n"
             "def test_shout_empty():\n    assert shout('') == '!'\n")
# A test file that holds no test: pytest collects nothing from it.
TEST_NOTHING = "def helper():\n    return 1\n"

FILES = {"calc.py": CALC, "text.py": TEXT, "test_calc.py": TEST_CALC, "test_text.py": TEST_TEXT,
         "test_nothing.py": TEST_NOTHING}


def make_repo(folder, files=FILES):
    folder = Path(folder)
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def diff(name, before, after):
    """A unified diff of one file, as `git diff` writes it (a/ and b/ prefixes)."""
    return "".join(difflib.unified_diff(before.splitlines(keepends=True),
                                        after.splitlines(keepends=True), f"a/{name}", f"b/{name}"))


# Bugs and weakenings, by what they do.
BREAK_ADD = diff("calc.py", CALC, CALC.replace("return a + b", "return a - b"))
HARMLESS_CALC = diff("calc.py", CALC, CALC.replace("return a + b", "return b + a"))
BREAK_SHOUT = diff("text.py", TEXT, TEXT.replace("+ '!'", "+ '?'"))
HARMLESS_TEXT = diff("text.py", TEXT, "# shouting\n" + TEXT)
HIDE_ADD = diff("test_calc.py", TEST_CALC, TEST_CALC.replace("    assert add(2, 3) == 5\n",
                                                             "    pass\n"))
HIDE_SHOUT = diff("test_text.py", TEST_TEXT, TEST_TEXT.replace(
    "    assert shout('hi') == 'HI!'\n", "    pass\n").replace("    assert shout('') == '!'\n",
                                                                "    pass\n"))


def artifact(bug, weaken="", test_files=("test_calc.py",), repository="./repo"):
    return Artifact(bug_diff=bug, weaken_diff=weaken, test_files=tuple(test_files),
                    repository=repository)


def valid_artifact():
    """Two bug files, each breaking tests of its own; the weakening hides both."""
    return artifact(BREAK_ADD + BREAK_SHOUT, HIDE_ADD + HIDE_SHOUT, ("test_calc.py", "test_text.py"))
