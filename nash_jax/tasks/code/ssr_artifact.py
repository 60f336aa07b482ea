"""The SSR injector's artifact: the text a policy writes, and the directory it is saved as.

The policy writes three sections, each opened and closed by its tag on a line of its own (text
outside them is ignored):

    <bug_inject.diff>
    diff --git a/calc.py b/calc.py
    --- a/calc.py
    +++ b/calc.py
    @@ -1,2 +1,2 @@
     def add(a, b):
    -    return a + b
    +    return a - b
    </bug_inject.diff>
    <test_weaken.diff>
    ... a unified diff of test files only (it may be empty) ...
    </test_weaken.diff>
    <test_files>
    test_calc.py
    </test_files>

`bug_inject.diff` changes source files, `test_weaken.diff` test files (see ssr_patch for the diff
form), `test_files` lists the oracle test files, one repository-relative path a line. pytest with its
own JUnit report stands in for the paper's injector-written test script and parser.

An artifact directory holds `bug_inject.diff`, `test_weaken.diff`, `test_files.txt` (one path a line)
and `repository` (one line: a shipped repository's name, or a path to a folder; a relative path is
read from the artifact directory); saved ones add `checks.json`.
"""

import json
import re
from dataclasses import dataclass
from pathlib import Path

from nash_jax.runs.files import reading_text, write_dir_atomically
from nash_jax.tasks.code.ssr_patch import safe_path, patched_files

SECTIONS = ("bug_inject.diff", "test_weaken.diff", "test_files")
FILES = ("bug_inject.diff", "test_weaken.diff", "test_files.txt", "repository")


@dataclass(frozen=True)
class Artifact:
    """A parsed artifact: both diffs as text, the oracle test files, and the repository it is for."""
    bug_diff: str
    weaken_diff: str
    test_files: tuple
    repository: str

    def __post_init__(self):
        patched_files(self.bug_diff, "bug_inject.diff")
        patched_files(self.weaken_diff, "test_weaken.diff")
        for number, name in enumerate(self.test_files, 1):
            safe_path(name, f"test_files line {number}")


def parse_policy_text(text, repository):
    """The artifact in a policy's text (the sections above), for `repository`; ValueError naming the
    section that is missing, repeated or malformed."""
    found = {}
    for name in SECTIONS:
        pattern = re.compile(rf"^<{re.escape(name)}>[ \t]*\n(.*?)^</{re.escape(name)}>[ \t]*$",
                             re.DOTALL | re.MULTILINE)
        matches = pattern.findall(text)
        if len(matches) != 1:
            raise ValueError(f"policy text has {len(matches)} <{name}> sections; expected exactly one, "
                             f"opened by <{name}> and closed by </{name}> on lines of their own")
        found[name] = matches[0]
    return Artifact(bug_diff=found["bug_inject.diff"], weaken_diff=found["test_weaken.diff"],
                    test_files=_test_list(found["test_files"]), repository=repository)


def policy_text(artifact):
    """The text a policy writes for `artifact` (demonstrations are made with it)."""
    files = "".join(f"{name}\n" for name in artifact.test_files)
    return "".join(f"<{name}>\n{_ended(body)}</{name}>\n" for name, body in
                   zip(SECTIONS, (artifact.bug_diff, artifact.weaken_diff, files)))


def read_artifact_dir(path):
    """The artifact saved in `path`; ValueError naming the missing or unreadable file."""
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"artifact {path} is not a directory; expected one holding {', '.join(FILES)}")
    texts = {}
    for name in FILES:
        file = path / name
        if not file.is_file():
            raise ValueError(f"artifact {path} has no {name}; expected the files {', '.join(FILES)}")
        with reading_text(file):
            texts[name] = file.read_text()
    repository = texts["repository"].strip()
    if not repository or "\n" in repository:
        raise ValueError(f"{path / 'repository'}: expected one line, a shipped repository's name or "
                         f"a path to a folder; got {texts['repository'][:80]!r}")
    return Artifact(bug_diff=texts["bug_inject.diff"], weaken_diff=texts["test_weaken.diff"],
                    test_files=_test_list(texts["test_files.txt"]), repository=repository)


def write_artifact_dir(path, artifact, checks=None, extra=None):
    """Save `artifact` (and its check results, a JSON-able list, and `extra` files {name: text}) as a
    directory, whole or not at all."""
    texts = {"bug_inject.diff": artifact.bug_diff, "test_weaken.diff": artifact.weaken_diff,
             "test_files.txt": "".join(f"{name}\n" for name in artifact.test_files),
             "repository": artifact.repository + "\n",
             **({"checks.json": json.dumps(checks, indent=1) + "\n"} if checks is not None else {}),
             **(extra or {})}

    def write(folder):
        for name, text in texts.items():
            (Path(folder) / name).write_text(text, encoding="utf-8")

    write_dir_atomically(path, write)


def resolve_repository(repository, artifact_dir=None):
    """The folder of `repository`: a path (absolute, or relative to the artifact directory) when it
    names one with a '/' or a leading '.', else a shipped repository's name."""
    if "/" in repository or repository.startswith("."):
        folder = Path(repository)
        if not folder.is_absolute() and artifact_dir is not None:
            folder = Path(artifact_dir) / folder
        if not folder.is_dir():
            raise ValueError(f"repository {repository!r} (at {folder}) is not a directory; expected a "
                             "folder of Python modules and their pytest files")
        return folder
    try:
        from nash_jax.tasks.code import code_repositories
    except ImportError:
        raise ValueError(f"repository {repository!r}: no shipped repositories in this build; give a "
                         "path to a folder instead (with a '/', e.g. ./my_repo)") from None
    return Path(code_repositories.resolve(repository))


def _test_list(text):
    names = [line.strip() for line in text.splitlines() if line.strip()]
    for number, name in enumerate(names, 1):
        safe_path(name, f"test_files line {number}")
    return tuple(names)


def _ended(text):
    return text if not text or text.endswith("\n") else text + "\n"
