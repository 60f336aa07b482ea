"""The report: cycle detection on constructed tables, and the files a finished run's report writes."""

import json

import numpy as np
import pytest

from nash_jax import engine
from nash_jax.cli import main
from nash_jax.config import load_config
from nash_jax.evaluation.tables import find_cycles, win_rate_table
from nash_jax.tasks.synthetic import synthetic
from tests.recipes.conftest import CONFIGS, assert_same_parameters, run_cli, small_config

pytestmark = pytest.mark.long

LABELS = ["pi_0", "pi_1", "pi_2", "pi_3"]


def table_from_wins(wins, n=4, margin=0.2):
    table = np.full((n, n), 0.5)
    for a, b in wins:
        table[a, b], table[b, a] = 0.5 + margin, 0.5 - margin
    return table


def test_a_cyclic_sequence_of_iterates_is_flagged():
    # π3 ≻ π2 ≻ π1 but π1 ≻ π3; π0 loses to everyone
    table = table_from_wins([(3, 2), (2, 1), (1, 3), (1, 0), (2, 0), (3, 0)])
    assert find_cycles(table, LABELS) == [["pi_1", "pi_3", "pi_2"]]


def test_a_transitive_sequence_is_not_flagged():
    table = table_from_wins([(b, a) for a in range(4) for b in range(a + 1, 4)])
    assert find_cycles(table, LABELS) == []


def test_win_rate_table_is_square_with_half_on_the_diagonal():
    responses = [[["plain reply", "witty reply"]], [["witty reply", "formal reply"]],
                 [["poetic reply", "poetic reply"]]]
    table = win_rate_table(synthetic.SyntheticOracle(), ["p"], responses, per_call=4)
    pref = synthetic.preference_matrix()
    assert table.shape == (3, 3) and np.allclose(np.diag(table), 0.5)
    np.testing.assert_allclose(table + table.T, 1.0)
    assert table[1, 0] == pytest.approx((pref[1, 0] + pref[2, 1]) / 2)


