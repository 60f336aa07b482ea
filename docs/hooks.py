"""mkdocs hooks: pages that cannot drift from the code.

`<!-- fields: SECTION -->` in a page becomes a table of every field of config section SECTION (a
shared section such as `train`, a recipe's such as `sppo`, or `top` for the top-level keys): its
dotted key, type, default and meaning. The meaning is the field's comment in the dataclass source
(the comment on its line, the comment lines just above it, and indented continuation lines below),
after its note in docs/field_notes.yaml where it has one. A field with neither, or a note for a
field that no longer exists, fails the build.

`<!-- cli: COMMAND -->` becomes the `--help` text of `nash-jax COMMAND` (`<!-- cli: -->` the
top-level one), from the same argparse parser the command uses.
"""

import argparse
import dataclasses
import inspect
import io
import logging
import re
import textwrap
import tokenize
import typing
from pathlib import Path

import yaml
from mkdocs.exceptions import PluginError

NOTES = Path(__file__).with_name("field_notes.yaml")
MARKER = re.compile(r"<!-- (fields|cli): ?([\w.-]*) -->")


# ---------------------------------------------------------------- config fields

def field_comments(cls):
    """{field name: its comment text} read from the source of dataclass `cls`."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    names = {f.name for f in dataclasses.fields(cls)}
    comments = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = (tok.start[1], tok.string.lstrip("#"))
    result, pending, last = {}, [], None
    field_line = re.compile(r"^    (\w+)\s*:")
    for number, line in enumerate(lines, start=1):
        match = field_line.match(line)
        if match and match.group(1) in names:
            name = match.group(1)
            parts = list(pending)
            if number in comments and comments[number][0] > 4:
                parts.append(comments[number][1].strip())
            result[name] = " ".join(p for p in parts if p)
            pending, last = [], name
            continue
        stripped = line.strip()
        if stripped.startswith("#") and number in comments:
            text = comments[number][1]
            if last is not None and text.startswith("   ") and not pending:  # a continuation
                result[last] = f"{result[last]} {text.strip()}".strip()
            else:
                pending.append(text.strip())
                last = None
        elif stripped and not stripped.startswith("#"):
            pending, last = [], (last if line.startswith("     ") else None)
    return result


def _type_name(hint):
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in typing.get_args(hint))
    if origin in (typing.Union, __import__("types").UnionType):
        return " \\| ".join("null" if a is type(None) else _type_name(a) for a in typing.get_args(hint))
    if origin is list:
        return f"list of {_type_name(typing.get_args(hint)[0])}"
    return getattr(hint, "__name__", str(hint))


def _default(f):
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "(required)"
    return "`" + yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip() + "`"


def section_type(section):
    """The dataclass of config section `section` (`top`: the run config's own top-level fields)."""
    from nash_jax.config.recipes import discover_recipes, run_config_type
    from nash_jax.config.sections import RunConfig

    discover_recipes()
    if section == "top":
        return RunConfig
    fields = {f.name: f for f in dataclasses.fields(run_config_type())}
    if section not in fields:
        raise ValueError(f"<!-- fields: {section} -->: no config section {section!r}; expected one of "
                         f"{sorted(n for n, f in fields.items() if dataclasses.is_dataclass(f.type))}")
    return fields[section].type


def field_rows(cls, prefix, notes, used):
    """[(key, type, default, meaning)] of every field of `cls`, nested sections flattened."""
    hints = typing.get_type_hints(cls)
    comments = field_comments(cls)
    rows = []
    for f in dataclasses.fields(cls):
        key = f"{prefix}.{f.name}" if prefix else f.name
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint) and f.default_factory is not dataclasses.MISSING:
            if prefix:  # a nested section (train.optimizer, ssr.sandbox): its fields, dotted
                rows.extend(field_rows(hint, key, notes, used))
            continue  # `top`: the sections have tables of their own
        # the comment in the code, after a note that says more where the comment is terse
        meaning = "; ".join(m for m in (notes.get(key), comments.get(f.name)) if m)
        if key in notes:
            used.add(key)
        if not meaning:
            raise ValueError(f"config field {key} has no comment in {cls.__module__}.{cls.__qualname__} "
                             f"and no note in {NOTES.name}: say what it means in one of them")
        rows.append((key, _type_name(hint), _default(f), meaning))
    return rows


def fields_table(section, notes, used):
    cls = section_type(section)
    rows = field_rows(cls, "" if section == "top" else section, notes, used)
    where = f"`{cls.__module__}.{cls.__qualname__}`"
    lines = [(f"Every field of {'the top level' if section == 'top' else f'`{section}:`'} "
             f"(generated from {where} when the site is built):"), "",
             "| key | type | default | meaning |", "|---|---|---|---|"]
    for key, kind, default, meaning in rows:
        meaning = meaning.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
        lines.append(f"| `{key}` | {kind} | {default} | {meaning} |")
    return "\n".join(lines)


def read_notes():
    return yaml.safe_load(NOTES.read_text()) or {}


# ---------------------------------------------------------------- the command line

def subparsers():
    """{subcommand: its argparse parser}, from the `nash-jax` command's own parser."""
    from nash_jax.cli import build_parser

    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return parser, dict(action.choices)


def cli_help(command):
    import os

    os.environ["COLUMNS"] = "100"
    parser, commands = subparsers()
    if command and command not in commands:
        raise ValueError(f"<!-- cli: {command} -->: nash-jax has no subcommand {command!r}; expected one "
                         f"of {sorted(commands)}")
    text = (commands[command] if command else parser).format_help()
    return f"```text\n$ nash-jax {command + ' ' if command else ''}--help\n{text.rstrip()}\n```"


# ---------------------------------------------------------------- mkdocs

_used_notes = set()
_shown_commands = set()


class _ShapeBrackets(logging.Filter):
    """Docstrings are plain text: `P[i][j]` or `[B, K]` reads to markdown as a reference link, and
    autorefs then warns that it cannot find `i` or `K`. A real cross-reference names a dotted object
    (`nash_jax.core.losses.sppo_loss`); a target without a dot is an array index, not a broken link."""

    pattern = re.compile(r"Could not find cross-reference target '([^'.]*)'")

    def filter(self, record):
        return not self.pattern.search(record.getMessage())


def on_config(config):
    for handler in logging.getLogger("mkdocs").handlers:
        if not any(isinstance(f, _ShapeBrackets) for f in handler.filters):
            handler.addFilter(_ShapeBrackets())
    return config


def on_page_markdown(markdown, page, config, files):
    notes = read_notes()

    def replace(match):
        kind, name = match.groups()
        if kind == "fields":
            return fields_table(name, notes, _used_notes)
        _shown_commands.add(name)
        return cli_help(name)

    try:
        return MARKER.sub(replace, markdown)
    except ValueError as err:
        raise PluginError(f"{page.file.src_uri}: {err}") from None


def on_post_build(config):
    stale = sorted(set(read_notes()) - _used_notes)
    unshown = sorted(set(subparsers()[1]) - _shown_commands)
    _used_notes.clear()
    _shown_commands.clear()
    if unshown:
        raise PluginError(f"nash-jax subcommands whose --help no page shows (add <!-- cli: NAME --> to "
                          f"docs/cli.md): {unshown}")
    if stale:
        raise PluginError(f"{NOTES.name} has notes for fields no page shows or that no longer exist: {stale}")
