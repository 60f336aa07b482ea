"""The documentation site builds with `mkdocs build --strict` (a broken link, a page missing from the
nav or the disk, an API reference to a module that is gone, a config field without a meaning, a
subcommand without its --help on the CLI page: each fails the build), and the pages the build generates
from the code (field tables, --help texts) say what the code says."""

import dataclasses
import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

from tests.docs.commands import REPO


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build(root, site):
    env = dict(os.environ, PYTHONPATH=str(REPO), NO_MKDOCS_2_WARNING="1")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_the_site_builds_strictly(tmp_path):
    result = _build(REPO, tmp_path / "site")
    assert result.returncode == 0, result.stderr[-4000:]
    for page in ("index.html", "quickstart/index.html", "recipes/ssr/index.html", "cli/index.html",
                 "api/core/index.html", "results/kuhn-demo/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
    cli = (tmp_path / "site" / "cli" / "index.html").read_text()
    assert "nash-jax import-gguf --help" in cli and "--device-memory SIZE" in cli
    api = (tmp_path / "site" / "api" / "core" / "index.html").read_text()
    assert "sppo_loss" in api and "mean((log π_θ(y)/π_t(y)" in api


def test_a_broken_link_a_missing_page_and_a_broken_api_reference_fail_the_build(tmp_path):
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    shutil.copy(REPO / "mkdocs.yml", tmp_path)
    (tmp_path / "nash_jax").symlink_to(REPO / "nash_jax")  # mkdocstrings reads the package beside mkdocs.yml
    with open(tmp_path / "docs" / "concepts.md", "a") as page:
        page.write("\nSee [the nowhere page](nowhere.md).\n")
    with open(tmp_path / "docs" / "api" / "core.md", "a") as page:
        page.write("\n::: nash_jax.core.no_such_module\n")
    nav = (tmp_path / "mkdocs.yml").read_text().replace("  - Concepts: concepts.md\n",
                                                      "  - Concepts: concepts.md\n  - Gone: gone.md\n")
    (tmp_path / "mkdocs.yml").write_text(nav)
    result = _build(tmp_path, tmp_path / "site")
    assert result.returncode != 0
    assert "contains a link 'nowhere.md', but the target is not found" in result.stderr, result.stderr[-3000:]
    assert "'gone.md' is included in the 'nav' configuration, which is not found" in result.stderr
    assert "nash_jax.core.no_such_module could not be found" in result.stderr


def test_field_tables_come_from_the_dataclasses_with_every_field_and_its_default():
    hooks = _hooks()
    table = hooks.fields_table("sppo", hooks.read_notes(), set())
    from nash_jax.recipes.sppo import SPPOConfig

    for f in dataclasses.fields(SPPOConfig):
        assert f"| `sppo.{f.name}` |" in table, f.name
    assert "| `sppo.eta` | float | `1000.0` | SPPO's η (the official scripts' 1/β) |" in table
    nested = hooks.fields_table("ssr", hooks.read_notes(), set())
    assert "| `ssr.sandbox.wall_s` | float | `30.0` |" in nested and "| `ssr.anchors.heldout_bugs` |" in nested


def test_a_field_without_a_comment_or_a_note_fails_and_so_does_a_stale_note():
    hooks = _hooks()

    @dataclass(frozen=True)
    class Section:
        said: int = 1  # what it means
        # what the next one means,
        # over two lines
        above: str = "x"
        unsaid: float = 0.5
        nested: list[str] = field(default_factory=list)

    comments = {name: text for name, text in hooks.field_comments(Section).items() if text}
    assert comments == {"said": "what it means", "above": "what the next one means, over two lines"}
    with pytest.raises(ValueError, match="config field mine.unsaid has no comment"):
        hooks.field_rows(Section, "mine", {}, set())
    used = set()
    rows = hooks.field_rows(Section, "mine", {"mine.unsaid": "a note", "mine.nested": "another"}, used)
    assert [r[0] for r in rows] == ["mine.said", "mine.above", "mine.unsaid", "mine.nested"]
    assert used == {"mine.unsaid", "mine.nested"}
    # after a build, a note no page used (its field renamed or gone) fails it
    hooks._shown_commands.update(hooks.subparsers()[1])
    hooks._used_notes.update(set(hooks.read_notes()) - {"sppo.loss"})
    with pytest.raises(hooks.PluginError, match=r"notes for fields .* no longer exist: \['sppo.loss'\]"):
        hooks.on_post_build(None)


def test_the_cli_page_shows_the_help_of_every_subcommand():
    hooks = _hooks()
    _, commands = hooks.subparsers()
    page = (REPO / "docs" / "cli.md").read_text()
    assert {name for name in commands if f"<!-- cli: {name} -->" not in page} == set()
    assert commands["run"].format_help().splitlines()[0] in hooks.cli_help("run").replace("\n ", " ")


def test_every_link_of_the_readme_leads_to_a_file_of_the_repository():
    """README.md is read on the forge, outside the site: its relative links must name real files (the
    site's own links are checked by the strict build)."""
    import re

    text = (REPO / "README.md").read_text()
    links = [target.split("#")[0] for target in re.findall(r"\]\(([^)\s]+)\)", text)
             if not re.match(r"[a-z]+:", target)]
    assert len(links) > 20, links
    assert [link for link in links if not (REPO / link).exists()] == []
