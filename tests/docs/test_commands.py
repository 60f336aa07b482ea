"""Every command README.md and docs/ show (`nash-jax ...`, `python tools/...`, `python -m nash_jax...`)
names a real subcommand, real flags and real files, and every KEY=VALUE it gives is a key the config
accepts (checked by the project's own config loader, as `nash-jax run` checks it)."""

import pytest

from tests.docs.commands import REPO, Command, documented_commands, problems


def test_every_documented_command_is_accepted_by_the_cli_and_the_config_loader():
    commands = documented_commands()
    assert len(commands) > 80, f"only {len(commands)} commands found: is the extractor reading the pages?"
    wrong = [f"{command}\n    " + "\n    ".join(found) for command in commands if (found := problems(command))]
    assert not wrong, f"{len(wrong)} of {len(commands)} documented commands are wrong:\n" + "\n".join(wrong)


def test_the_readme_shows_the_demo_and_the_test_commands():
    shown = {c.text for c in documented_commands() if c.page == "README.md"}
    assert "nash-jax run configs/demo.yaml" in shown
    assert 'pytest -m "not long"' in (REPO / "README.md").read_text()


def _page(tmp_path, body):
    page = tmp_path / "page.md"
    page.write_text(body)
    return page


@pytest.mark.parametrize("line, expected", [
    ("nash-jax run configs/no_such.yaml", "config configs/no_such.yaml does not exist"),
    ("nash-jax run configs/demo.yaml sppo.etta=3", "unknown key 'sppo.etta'"),
    ("nash-jax run configs/demo.yaml grpo.steps=3", "section 'grpo' is recipe grpo's"),
    ("nash-jax run configs/demo.yaml train.batch_size=zero", "train.batch_size='zero'; expected an integer"),
    ("nash-jax plan configs/demo.yaml --gpus 8", "unrecognized arguments: --gpus 8"),
    ("nash-jax rerun configs/demo.yaml", "invalid choice: 'rerun'"),
    ("nash-jax report runs/demo train.epochs=2", "a report may change only eval."),
    ("nash-jax import-gguf package:llama99 out", "no packaged checkpoint of that name"),
    ("nash-jax game configs/games/none.yaml", "game file configs/games/none.yaml does not exist"),
    ("nash-jax judge --prompts p.jsonl kind=llm function=m:f", "judge.kind=llm does not read it"),
    ("python tools/bench/no_such.py", "tools/bench/no_such.py does not exist"),
    ("python tools/bench/judge.py --layer 2", "declares no option --layer"),
    ("python tools/experiments/seeds.py configs/demo.yaml --seeds 2 --compare sppo.eta=1,x",
     "sppo.eta='x'; expected a finite number"),
    ("python -m nash_jax.tasks.code.ssr_demonstrations OUT --counts", "declares no option --counts"),
])
def test_a_wrong_command_is_reported_with_what_is_wrong(tmp_path, line, expected):
    (command,) = documented_commands([_page(tmp_path, f"```bash\n{line}\n```\n")])
    found = problems(Command("page.md", 1, command.text, command.argv))
    assert any(expected in message for message in found), found


def test_commands_are_read_from_chains_continuations_and_inline_spans_but_not_text_blocks(tmp_path):
    page = _page(tmp_path, "Run `nash-jax run configs/demo.yaml seed=1`, or `nash-jax plan` by name.\n\n"
                           "```bash\npip install -e . && nash-jax run configs/demo.yaml \\\n"
                           "    sppo.eta=8   # a comment\nPYTHONPATH=. nash-jax game configs/games/x.yaml\n```\n\n"
                           "```text\nnash-jax run CONFIG [KEY=VALUE ...]\n```\n")
    found = [(c.text, c.argv, c.inline) for c in documented_commands([page])]
    assert found == [
        ("nash-jax run configs/demo.yaml sppo.eta=8", ("nash-jax", "run", "configs/demo.yaml", "sppo.eta=8"), False),
        ("PYTHONPATH=. nash-jax game configs/games/x.yaml", ("nash-jax", "game", "configs/games/x.yaml"), False),
        ("nash-jax run configs/demo.yaml seed=1", ("nash-jax", "run", "configs/demo.yaml", "seed=1"), True)]
