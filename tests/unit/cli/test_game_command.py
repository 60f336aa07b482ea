"""`nash-jax game`: game files in, the documented JSON / table / plot out, clear errors otherwise."""

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from nash_jax import cli
from nash_jax.evaluation import tabular
from tests.processes import USER_CLI

ROOT = Path(__file__).resolve().parents[3]
FOUR = ROOT / "configs" / "games" / "four_responses.yaml"


def run_cli(*args):
    return subprocess.run([*USER_CLI, *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT)


def test_four_response_game_file_holds_the_seed_matrix():
    g = tabular.load_game(FOUR)
    assert g.responses == ["A", "B", "C", "D"]
    expected = np.array([[0.5, 0.9, 0.3, 0.6],
                         [0.1, 0.5, 0.6, 0.4],
                         [0.7, 0.4, 0.5, 0.65],
                         [0.4, 0.6, 0.35, 0.5]])
    np.testing.assert_allclose(g.pref, expected, atol=1e-12)


def test_json_output_has_the_documented_shape_and_solves_the_four_response_game(capsys):
    assert cli.main(["game", str(FOUR), "--json", "--steps", "300", "--tau", "0.1", "0.02"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"responses", "nash", "bradley_terry", "rlhf", "uniform", "mwu", "nash_md"}
    # A, B, C are a cycle that D cannot break into: Nash mixture (1/7, 2/7, 4/7, 0), value 1/2.
    np.testing.assert_allclose(out["nash"]["policy"], [1 / 7, 2 / 7, 4 / 7, 0], atol=1e-7)
    assert out["nash"]["value"] == pytest.approx(0.5, abs=1e-9)
    assert out["uniform"]["exploitability"] == pytest.approx(0.075)
    mwu = out["mwu"]
    assert (mwu["eta"], mwu["steps"]) == (1.0, 300)
    assert len(mwu["last_trace"]) == len(mwu["average_trace"]) == 300
    assert set(mwu["last"]) == set(mwu["average"]) == {"policy", "exploitability"}
    assert [run["tau"] for run in out["nash_md"]] == [0.1, 0.02]
    assert all(len(run["trace"]) == 300 and run["steps"] == 300 for run in out["nash_md"])
    assert set(out["rlhf"]) == {"beta", "policy", "exploitability"}
    # The reward-model route ranks the cycle and is beaten more than uniform play is.
    assert out["rlhf"]["exploitability"] > out["uniform"]["exploitability"]


def test_wins_and_matrix_files_describe_the_same_game(tmp_path):
    matrix_file = tmp_path / "m.json"
    matrix_file.write_text(json.dumps({"responses": ["x", "y", "z"],
                                       "matrix": [[0.5, 0.8, 0.6], [0.2, 0.5, 0.3],
                                                  [0.4, 0.7, 0.5]]}))
    wins_file = tmp_path / "w.yaml"
    wins_file.write_text("responses: [x, y, z]\nwins: [[x, y, 0.8], [z, x, 0.4], [y, z, 0.3]]\n")
    np.testing.assert_allclose(tabular.load_game(matrix_file).pref, tabular.load_game(wins_file).pref)


def test_table_output_and_plot(tmp_path):
    png = tmp_path / "plots" / "four.png"
    result = run_cli("game", FOUR, "--steps", "200", "--plot", png)
    assert result.returncode == 0, result.stderr
    for text in ("Nash equilibrium (LP)", "MWU average iterate", "Nash-MD last iterate (tau=0.02)",
                 "Bradley-Terry scores", "0.1429"):
        assert text in result.stdout, result.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(png.parent.glob(".*.tmp")), "the temporary file should have been renamed"


@pytest.mark.parametrize("content, message", [
    ("responses: [a, b]\nwins: [[a, b, 0.7], [a, c, 0.5]]\n", "names 'c', which is not in responses"),
    ("responses: [a, b, c]\nwins: [[a, b, 0.7]]\n", r"leaves pairs without a probability: \[\('a', 'c'\)"),
    ("responses: [a, b]\nwins: [[a, b, 0.7], [b, a, 0.3]]\n", "gives the pair .* a second time"),
    ("responses: [a, b]\nwins: [[a, b, 1.5]]\n", "p=1.5; expected a probability"),
    ("responses: [a, b]\nmatrix: [[0.5, 0.6], [0.6, 0.5]]\n", r"P\['a','b'\]=0.6 and P\['b','a'\]=0.6"),
    ("responses: [a, b]\nmatrix: [[0.5, 0.6]]\n", "must be 2 rows of 2 numbers"),
    ("responses: [a, b]\n", "exactly one of `matrix`"),
    ("responses: [a, b]\nmatrix: [[0.5, 0.5], [0.5, 0.5]]\nsteps: 3\n", r"unknown keys \['steps'\]"),
    ("[1, 2", "not valid YAML/JSON"),
])
def test_bad_game_files_get_a_clear_error_naming_the_file(tmp_path, content, message):
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    result = run_cli("game", path)
    assert result.returncode == 2
    assert str(path) in result.stderr and "error" in result.stderr
    assert re.search(message, result.stderr), result.stderr


def test_missing_file_and_bad_flags_are_errors(tmp_path):
    result = run_cli("game", tmp_path / "nope.yaml")
    assert result.returncode == 2 and "does not exist" in result.stderr
    result = run_cli("game", FOUR, "--eta", "-1")
    assert result.returncode == 2 and "expected a positive finite number" in result.stderr
