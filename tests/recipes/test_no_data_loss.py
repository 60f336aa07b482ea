"""Issue 27's findings, each a test: nash_jax never deletes or overwrites what it did not create (run
directories, --out targets), refuses commands that do not apply to a run, validates model configs and
the paths a run needs before touching its directory, and logs each step's metrics once."""

import os
from pathlib import Path

import pytest

from nash_jax import runs
from nash_jax.runs import RunDir

REPO = Path(__file__).parents[2]


def user_folder(root):
    """A folder of the user's with other programs' temporaries at several depths."""
    for relative in (".a.tmp", "sub/.b.tmp", "sub/deeper/.c.tmp/inner.txt", "notes.txt"):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text("mine")
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_a_users_folder_is_refused_as_run_directory_and_its_temporaries_survive(tmp_path):
    before = user_folder(tmp_path / "home")
    with pytest.raises(ValueError, match=r"run directory .*home holds files \(.a.tmp, notes.txt, sub\) "
                                         r"but no manifest.json, so nash_jax did not make it"):
        RunDir(tmp_path / "home").acquire()
    assert sorted(str(p.relative_to(tmp_path / "home")) for p in (tmp_path / "home").rglob("*")) == before


def test_a_new_run_directory_gets_its_manifest_at_once_and_is_accepted_again(tmp_path):
    (tmp_path / "empty").mkdir()
    for path in (tmp_path / "new", tmp_path / "empty"):
        run = RunDir(path)
        run.acquire()
        run.close()
        assert (path / "manifest.json").is_file()
        RunDir(path).acquire()  # nash_jax's now: resumed, not refused


def test_the_sweep_removes_only_nash_jax_temporaries_and_never_follows_links_out(tmp_path):
    RunDir(tmp_path / "run").finish("init", [])
    outside = tmp_path / "outside"
    (outside / ".w.nash-jax-abc.tmp").mkdir(parents=True)  # named like ours, but outside the run
    (outside / ".w.nash-jax-abc.tmp" / "keep.txt").write_text("x")
    (tmp_path / "run" / "linked").symlink_to(outside)
    (tmp_path / "run" / ".l.nash-jax-def.tmp").symlink_to(outside)  # a link of our shape: unlinked
    (tmp_path / "run" / ".theirs.tmp").write_text("x")
    ours = tmp_path / "run" / "iter_0" / ".samples.parquet.nash-jax-q9z.tmp"
    ours.parent.mkdir()
    ours.write_text("x")
    assert runs.remove_stale_temporaries(tmp_path / "run") == 2
    assert not ours.exists() and not (tmp_path / "run" / ".l.nash-jax-def.tmp").is_symlink()
    assert (outside / ".w.nash-jax-abc.tmp" / "keep.txt").is_file()
    assert (tmp_path / "run" / ".theirs.tmp").is_file()


def test_temporary_names_carry_the_nash_jax_marker(tmp_path):
    seen = []
    runs.write_atomically(tmp_path / "a.txt", lambda tmp: seen.append(Path(tmp).name)
                          or Path(tmp).write_text("a"))
    runs.write_dir_atomically(tmp_path / "d", lambda tmp: seen.append(Path(tmp).name))
    assert all(runs.is_own_temporary(name) for name in seen), seen
    assert not runs.is_own_temporary(".a.txt.abc.tmp")


def test_write_dir_atomically_replaces_only_a_directory_it_wrote(tmp_path):
    def write(tmp):
        (Path(tmp) / "config.json").write_text("{}")

    (tmp_path / "users").mkdir()
    (tmp_path / "users" / "thesis.tex").write_text("mine")
    (tmp_path / "file").write_text("mine")
    for target in (tmp_path / "users", tmp_path / "file"):
        with pytest.raises(ValueError, match=r"output .* is there and it is not a directory nash_jax "
                                             r"wrote .*refusing to replace it"):
            runs.write_dir_atomically(target, write)
    assert (tmp_path / "users" / "thesis.tex").read_text() == "mine"
    assert (tmp_path / "file").read_text() == "mine"
    (tmp_path / "empty").mkdir()
    for target in (tmp_path / "new", tmp_path / "empty", tmp_path / "new"):  # the last: a redo
        runs.write_dir_atomically(target, write)
        assert sorted(os.listdir(target)) == [".nash-jax", "config.json"]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_an_output_path_is_new_or_refused_and_overwrite_replaces_only_nash_jax_output(tmp_path):
    from nash_jax.runs.files import check_output

    (tmp_path / "users").mkdir()
    (tmp_path / "users" / "a.txt").write_text("mine")
    (tmp_path / "file").write_text("mine")
    runs.write_dir_atomically(tmp_path / "ours", lambda tmp: None)
    check_output(tmp_path / "new", "--out")
    for target in (tmp_path / "users", tmp_path / "file"):
        with pytest.raises(ValueError, match=r"--out .*: a (directory|file) is there and it is not a "
                                             r"directory nash_jax wrote"):
            check_output(target, "--out", overwrite=True)
    with pytest.raises(ValueError, match=r"--out .*ours: nash_jax wrote this directory before; pass "
                                         r"--overwrite to replace it"):
        check_output(tmp_path / "ours", "--out")
    check_output(tmp_path / "ours", "--out", overwrite=True)