def test_demo_in_a_smaller_setting_writes_the_report(tmp_path, capsys):
    config_path = small_config(tmp_path, sppo={"iterations": 3}, data={"path": "builtin:synthetic:80"},
                               eval={"prompts": 8, "samples_per_prompt": 2,
                                     "second_judge": {"kind": "synthetic"}, "average_iterates": True,
                                     "saturation_threshold": 0.5,
                                     "verifier": "tests.recipes.verifiers:witty_first"})
    run_dir = tmp_path / "run"
    report = engine.run(load_config(config_path, [f"run_dir={run_dir}"]))
    for name in ("report.json", "report.md", "win_rates.png", "iterates.png", "loss.png"):
        assert (run_dir / name).stat().st_size > 0, name
    saved = json.loads((run_dir / "report.json").read_text())
    labels = ["pi_0", "pi_1", "pi_2", "pi_3", "pi_avg"]
    assert saved["iterates"] == labels and saved["final_iterate"] == "pi_3"
    for key in ("win_rate_table", "length_controlled_table"):
        table = np.asarray(saved[key])
        assert table.shape == (5, 5) and np.allclose(np.diag(table), 0.5), key
        np.testing.assert_allclose(table + table.T, 1.0, atol=1e-9, err_msg=key)
    table = np.asarray(saved["win_rate_table"])
    assert saved["win_rate_table_second_judge"] == saved["win_rate_table"]  # the same oracle
    assert (saved["final_vs_initial"] == pytest.approx(table[3, 0])
            == pytest.approx(report["final_vs_initial"]))
    assert 0 < saved["final_vs_initial_length_controlled"] < 1
    assert [p["iterate"] for p in saved["per_iterate"]] == labels
    assert saved["per_iterate"][0]["kl_to_initial"] == pytest.approx(0.0, abs=1e-4)
    assert all(len(e["loss"]) > 0 and 0 <= e["target_reached"] <= 1 for e in saved["per_iteration"])
    # saturation per iteration; the threshold of ½ flags every iteration
    assert all(0 <= e["mean_abs_advantage"] <= 0.5 and 0 <= e["indistinct_share"] <= 1
               for e in saved["per_iteration"])
    assert saved["saturated_iterations"] == [0, 1, 2]
    # the averaged iterate: a row and a column, compared with the last iterate, cached as stages
    assert saved["average"]["of"] == ["pi_1", "pi_2", "pi_3"]
    assert saved["average"]["vs_last"] == pytest.approx(table[4, 3])
    assert "exploitability" in saved["average"] and "last_exploitability" in saved["average"]
    assert (run_dir / "eval" / "average" / "policy" / "config.json").is_file()
    assert saved["cycles"] == find_cycles(table[:4, :4], labels[:4])
    # the verifier: each policy's greedy responses to the held-out prompts, checked and kept
    rows = [json.loads(line) for line in (run_dir / "eval" / "heldout.jsonl").read_text().splitlines()]
    assert [r["iterate"] for r in rows] == [label for label in labels for _ in range(8)]
    assert all(r["correct"] == (r["response"].split()[:1] == ["witty"]) and r["answer"] == "witty"
               for r in rows)
    assert {r["prompt"] for r in rows} <= set(synthetic.prompt_texts(80, seed=0))  # the user messages
    accuracy = [np.mean([r["correct"] for r in rows if r["iterate"] == label]) for label in labels]
    assert saved["heldout_accuracy"] == pytest.approx(accuracy[:4])
    assert [p["heldout_accuracy"] for p in saved["per_iterate"]] == pytest.approx(accuracy)
    assert saved["heldout_format_rate"] == pytest.approx(
        [np.mean([r["formatted"] for r in rows if r["iterate"] == label]) for label in labels[:4]])
    assert all(0 <= p["heldout_finished"] <= 1 for p in saved["per_iterate"])
    markdown = (run_dir / "report.md").read_text()
    assert "final_vs_initial" in markdown and "![win_rates.png](win_rates.png)" in markdown
    assert "Length-controlled win rates" in markdown and "vs pi_0 length-controlled" in markdown
    assert "Iterate average" in markdown and "win rates saturated" in markdown
    assert "judge-fitting" not in markdown  # a second judge was used

    # `nash-jax rerank RUN_DIR --n 2` re-evaluates from the cached samples (the average's included)
    # and adds the last iterate reranked best-of-2 by the training judge
    (run_dir / "report.json").unlink()
    manifest = json.loads((run_dir / "manifest.json").read_text())["stages"]
    assert main(["rerank", str(run_dir), "eval.second_judge=null", "--n", "2"]) == 0
    out = capsys.readouterr().out
    assert f"final_vs_initial: {saved['final_vs_initial']:.3f}" in out and "pi_avg vs pi_3" in out
    reranked = json.loads((run_dir / "report.json").read_text())
    after = json.loads((run_dir / "manifest.json").read_text())["stages"]
    for stage in ("eval/average", "eval/samples_average", "eval/samples_3", "eval/heldout_pi_3"):
        assert after[stage]["finished_at"] == manifest[stage]["finished_at"], f"{stage} was redone"
    assert reranked["iterates"] == labels + ["pi_3_best_of_2"]
    assert np.allclose(np.asarray(reranked["win_rate_table"])[:5, :5], table)
    best = reranked["best_of_n"]
    assert best["n"] == 2 and best["uses_training_judge"] and best["of"] == "pi_3"
    assert reranked["per_iterate"][-1]["kl_to_initial"] is None
    markdown = (run_dir / "report.md").read_text()
    assert "Best-of-2" in markdown and "judge exploitation compounds" in markdown
    assert "may be judge-fitting" in markdown and "`eval.second_judge`" in markdown
    # another judge than the training one reranks: its own stage and label, and the report says so
    other = "eval.rerank_judge={kind: python, function: 'tests.recipes.verifiers:longer_wins'}"
    assert main(["rerank", str(run_dir), "eval.second_judge=null", other, "--n", "2"]) == 0
    by_other = json.loads((run_dir / "report.json").read_text())
    assert by_other["iterates"][-1].startswith("pi_3_best_of_2_by_python_")
    assert by_other["best_of_n"]["judge"] == "python" and not by_other["best_of_n"]["uses_training_judge"]
    assert "[reranked with the training judge]" not in capsys.readouterr().out
    assert "not the training judge" in (run_dir / "report.md").read_text()
    assert (json.loads((run_dir / "manifest.json").read_text())["stages"]["eval/samples_best_of_2"]
            == json.loads(json.dumps(after["eval/samples_best_of_2"])))  # the first reranking is kept
    # a rerank that fails (its judge cannot be imported) leaves the run's config as it was
    saved_config = (run_dir / "config.yaml").read_text()
    broken = "eval.rerank_judge={kind: python, function: 'tests.recipes.no_such_module:judge'}"
    assert main(["rerank", str(run_dir), "eval.second_judge=null", broken, "--n", "3"]) != 0
    assert (run_dir / "config.yaml").read_text() == saved_config
    with pytest.raises(SystemExit):
        main(["rerank", str(run_dir), "--n", "1"])
    assert main(["report", str(run_dir), "sppo.eta=3"]) == 2
    assert "may change only" in capsys.readouterr().err

    # `nash-jax average RUN_DIR` writes the average of chosen iterates; bad labels are named
    assert main(["average", str(run_dir), "--iterates", "pi_3", "pi_3", "--out", str(tmp_path / "avg")]) == 0
    assert_same_parameters(tmp_path / "avg", run_dir / "iter_2" / "policy", atol=2e-7)
    assert main(["average", str(run_dir), "--iterates", "pi_9"]) == 2
    assert "--iterates pi_9: not an iterate" in capsys.readouterr().err
    assert main(["average", str(tmp_path / "nowhere")]) == 2


