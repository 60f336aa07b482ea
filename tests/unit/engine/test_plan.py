"""`nash-jax plan`: the compiled figures it reports are the step's own memory analysis, a config that
does not fit is refused naming what, and the presets' per-device bytes are what arithmetic says."""

import json
from pathlib import Path

import jax
import numpy as np
import pytest
import yaml

from nash_jax import cli, config as config_lib, parallel
from nash_jax.engine import planning
from nash_jax.engine import plan
from nash_jax.models import hf
from nash_jax.models.llama import Llama
from nash_jax.engine.plan import PLAN_STEPS
from nash_jax.train import init_train_state, make_optimizer, make_step
from nash_jax.train.steps import DEFAULT_LOGPROB_CHUNK

CONFIGS = Path(__file__).parents[3] / "configs"
TINY = {"model_type": "llama", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}


@pytest.fixture
def tiny_config(tmp_path):
    """A tiny SPPO config file whose model directory holds only config.json (no weights)."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY))
    values = {"recipe": "sppo", "model": {"path": str(model)},
              "data": {"max_prompt_tokens": 8}, "sampling": {"max_new_tokens": 8},
              "train": {"batch_size": 8, "micro_batches": 2,
                        "optimizer": {"name": "adamw", "learning_rate": 1e-3}},
              "mesh": {"data": 1, "fsdp": -1, "tensor": 1}}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


@pytest.mark.parametrize("mesh", [(1, 1, 1), (2, 2, 2)])
def test_compiled_figures_equal_the_memory_analysis_of_the_real_step(tiny_config, mesh):
    """The plan compiles on abstract arrays; here the step is built from a real model and state and
    compiled on real arrays: the memory analyses must agree exactly."""
    data, fsdp, tensor = mesh
    overrides = [f"mesh.data={data}", f"mesh.fsdp={fsdp}", f"mesh.tensor={tensor}"]
    config = config_lib.load_config(tiny_config, overrides)
    devices = data * fsdp * tensor
    result = planning.plan(config, devices=devices)
    assert result["compiled"] is not None

    inputs = planning.plan_inputs(config)
    llama = inputs.llama
    real_mesh = parallel.make_mesh(data, fsdp, tensor, devices=jax.devices()[:devices])
    tx, schedule = make_optimizer(inputs.optimizer, PLAN_STEPS)
    model_def, state, shardings = init_train_state(Llama(llama, rngs=__import__("flax").nnx.Rngs(0)),
                                                   tx, mesh=real_mesh)
    step = make_step("sppo", model_def, tx, schedule, shardings, real_mesh, micro_batches=2,
                     eta=config.sppo.eta)
    rng = np.random.default_rng(0)
    batch = {"tokens": rng.integers(0, 64, (8, 16)), "segment_ids": np.ones((8, 16), np.int32),
             "loss_mask": np.ones((8, 16), bool), "anchor_logp": np.zeros(8, np.float32),
             "win_rate": np.full(8, 0.5, np.float32)}
    expected = plan.compiled_memory(step.jitted.lower(state, step.place(batch)).compile())
    assert result["compiled"] == expected
    assert result["total_bytes"] == expected["total_bytes"] > 0
    assert result["length"] == 16 and result["mesh"] == {"data": data, "fsdp": fsdp, "tensor": tensor}


def test_eight_fsdp_devices_each_hold_about_an_eighth_of_the_steps_activations(tmp_path):
    """SmolLM2's layout (tied embeddings, 9 heads, 3 KV heads, a wide MLP) at 64 rows: the step's
    scratch memory a device on 8 fsdp devices is under a quarter of one device's. Before the embedded
    rows were constrained to the batch axes (parallel.rows_sharded), XLA contracted the MLP over the
    fsdp-sharded hidden size and kept every layer's MLP activations whole on every device: 397 MiB
    against one device's 893 (113 MiB with the constraint)."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(
        {"model_type": "llama", "vocab_size": 512, "hidden_size": 144, "intermediate_size": 384,
         "num_hidden_layers": 4, "num_attention_heads": 9, "num_key_value_heads": 3,
         "tie_word_embeddings": True}))
    values = {"recipe": "sppo", "model": {"path": str(model)}, "data": {"max_prompt_tokens": 64},
              "sampling": {"max_new_tokens": 64},
              "train": {"batch_size": 64, "optimizer": {"name": "adamw", "learning_rate": 1e-3}}}
    path = tmp_path / "smol.yaml"
    path.write_text(yaml.safe_dump(values))
    config = config_lib.load_config(path)
    temp = {n: planning.plan(config, devices=n)["compiled"]["temp"] for n in (1, 8)}
    print(f"step scratch a device: 1 device {temp[1] / 2**20:.1f} MiB, "
          f"8 devices {temp[8] / 2**20:.1f} MiB")
    assert temp[8] < temp[1] / 4, temp