def saved_run(tmp_path, config_file, overrides=()):
    """A run directory as `nash-jax run` leaves it before its first stage: config.yaml, manifest."""
    from nash_jax.config import load_config, to_yaml

    run_dir = tmp_path / "run"
    config = load_config(config_file, [f"run_dir={run_dir}", *overrides])
    RunDir(run_dir).acquire()
    runs.write_text_atomically(run_dir / "config.yaml", to_yaml(config))
    return run_dir


def test_average_onto_an_existing_folder_or_file_is_refused_before_loading(tmp_path, capsys):
    from nash_jax.cli import main

    run_dir = saved_run(tmp_path, REPO / "configs" / "demo.yaml")
    (run_dir / "report.json").write_text('{"iterate_dirs": {"pi_0": "a", "pi_1": "b"}}')
    (tmp_path / "users").mkdir()
    (tmp_path / "users" / "a.txt").write_text("mine")
    (tmp_path / "file").write_text("mine")
    for target in ("users", "file"):
        assert main(["average", str(run_dir), "--out", str(tmp_path / target), "--overwrite"]) == 2
        assert "it is not a directory nash_jax wrote (one holding .nash-jax); refusing" in capsys.readouterr().err
    assert (tmp_path / "users" / "a.txt").read_text() == "mine" == (tmp_path / "file").read_text()


@pytest.mark.parametrize("command", [["rerank", "--n", "4"], ["average"]])
def test_a_command_that_does_not_apply_to_the_recipe_is_refused_and_touches_nothing(
        tmp_path, capsys, monkeypatch, command):
    from nash_jax import engine
    from nash_jax.cli import main

    run_dir = saved_run(tmp_path, REPO / "configs" / "kuhn_demo.yaml")
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    monkeypatch.setattr(engine, "run", lambda config: pytest.fail("the recipe ran"))
    assert main([command[0], str(run_dir), *command[1:]]) == 2
    err = capsys.readouterr().err
    assert f"nash-jax {command[0]} does not apply to a game_selfplay run (its report reads no eval." in err
    # the shipped recipes it applies to (a recipe that another test registered in this process may follow)
    assert "it applies to runs of ['grpo', 'nash_md', 'sppo'" in err and len(err.strip().splitlines()) == 1, err
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before


def test_report_options_the_recipe_ignores_are_refused(tmp_path, capsys):
    from nash_jax.cli import main

    run_dir = saved_run(tmp_path, REPO / "configs" / "proposer_solver_demo.yaml")
    config = (run_dir / "config.yaml").read_text()
    assert main(["report", str(run_dir), "eval.average_iterates=true"]) == 2
    assert ("eval.average_iterates=True: recipe proposer_solver does not read it"
            in capsys.readouterr().err)
    assert (run_dir / "config.yaml").read_text() == config


@pytest.mark.parametrize("argv, bounds", [(["rerank", "run", "--n", "100000000"], (2, 64)),
                                          (["game", "g.yaml", "--steps", "100001"], (1, 100000))])
def test_rerank_n_and_game_steps_are_bounded_as_help_says(argv, bounds, capsys):
    from nash_jax.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)
    assert f"expected an integer in [{bounds[0]}, {bounds[1]}]" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser().parse_args([argv[0], "--help"])
    assert f"{bounds[0]} to {bounds[1]}" in capsys.readouterr().out


def test_game_plot_replaces_only_its_own_png(tmp_path, capsys):
    from nash_jax.cli import main

    four = REPO / "configs" / "games" / "four_responses.yaml"
    png = tmp_path / "four.png"
    png.write_bytes(b"\x89PNG not ours")
    assert main(["game", str(four), "--steps", "10", "--plot", str(png), "--overwrite"]) == 2
    assert "a file is there and it is not a file nash_jax wrote" in capsys.readouterr().err
    png.unlink()
    assert main(["game", str(four), "--steps", "10", "--plot", str(png)]) == 0
    assert main(["game", str(four), "--steps", "10", "--plot", str(png)]) == 2
    assert "pass --overwrite to replace it" in capsys.readouterr().err
    assert main(["game", str(four), "--steps", "10", "--plot", str(png), "--overwrite"]) == 0