def test_the_demo_improves_on_its_warm_start(tmp_path):
    """configs/demo.yaml as shipped, on the one CPU device `nash-jax run` sees (the README's figures):
    the last iterate beats π_0 under the oracle and is less exploitable."""
    result = run_cli(CONFIGS / "demo.yaml", tmp_path / "demo", one_device=True)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "demo" / "report.json").read_text())
    exploitability = [p["exploitability"] for p in report["per_iterate"]]
    average = report["average"]
    print(f"final_vs_initial {report['final_vs_initial']:.3f} (length-controlled "
          f"{report['final_vs_initial_length_controlled']:.3f}), exploitability {exploitability}, "
          f"average vs last {average['vs_last']:.3f}, saturation "
          f"{[e['mean_abs_advantage'] for e in report['per_iteration']]}")
    assert report["final_vs_initial"] > 0.55
    assert exploitability[-3] < exploitability[0]  # pi_3 (then the average, pi_avg)
    # the new fields: the oracle ignores length, so controlling for it changes little
    assert report["iterates"] == ["pi_0", "pi_1", "pi_2", "pi_3", "pi_avg"]
    assert report["final_vs_initial_length_controlled"] == pytest.approx(report["final_vs_initial"], abs=0.03)
    assert np.asarray(report["length_controlled_table"]).shape == (5, 5)
    assert average["of"] == ["pi_1", "pi_2", "pi_3"] and 0 < average["vs_last"] < 1
    assert average["exploitability"] == exploitability[-1]
    assert average["last_exploitability"] == exploitability[3]
    assert all(e["mean_abs_advantage"] > 0.05 for e in report["per_iteration"])  # not saturated
    assert report["saturated_iterations"] == [] and report["second_judge"] is None
    markdown = (tmp_path / "demo" / "report.md").read_text()
    assert "may be judge-fitting" in markdown and "Iterate average" in markdown
