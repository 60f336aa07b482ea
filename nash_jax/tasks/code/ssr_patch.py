"""Unified diffs of an SSR artifact: which files they touch (checked to stay inside the repository),
and applying them with `git apply --check` first, then `git apply` (a plain folder needs no git repo).

A diff is the `git diff` / `diff -ru` kind with `a/` and `b/` prefixes (`-p1`): for each file a
`--- a/PATH` / `+++ b/PATH` pair (`/dev/null` for a created or deleted file) and its `@@` hunks, with
optional `diff --git` headers (renames and copies included). Binary patches and symbolic links are
refused; so is any path that is absolute, quoted or has a `..` or `.git` component. Hunks may have
no context lines (`diff -U0`): they are applied with `git apply --unidiff-zero`.
"""

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import PurePosixPath

_HUNK = re.compile(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
# Extended `diff --git` header lines that carry nothing this module needs.
_GIT_HEADERS = ("index ", "similarity index ", "dissimilarity index ", "old mode ", "new mode ",
                "new file mode ", "deleted file mode ")


@dataclass(frozen=True)
class PatchedFile:
    """One file a diff touches: its path before and after (None where it is created or deleted)."""
    old: str | None
    new: str | None

    def paths(self):
        return {path for path in (self.old, self.new) if path is not None}


def is_test_file(path):
    """pytest's default test files and conftest.py (which runs with them): `test_*.py`, `*_test.py`."""
    name = PurePosixPath(path).name
    return name == "conftest.py" or name.endswith(".py") and (
        name.startswith("test_") or name.endswith("_test.py"))


def patched_files(diff, what):
    """The files `diff` touches, in order; ValueError naming `what` (e.g. "bug_inject.diff") and the
    line for anything that is not a unified diff of plain relative paths."""
    lines = diff.splitlines()
    files, renamed, index = [], {}, 0
    while index < len(lines):
        line = lines[index]
        where = f"{what} line {index + 1}"
        if line.startswith("diff --git "):
            renamed = {}
        elif line.startswith(("rename from ", "copy from ", "rename to ", "copy to ")):
            key = "old" if " from " in line[:12] else "new"
            renamed[key] = safe_path(line.split(" ", 2)[2], where)
            if set(renamed) == {"old", "new"}:
                files.append(PatchedFile(renamed["old"], renamed["new"]))
                renamed = {}
        elif line.startswith(("GIT binary patch", "Binary files ")):
            raise ValueError(f"{where}: a binary patch; expected text diffs only")
        elif line.startswith(("new file mode 120000", "new mode 120000", "deleted file mode 120000")):
            raise ValueError(f"{where}: a symbolic link; expected regular files only")
        elif line.startswith("--- "):
            index = _file_section(lines, index, files, what)
            continue
        elif line.strip() and not line.startswith(_GIT_HEADERS):
            raise ValueError(f"{where}: {line[:60]!r} is not part of a unified diff; expected "
                             "'--- a/PATH', '+++ b/PATH' and '@@' hunks")
        index += 1
    return files


def _file_section(lines, index, files, what):
    """Parse `--- a/X`, `+++ b/Y` and the hunks after them; returns the index after the section."""
    if index + 1 >= len(lines) or not lines[index + 1].startswith("+++ "):
        raise ValueError(f"{what} line {index + 1}: '---' without a '+++' line after it")
    old = _header_path(lines[index][4:], "a/", f"{what} line {index + 1}")
    new = _header_path(lines[index + 1][4:], "b/", f"{what} line {index + 2}")
    if old is None and new is None:
        raise ValueError(f"{what} line {index + 1}: both sides are /dev/null")
    files.append(PatchedFile(old, new))
    index += 2
    while index < len(lines) and lines[index].startswith("@@"):
        match = _HUNK.match(lines[index])
        if match is None:
            raise ValueError(f"{what} line {index + 1}: {lines[index][:60]!r} is not a hunk header; "
                             "expected '@@ -START,COUNT +START,COUNT @@'")
        removed, added = (int(count) if count is not None else 1 for count in match.groups())
        index += 1
        while (removed > 0 or added > 0) and index < len(lines):
            mark = lines[index][:1]
            if mark in (" ", ""):
                removed, added = removed - 1, added - 1
            elif mark == "-":
                removed -= 1
            elif mark == "+":
                added -= 1
            elif mark != "\\":
                break
            index += 1
        if removed > 0 or added > 0:
            raise ValueError(f"{what} line {index}: a hunk ends early ({removed} old and {added} new "
                             "lines missing); expected as many lines as its header counts")
        while index < len(lines) and lines[index].startswith("\\"):
            index += 1
    return index


def _header_path(text, prefix, where):
    name = text.split("\t", 1)[0].rstrip()
    if name == "/dev/null":
        return None
    if not name.startswith(prefix):
        raise ValueError(f"{where}: path {name!r} lacks the {prefix!r} prefix; expected a diff made "
                         "with `git diff` or `diff -ru a b` (applied with -p1)")
    return safe_path(name[len(prefix):], where)


def safe_path(name, where):
    path = PurePosixPath(name)
    if (not name or name.startswith(('"', "/")) or path.is_absolute()
            or any(part in ("..", ".git") for part in path.parts)):
        raise ValueError(f"{where}: path {name!r} leaves the repository or is not plain; expected a "
                         "relative path inside it (no '..', no leading '/', no quotes, no .git)")
    return str(path)


def apply_patch(diff, directory, what):
    """Apply `diff` in `directory`: `git apply --check` first, then `git apply`. ValueError with git's
    message when it does not apply; an empty diff changes nothing. Hunks without context lines
    (`--unidiff-zero`) are accepted: git still checks each removed line against the file."""
    if not diff.strip():
        return
    for check in (["--check"], []):
        done = subprocess.run(["git", "apply", *check, "--unidiff-zero", "--whitespace=nowarn", "-"], input=diff,
                              text=True, capture_output=True, cwd=directory, env=_git_env(directory))
        if done.returncode != 0:
            message = done.stderr.strip().replace("\n", "; ")
            raise ValueError(f"{what} does not apply: {message}")


def _git_env(directory):
    """No repository above `directory` is discovered, and no configuration but git's defaults."""
    home = tempfile.gettempdir()
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home,
            "GIT_CEILING_DIRECTORIES": os.path.dirname(os.path.abspath(directory)),
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LANG": "C"}


def reversed_diff(diff, what):
    """The diff that undoes `diff` (the solver's specification is the reversed weakening). Only diffs
    that modify files in place are reversed; ValueError for one that creates, deletes or renames."""
    for patched in patched_files(diff, what):
        if patched.old != patched.new:
            raise ValueError(f"{what} creates, deletes or renames {patched.old or patched.new}; "
                             "expected changes to existing files only")
    out, lines, index = [], diff.splitlines(keepends=True), 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("--- ") and index + 1 < len(lines) and lines[index + 1].startswith("+++ "):
            out += ["--- a/" + lines[index + 1][6:], "+++ b/" + line[6:]]
            index += 2
            continue
        match = _HUNK_RANGES.match(line)
        if match:
            old, new, rest = match.groups()
            out.append(f"@@ -{new} +{old} @@{rest}")
        elif line[:1] in "+-" and out and not line.startswith(("+++ ", "--- ")):
            out.append({"+": "-", "-": "+"}[line[0]] + line[1:])
        else:
            out.append(line)
        index += 1
    return "".join(out)


_HUNK_RANGES = re.compile(r"@@ -(\S+) \+(\S+) @@(.*)", re.DOTALL)