def model_config(hf_model_dir, **changes):
    import json

    values = json.loads((hf_model_dir("llama_gqa")[0] / "config.json").read_text())
    return {k: v for k, v in {**values, **changes}.items() if v != "drop"}


@pytest.mark.parametrize("changes, message", [
    ({"num_hidden_layers": -2}, r"num_hidden_layers: -2; expected a positive integer"),
    ({"hidden_size": 0}, r"hidden_size: 0; expected a positive integer"),
    ({"vocab_size": "101"}, r"vocab_size: '101'; expected a positive integer"),
    ({"intermediate_size": "drop"}, r"intermediate_size: 'missing'; expected a positive integer"),
    ({"head_dim": "drop", "hidden_size": 30}, r"num_attention_heads: 4 does not divide hidden_size: 30"),
    ({"num_key_value_heads": 3}, r"num_key_value_heads: 3 does not divide num_attention_heads: 4"),
    ({"rms_norm_eps": -1e-6}, r"rms_norm_eps: -1e-06; expected a positive number"),
])
def test_bad_llama_configs_are_one_line_naming_the_file_and_key(hf_model_dir, changes, message):
    from nash_jax.models import hf

    with pytest.raises(ValueError, match=r"^m/config.json: " + message) as err:
        hf.config_from_hf(model_config(hf_model_dir, **changes), source="m/config.json")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("changes, message", [
    ({"num_hidden_layers": -2}, r"num_hidden_layers: -2; expected a positive integer"),
    ({"num_attention_heads": 5}, r"num_attention_heads: 5 does not divide hidden_size: 32"),
])
def test_bad_deberta_configs_are_one_line_naming_the_file_and_key(changes, message):
    from nash_jax.models import deberta

    values = dict(model_type="deberta-v2", vocab_size=50, hidden_size=32, num_hidden_layers=2,
                  num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                  relative_attention=True, share_att_key=True, position_biased_input=False,
                  type_vocab_size=0, norm_rel_ebd="layer_norm", pos_att_type=["p2c", "c2p"],
                  position_buckets=16, max_relative_positions=-1)
    with pytest.raises(ValueError, match=r"^p/config.json: " + message):
        deberta.config_from_hf({**values, **changes}, source="p/config.json")