def test_the_analytic_state_bytes_are_the_placed_state_bytes(tiny_config):
    """Parameters and optimiser bytes per device from partition specs equal the shards that
    init_train_state actually places (fsdp 4 × tensor 2)."""
    config = config_lib.load_config(tiny_config, ["mesh.fsdp=4", "mesh.tensor=2"])
    result = planning.plan(config, devices=8, compile_step=False)
    inputs = planning.plan_inputs(config)
    llama = inputs.llama
    tx, _ = make_optimizer(inputs.optimizer, PLAN_STEPS)
    mesh = parallel.make_mesh(1, 4, 2, devices=jax.devices()[:8])
    _, state, _ = init_train_state(Llama(llama, rngs=__import__("flax").nnx.Rngs(0)), tx, mesh=mesh)
    device = jax.devices()[0]

    def on_device(tree):
        return sum(s.data.nbytes for leaf in jax.tree.leaves(tree)
                   for s in leaf.addressable_shards if s.device == device)

    assert result["parameters_bytes"] == on_device(state.params)
    assert result["optimizer_bytes"] == on_device(state.opt_state)


def test_the_plan_compiles_the_step_at_the_runs_sampling_temperature(tiny_config, monkeypatch):
    """A tempered objective's step divides its logits by the sampling temperature: the plan compiles
    the step the run will build, so it passes the run's temperature too."""
    import nash_jax.train

    built, real = {}, nash_jax.train.make_step
    monkeypatch.setattr(nash_jax.train, "make_step",
                        lambda *args, **kwargs: built.update(kwargs) or real(*args, **kwargs))
    planning.plan(config_lib.load_config(tiny_config, ["sampling.temperature=0.7"]), devices=1)
    assert built["sampling_temperature"] == 0.7


def test_a_config_that_does_not_fit_is_refused_naming_what(tiny_config, capsys):
    status = cli.main(["plan", str(tiny_config), "--device-memory", "20KiB", "--devices", "1"])
    err = capsys.readouterr().err
    assert status == 2
    assert "does not fit: the compiled step needs" in err and "over the 20.0 KiB of device memory" in err
    result = planning.plan(config_lib.load_config(tiny_config), devices=1, compile_step=False)
    terms = {k: result[f"{k}_bytes"] for k in plan._TERMS}
    assert f"the largest term is {max(terms, key=terms.get)}" in err
    too_big = [k for k, v in terms.items() if v > 20 * 1024]
    assert too_big and f"{', '.join(too_big)} alone exceed it" in err
    assert "mesh {'data': 1" in err


