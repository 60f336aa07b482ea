"""The commands the documentation shows: every `nash-jax ...` and `python tools/...` (or `python -m
nash_jax...`) line of a fenced shell block in README.md and docs/, and of an inline code span."""

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).parents[2]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
SHELL_BLOCKS = ("bash", "sh", "shell", "console", "")  # ```text blocks hold synopses and printouts
ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")


@dataclass(frozen=True)
class Command:
    page: str  # repository-relative path of the page
    line: int  # where the block or span starts on it
    text: str  # the command as the page shows it (one of a `&&` chain)
    argv: tuple  # its words, environment assignments dropped
    inline: bool = False  # from a `code span` in prose rather than a fenced block

    def __str__(self):
        return f"{self.page}:{self.line}: {self.text}"


def pages():
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _commands_of(text):
    """The commands of one shell text: continuation lines joined, `# comments` and `&&` chains split."""
    text = re.sub(r"\\\n\s*", " ", text)
    for line in text.splitlines():
        line = line.strip().removeprefix("$ ")
        if not line:
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        command = []
        for word in [*words, "&&"]:
            if word in ("&&", ";", "||"):
                yield command
                command = []
            else:
                command.append(word)


def _is_shown_command(argv):
    return bool(argv) and (argv[0] == "nash-jax" or (argv[0] in ("python", "python3") and len(argv) > 1 and (
        argv[1].startswith("tools/") or (argv[1] == "-m" and len(argv) > 2 and argv[2].startswith("nash_jax")))))


def documented_commands(page_paths=None):
    """Every command shown on the pages, fenced (shell blocks) and inline."""
    found = []
    for path in page_paths or pages():
        text = path.read_text()
        name = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name
        spans = [(m.start(), m.group(2), False) for m in FENCE.finditer(text) if m.group(1) in SHELL_BLOCKS]
        fenced = [(m.start(), m.end()) for m in FENCE.finditer(text)]
        spans += [(m.start(), m.group(1), True) for m in INLINE.finditer(text)
                  if not any(a <= m.start() < b for a, b in fenced)]
        for start, body, inline in spans:
            line = text.count("\n", 0, start) + 1
            for words in _commands_of(body):
                argv = list(words)
                while argv and ENV.match(argv[0]):
                    argv.pop(0)
                if _is_shown_command(argv) and not (inline and len(argv) <= 2):  # `nash-jax plan`: a name
                    found.append(Command(name, line, " ".join(words), tuple(argv), inline))
    return found


# ------------------------------------------------------------------ checking a command

def placeholder(word):
    """RUN_DIR, CONFIG, KEY=VALUE, eval.KEY=VALUE: words a reader replaces, not checked."""
    return bool(re.fullmatch(r"[A-Z][A-Z0-9_]*", word.split("=")[0].split(".")[-1]))


def problems(command):
    """What is wrong with `command` (a list of messages; empty when it is right)."""
    argv = list(command.argv)
    if argv[0] == "nash-jax":
        return _nash_jax(argv[1:])
    if argv[1] == "-m":
        return _python_module(argv[2], argv[3:])
    return _tool(argv[1], argv[2:])


def _nash_jax(args):
    import contextlib
    import io

    from nash_jax.cli import build_parser

    if not args or placeholder(args[0]):
        return []
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parsed = build_parser().parse_args(args)
    except SystemExit:
        return [f"nash-jax refuses the arguments: {err.getvalue().strip().splitlines()[-1]}"]
    check = _SUBCOMMAND_CHECKS.get(parsed.command)
    return check(parsed) if check else []


def _repo_file(path, what):
    if placeholder(str(path)) or (REPO / path).is_file():
        return []
    return [f"{what} {path} does not exist in the repository"]


def _config_and_overrides(config, overrides):
    from nash_jax.config import load_config

    if placeholder(str(config)):
        return []
    missing = _repo_file(config, "config")
    if missing:
        return missing
    try:
        load_config(REPO / config, [o for o in overrides if not placeholder(o)])
    except (ValueError, TypeError, FileNotFoundError) as err:
        return [f"the config loader refuses it: {err}"]
    return []


def _run_or_plan(args):
    return _config_and_overrides(args.config, args.overrides)


def _report(args):
    from nash_jax import config as config_lib

    values, out = {}, []
    for text in args.overrides:
        if placeholder(text):
            continue
        key, _, raw = text.partition("=")
        field = key.split(".")
        if field[0] != "eval" or len(field) < 2 or field[1] not in config_lib.REPORT_ONLY_EVAL_FIELDS:
            out.append(f"{text}: a report may change only eval.{{{', '.join(config_lib.REPORT_ONLY_EVAL_FIELDS)}}}")
            continue
        values = config_lib.apply_overrides(values, [".".join(field[1:]) + "=" + raw])
    try:
        config_lib.build(config_lib.EvalConfig, values, "eval")
    except (ValueError, TypeError) as err:
        out.append(f"the config loader refuses it: {err}")
    return out


def _judge(args):
    from nash_jax import config as config_lib

    values = {"kind": "pairrm", "path": args.model, "mode": args.mode, "batch_size": args.batch_size}
    for text in args.settings:
        keys, value = config_lib.parse_override(text)
        values[".".join(keys)] = value
    try:
        config_lib.build(config_lib.JudgeConfig, values, "judge")
    except (ValueError, TypeError) as err:
        return [f"the judge's settings are refused: {err}"]
    return []


def _import_gguf(args):
    from nash_jax.models.packaged import PACKAGED, PREFIX

    if args.file.startswith(PREFIX) and args.file[len(PREFIX):] not in PACKAGED:
        return [f"{args.file}: no packaged checkpoint of that name (expected one of {sorted(PACKAGED)})"]
    return []


_SUBCOMMAND_CHECKS = {"run": _run_or_plan, "plan": _run_or_plan, "report": _report, "rerank": _report,
                      "judge": _judge, "import-gguf": _import_gguf,
                      "game": lambda args: _repo_file(args.file, "game file")}


def _flags_of(source):
    """The option strings a script's argparse declares (its add_argument calls' string arguments)."""
    import ast

    flags = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            flags |= {a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("-")}
    return flags


def _unknown_flags(source, args, where):
    flags = _flags_of(source) | {"-h", "--help"}
    return [f"{where} declares no option {word.split('=')[0]}" for word in args
            if word.startswith("-") and not re.fullmatch(r"-\d.*", word) and word.split("=")[0] not in flags]


def _tool(script, args):
    path = REPO / script
    if not path.is_file():
        return [f"{script} does not exist"]
    out = _unknown_flags(path.read_text(), args, script)
    if script == "tools/experiments/seeds.py" and args:
        config = args[0]
        overrides = [a for a in args[1:] if "=" in a and not a.startswith("-")]
        if "--compare" in args:  # KEY=A,B: each variant must load
            key, _, choices = args[args.index("--compare") + 1].partition("=")
            overrides += [f"{key}={choices.split(',')[0]}"]
            for choice in choices.split(",")[1:]:
                out += _config_and_overrides(config, [f"{key}={choice}"])
        out += _config_and_overrides(config, overrides)
    return out


def _python_module(module, args):
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return [f"python -m {module}: no such module"]
    return _unknown_flags(Path(spec.origin).read_text(), args, module)