@pytest.mark.parametrize("shard", ["../outside.safetensors", "/abs/outside.safetensors"])
def test_a_shard_index_naming_files_outside_the_model_folder_is_refused(hf_model_dir, tmp_path,
                                                                        shard):
    import json
    import shutil

    from nash_jax.models import hf

    source = hf_model_dir("llama_gqa")[0]
    (tmp_path / "model").mkdir()
    shutil.copy(source / "config.json", tmp_path / "model" / "config.json")
    outside = tmp_path / "outside.safetensors" if shard.startswith("..") else Path(shard)
    if shard.startswith(".."):
        shutil.copy(source / "model.safetensors", outside)  # there to be read, were it followed
    with hf.loading.open_safetensors(source / "model.safetensors") as f:
        weight_map = {key: shard for key in f.keys()}
    (tmp_path / "model" / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(ValueError, match=r"model.safetensors.index.json: weight_map\['.*'\] = "
                                         rf"'{shard}'; expected the name of a shard file inside"):
        hf.load_pretrained(tmp_path / "model")


@pytest.mark.parametrize("case", ["corpus", "tokenizer", "architecture"])
def test_missing_inputs_and_the_architecture_stop_a_run_before_its_directory_exists(
        tmp_path, hf_model_dir, case):
    import json
    import shutil

    from nash_jax import engine
    from nash_jax.config import load_config
    from tests.tiny_hf import write_tokenizer

    model = hf_model_dir("llama_gqa")[0]
    if case == "architecture":
        shutil.copytree(model, tmp_path / "gpt2")
        values = json.loads((model / "config.json").read_text())
        (tmp_path / "gpt2" / "config.json").write_text(json.dumps({**values, "model_type": "gpt2"}))
        write_tokenizer(tmp_path / "gpt2")
    config_file, override, error, message = {
        "corpus": ("proposer_solver_document.yaml", "proposer_solver.task.corpus=/nowhere/docs.jsonl",
                   FileNotFoundError, r"document corpus /nowhere/docs.jsonl does not exist"),
        "tokenizer": ("demo.yaml", f"model.path={model}", FileNotFoundError,
                      r"model.path=.*: has no tokenizer files \(tokenizer.json, .*set model.tokenizer"),
        "architecture": ("demo.yaml", f"model.path={tmp_path / 'gpt2'}", ValueError,
                         r"model_type='gpt2' \(architectures=\['LlamaForCausalLM'\]\) is not supported"),
    }[case]
    config = load_config(REPO / "configs" / config_file, [f"run_dir={tmp_path / 'run'}", override])
    with pytest.raises(error, match=message):
        engine.run(config)
    assert not (tmp_path / "run").exists()


def test_a_resumed_training_loop_logs_each_step_once(tmp_path):
    import json

    import jax.numpy as jnp

    from nash_jax.engine.loop import train_loop

    def work(fail_at=None):
        def step_work(step, state, extra, item):
            if step + 1 == fail_at:
                raise RuntimeError("killed")
            return {"w": state["w"] + step}, extra, {"loss": jnp.float32(step)}
        return step_work

    (tmp_path / "run").mkdir()
    run = RunDir(tmp_path / "run")
    run.log_metrics("eval", 0, {"score": 1.0})
    with pytest.raises(RuntimeError, match="killed"):  # after the checkpoint of step 4
        train_loop(run, "s", state={"w": jnp.zeros(2)}, total=8, work=work(fail_at=7),
                   checkpoint_every=4)
    with open(tmp_path / "run" / "metrics.jsonl", "a") as f:
        f.write('{"stage": "s", "st')  # a line the kill cut short
    train_loop(RunDir(tmp_path / "run"), "s", state={"w": jnp.zeros(2)}, total=8, work=work(),
               checkpoint_every=4)
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    keys = [(r["stage"], r["step"]) for r in map(json.loads, lines)]
    assert keys == [("eval", 0)] + [("s", step) for step in range(1, 9)], keys


def test_an_unknown_openspiel_game_is_one_short_line(capfd):
    from nash_jax.tasks.games.games import TextGame

    with pytest.raises(ValueError) as err:
        TextGame("kuhn_pokr")
    assert "game 'kuhn_pokr': not an OpenSpiel game; did you mean ['kuhn_poker'" in str(err.value)
    assert "\n" not in str(err.value) and len(str(err.value)) < 200, str(err.value)
    assert capfd.readouterr().err == ""  # and OpenSpiel printed no list of its games


@pytest.mark.parametrize("reader", ["prompts", "judge requests", "corpus"])
def test_a_file_that_is_not_utf8_is_named_in_its_error(tmp_path, reader):
    from nash_jax import data
    from nash_jax.cli import read_judge_requests
    from nash_jax.tasks.documents import documents

    path = tmp_path / "latin1.jsonl"
    column = {"prompts": "prompt", "judge requests": "prompt", "corpus": "text"}[reader]
    path.write_bytes(f'{{"{column}": "caf'.encode() + b'\xe9", "candidates": ["a"]}\n')
    read = {"prompts": data.load_prompt_texts, "judge requests": read_judge_requests,
            "corpus": documents.load_corpus}[reader]
    with pytest.raises(ValueError, match=r"latin1.jsonl is not UTF-8 text \(.*\); expected a UTF-8 file"):
        read(path)


def test_a_run_an_earlier_version_left_before_its_first_stage_resumes_and_is_swept(tmp_path):
    """The earlier version wrote no manifest before the first finished stage, marked no exported
    directory and named temporaries without the marker: its runs still resume, redo their exports
    and lose their leftovers."""
    run_dir = tmp_path / "runs" / "demo-20261130-101010"
    (run_dir / "init" / "checkpoints").mkdir(parents=True)
    (run_dir / ".lock").write_text("")
    (run_dir / "config.yaml").write_text(f"recipe: sppo\nmodel: {{path: builtin:synthetic}}\nrun_dir: {run_dir}\n")
    (run_dir / "iter_0" / "policy").mkdir(parents=True)  # exported, unmarked, its stage not finished
    (run_dir / "iter_0" / "policy" / "config.json").write_text("{}")
    (run_dir / "iter_0" / ".samples.parquet.ab3_x9kq.tmp").write_text("half")
    run = RunDir(run_dir)
    run.acquire()
    assert (run_dir / "manifest.json").is_file()
    assert not (run_dir / "iter_0" / ".samples.parquet.ab3_x9kq.tmp").exists()
    with pytest.raises(ValueError, match="not a directory nash_jax wrote"):  # a path the user named
        runs.write_dir_atomically(run_dir / "iter_0" / "policy", lambda tmp: None)
    runs.write_dir_atomically(run_dir / "iter_0" / "policy",
                              lambda tmp: (Path(tmp) / "config.json").write_text('{"new": 1}'), in_run=True)
    assert (run_dir / "iter_0" / "policy" / "config.json").read_text() == '{"new": 1}'
    run.close()
    (tmp_path / "other").mkdir()  # a lock and a config.yaml that is not a run's: still refused
    (tmp_path / "other" / ".lock").write_text("")
    (tmp_path / "other" / "config.yaml").write_text("theme: dark\n")
    with pytest.raises(ValueError, match="no manifest.json"):
        RunDir(tmp_path / "other").acquire()