def test_plan_prints_one_json_line_and_fits_a_large_memory(tiny_config, capsys):
    assert cli.main(["plan", str(tiny_config), "--device-memory", "1GiB", "--devices", "1",
                     "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert result["fits"] is True and result["device_memory_bytes"] == 2**30
    assert result["compiled"]["total_bytes"] == result["total_bytes"]


def test_the_ssr_demo_plans_on_one_device_within_two_gib(capsys):
    """The bug-injection recipe's step, sized from its built-in model's warm-start section."""
    config = Path(__file__).parents[3] / "configs" / "ssr_demo.yaml"
    assert cli.main(["plan", str(config), "--device-memory", "2GiB", "--devices", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["fits"] is True and result["total_bytes"] < 2**31, result


def test_a_run_that_cannot_fit_stops_before_loading_weights(tiny_config):
    config = config_lib.load_config(tiny_config, ["mesh.device_memory=20KiB", "mesh.fsdp=1"])
    mesh = parallel.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    with pytest.raises(ValueError, match="cannot fit its devices, before any weights are read.*"
                                         "largest term is optimizer"):
        planning.check_before_loading(config, mesh)
    roomy = config_lib.load_config(tiny_config, ["mesh.device_memory=1GiB", "mesh.fsdp=1"])
    assert planning.check_before_loading(roomy, mesh)["fits"]
    unknown = config_lib.load_config(tiny_config, ["mesh.fsdp=1"])
    assert planning.check_before_loading(unknown, mesh) is None  # CPU devices report no memory


def test_device_memory_sizes_parse_and_bad_ones_are_named():
    assert config_lib.parse_bytes("80GiB") == 80 * 2**30
    assert config_lib.parse_bytes("141GB") == 141 * 10**9
    with pytest.raises(ValueError, match="mesh.device_memory='80 parsecs'"):
        config_lib.parse_bytes("80 parsecs", "mesh.device_memory")


# ---------------------------------------------------------------------------------------------------
# the presets, analytically (abstract shapes: no weights, no compilation)

def _preset_plan(name, shape, devices, memory, overrides=()):
    config = config_lib.load_config(CONFIGS / name, list(overrides))
    return planning.plan(config, devices=devices, device_memory=config_lib.parse_bytes(memory),
                         shape=shape, compile_step=False)


def _parameter_count(shape):
    """(all parameters, the norm scales among them: replicated, the rest divides by 8)."""
    llama = hf.config_from_hf(plan.PRESETS[shape])
    e, i, v, layers = llama.hidden_size, llama.intermediate_size, llama.vocab_size, llama.num_layers
    attn = e * (llama.num_heads + 2 * llama.num_kv_heads) * llama.head_dim + \
        llama.num_heads * llama.head_dim * e
    norms = (2 * layers + 1) * e
    return layers * (attn + 3 * e * i) + 2 * v * e + norms, norms


@pytest.mark.parametrize("name,shape,count", [("sppo_llama3_8b.yaml", "llama3_8b", 8.03e9),
                                              ("sppo_mistral7b.yaml", "mistral_7b", 7.24e9)])
def test_presets_on_eight_80gb_gpus_with_fsdp_fit(name, shape, count):
    """fp32 parameters, RMSprop (one fp32 slot), 8 micro-batches (an fp32 accumulator besides the
    gradient), FSDP over 8: every term is the model's bytes / 8."""
    p, norms = _parameter_count(shape)
    assert abs(p - count) / count < 0.01
    result = _preset_plan(name, shape, 8, "80GB")
    assert result["parameters_count"] == p
    per_device = 4 * ((p - norms) // 8 + norms)
    assert result["parameters_bytes"] == per_device
    assert per_device <= result["optimizer_bytes"] <= per_device + 64  # RMSprop's slot + counters
    assert result["gradients_bytes"] == 2 * per_device
    assert result["fits"] and plan.shortfall(result) is None


def test_llama3_8b_in_fp32_on_one_141gb_gpu_does_not_fit_even_with_remat_and_bf16_does():
    """fp32 parameters 32 GB + AdamW's two fp32 moments 64 GB + gradient and accumulator 64 GB =
    160 GB > 141 GB before any activation. RMSprop (one slot) with 64 micro-batches of one row: 32 +
    32 + 64 + the update's new parameters 32 = 160 GB, still over. bf16 parameters and slots (the
    accumulator stays fp32): 16 + 16 + 16 + 32 + 16 GB + activations: fits."""
    p, _ = _parameter_count("llama3_8b")
    adamw = _preset_plan("sppo_llama3_8b.yaml", "llama3_8b", 1, "141GB",
                         ["train.optimizer.name=adamw"])
    assert adamw["optimizer_bytes"] >= 2 * 4 * p
    assert not adamw["fits"]
    problem = plan.shortfall(adamw)
    assert "largest term is optimizer" in problem and "alone exceed" not in problem
    rmsprop = _preset_plan("sppo_llama3_8b.yaml", "llama3_8b", 1, "141GB", ["train.micro_batches=64"])
    assert rmsprop["remat"] == "full" and rmsprop["rows_per_device"] == 1
    assert not rmsprop["fits"]
    assert 4 * p * 5 <= rmsprop["total_bytes"] - rmsprop["activations_bytes"] <= 4 * p * 5 + 2**20
    bf16 = _preset_plan("sppo_llama3_8b.yaml", "llama3_8b", 1, "141GB",
                        ["train.micro_batches=64", "model.param_dtype=bfloat16"])
    assert bf16["parameters_bytes"] == 2 * p
    assert bf16["fits"], plan.table(bf16)


def test_default_chunk_is_what_the_config_defaults_to_and_negative_chunks_are_refused(tiny_config):
    assert config_lib.TrainConfig().logprob_chunk == DEFAULT_LOGPROB_CHUNK
    with pytest.raises(ValueError, match="train.logprob_chunk=-1; expected a value ≥ 0"):
        config_lib.load_config(tiny_config, ["train.logprob_chunk=-1"])
    with pytest.raises(ValueError, match="mesh.device_memory='lots'"):
        config_lib.load_config(tiny_config, ["mesh.device_memory=lots"])


# ---------------------------------------------------------------------------------------------------
# every shipped config, on 1 and 8 devices

SHAPES = {"sppo_llama3_8b.yaml": "llama3_8b", "sppo_mistral7b.yaml": "mistral_7b"}


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_every_shipped_config_plans_on_one_and_eight_devices_or_says_why_not(name, request):
    """What `run` checks before any work (the recipe's batch sizes over the mesh) `plan` checks too,
    in the same words; a config that cannot run on 8 devices says so in a comment."""
    text = (CONFIGS / name).read_text()
    overrides = []
    if "smollm2" in name:
        overrides.append(f"model.path={request.getfixturevalue('smollm2_dir')}")
    config = config_lib.load_config(CONFIGS / name, overrides)
    for devices in (1, 8):
        try:
            result = planning.plan(config, devices=devices, shape=SHAPES.get(name), compile_step=False)
        except ValueError as refused:
            assert devices == 8 and "does not split into train.micro_batches" in str(refused)
            assert "on 8 it is refused" in text, f"{name} does not say why it cannot run on 8 devices"
            with pytest.raises(ValueError, match="does not split into train.micro_batches"):
                parallel.check_batch_sizes(planning.engine.get(config.recipe).batch_sizes(config),
                                           config.train.micro_batches, 8)
            continue
        assert result["devices"] == devices and result["analytic_total_bytes"] > 0
