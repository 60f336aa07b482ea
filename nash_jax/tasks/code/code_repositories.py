"""Small Python repositories for bug-injection self-play (SSR), shipped with the package or your own.

A repository is a directory holding Python source files and pytest files (`test_*.py` or `*_test.py`,
at any depth). The shipped ones live in `code_repos/<name>/`: one module of a few dozen lines and its
`test_<module>.py`, every test passing on the original. SPLITS says which are for training and which
are held out (never trained on: the held-out repair rate is measured on them).

    names("train")                       # the shipped training repositories
    resolve("roman")                     # Path of a shipped repository
    resolve("~/code/my_repo")            # Path of a repository of your own, checked
    as_dataset(split="heldout")          # a datasets.Dataset, one row per repository
    as_dataset(paths=["~/code/repos/*", "/src/other_repo"])

Your own repositories: give the recipe a list of paths in its config,

    ssr:
      repositories: [/src/my_repo, "~/code/repos/*"]

each entry either a repository or a glob pattern (`*`, `?`, `[`) whose matching directories are
repositories (so `DIR/*` is every repository in DIR); a plain name without a path separator is a
shipped repository. Each is checked when it is read: at least one source file and one test file, no
file over MAX_FILE_BYTES, at most MAX_FILES files (directories in SKIPPED_DIRS do not count: they
are never copied into a test run). The rows are `split: "user"`. The tests must pass on your
original code: a bug is a change that makes a passing test fail.
"""

import glob
import os
from pathlib import Path

SHIPPED = Path(__file__).with_name("code_repos")

# name -> split; `heldout` repositories are never trained on
SPLITS = {
    "arith_tokens": "train", "bank": "train", "binsearch": "train", "dates": "train",
    "graph": "train", "heap_queue": "train", "intervals": "train", "lru": "train",
    "matrix": "train", "primes": "train", "rational": "train", "rle": "train",
    "roman": "train", "stack": "train", "strtools": "train", "wrapping": "train",
    "anagrams": "heldout", "bowling": "heldout", "grades": "heldout", "ring_buffer": "heldout",
}
SPLIT_NAMES = ("train", "heldout")
USER_SPLIT = "user"

MAX_FILE_BYTES = 256 * 1024
MAX_FILES = 500
SKIPPED_DIRS = frozenset({".git", "__pycache__", ".pytest_cache", ".venv", "venv", ".tox",
                          ".mypy_cache", "node_modules"})
WHAT_A_REPOSITORY_HOLDS = ("a directory holding at least one Python source file and one pytest file "
                           "(test_*.py or *_test.py)")


def names(split=None):
    """The shipped repositories' names, sorted; of one split ("train" or "heldout") if given."""
    if split is not None and split not in SPLIT_NAMES:
        raise ValueError(f"split {split!r}: expected one of {', '.join(SPLIT_NAMES)} (or None for "
                         "every shipped repository)")
    return sorted(name for name, where in SPLITS.items() if split in (None, where))


def is_test_file(relative):
    name = Path(relative).name
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def is_source_file(relative):
    """A Python file that is neither a test nor pytest's conftest (what a bug may be injected in)."""
    name = Path(relative).name
    return name.endswith(".py") and not is_test_file(relative) and name != "conftest.py"


def repository_files(root, limit=None):
    """Every file of the repository at `root`, as sorted relative POSIX paths (SKIPPED_DIRS left
    out); the walk stops after `limit` + 1 files (enough to tell that there are too many)."""
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        out += [(Path(folder) / name).relative_to(root).as_posix() for name in files]
        if limit is not None and len(out) > limit:
            break
    return sorted(out)


def check_repository(root):
    """Raise ValueError (naming `root`) unless it is a directory a test run can use; return its files."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"repository {root}: not a directory; expected {WHAT_A_REPOSITORY_HOLDS}")
    files = repository_files(root, limit=MAX_FILES)
    if len(files) > MAX_FILES:
        raise ValueError(f"repository {root}: more than {MAX_FILES} files; expected a "
                         "small repository (every test run copies it whole)")
    too_big = [(f, size) for f in files if (size := (root / f).stat().st_size) > MAX_FILE_BYTES]
    if too_big:
        f, size = too_big[0]
        raise ValueError(f"repository {root}: {f} is {size} bytes, over the cap of {MAX_FILE_BYTES}"
                         f" ({len(too_big)} file(s) over it); expected small text files")
    for kind, test in (("Python source file (a .py file not named test_*.py)", is_source_file),
                       ("pytest file (test_*.py or *_test.py)", is_test_file)):
        if not any(test(f) for f in files):
            raise ValueError(f"repository {root}: no {kind} in it; expected {WHAT_A_REPOSITORY_HOLDS}")
    return files


def _is_shipped_name(text):
    return isinstance(text, str) and os.sep not in text and "/" not in text and text in SPLITS


def resolve(name_or_path):
    """The directory of a shipped repository (by name) or of one of your own (a path), checked.

    A plain name is looked up among the shipped repositories first; anything with a path separator,
    or a Path, is a directory of yours (`~` expanded).
    """
    if _is_shipped_name(name_or_path):
        return SHIPPED / name_or_path
    path = Path(os.path.expanduser(str(name_or_path)))
    if not path.is_dir():
        raise ValueError(f"repository {name_or_path!r}: neither a shipped repository "
                         f"({', '.join(names())}) nor an existing directory; expected a shipped name "
                         f"or the path of {WHAT_A_REPOSITORY_HOLDS}")
    check_repository(path)
    return path.resolve()


def expand(entries):
    """Repository paths of config entries: names, paths, and glob patterns of directories."""
    out = []
    for entry in entries:
        text = os.path.expanduser(str(entry))
        if not _is_shipped_name(entry) and glob.has_magic(text):
            matched = sorted(p for p in glob.glob(text) if Path(p).is_dir())
            if not matched:
                raise ValueError(f"repositories entry {entry!r}: the pattern matches no directory; "
                                 f"expected it to match directories, each {WHAT_A_REPOSITORY_HOLDS}")
            out.extend(resolve(Path(p)) for p in matched)
        else:
            out.append(resolve(entry))
    return out


def _row(name, split, root):
    files = check_repository(root)
    sources = [f for f in files if is_source_file(f)]
    tests = [f for f in files if is_test_file(f)]
    read = lambda f: (root / f).read_text(encoding="utf-8")  # noqa: E731
    return {"name": name, "split": split, "path": str(root), "source_files": sources,
            "test_files": tests, "source_texts": [read(f) for f in sources],
            "test_texts": [read(f) for f in tests]}


def rows(split=None, *, paths=None):
    """One dict per repository (what as_dataset holds): the shipped ones of `split`, or `paths`."""
    if paths is not None:
        if split is not None:
            raise ValueError("as_dataset: give split (shipped repositories) or paths (your own), "
                             "not both")
        return [_row(root.name, _split_of(root), root) for root in expand(paths)]
    return [_row(name, SPLITS[name], SHIPPED / name) for name in names(split)]


def _split_of(root):
    """A shipped repository's split (however it was named), else "user"."""
    shipped = root.resolve() == (SHIPPED / root.name).resolve() and root.name in SPLITS
    return SPLITS[root.name] if shipped else USER_SPLIT


def as_dataset(split=None, *, paths=None):
    """A datasets.Dataset of repositories: columns name, split, path, source_files, test_files,
    source_texts, test_texts (texts in the order of the file lists, paths relative to `path`)."""
    import datasets  # here: names() and resolve() serve callers that never load a table

    return datasets.Dataset.from_list(rows(split, paths=paths))
