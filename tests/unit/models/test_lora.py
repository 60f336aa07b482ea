"""LoRA adapters (models/lora.py) against PEFT's LoraModel over transformers' decoders: logits and the
adapters' gradients, in fp32, on tiny random Llama, Qwen and Gemma configs, with nonzero A and B; the
PEFT adapter directory and the merged export read back by PEFT and transformers."""

import copy

import jax
import jax.numpy as jnp
import numpy as np
import peft
import pytest
import torch
from flax import nnx

from nash_jax.config import LoraConfig, ModelConfig
from nash_jax.engine import policy_files
from nash_jax.models import (
    load_pretrained,
    lora,
    peft_files,
    quantised,
    save_pretrained,
)
from tests.tiny_hf import torch_logits
from tests.unit.models.test_gemma import gemma_dir  # noqa: F401  (a fixture)

TOL = 1e-4
VOCAB = 101
SECTION = LoraConfig(rank=4, alpha=8.0)
VARIANTS = ["llama_gqa", "llama_biases", "qwen2", "qwen3", "gemma2", "gemma3"]


def model_dir(variant, request):
    fixture = request.getfixturevalue("gemma_dir" if variant.startswith("gemma") else "hf_model_dir")
    return fixture(variant)


def adapted(path, section=SECTION, seed=0):
    """Our model with adapters whose B is drawn at random too (so that a wrong B could show)."""
    model = lora.add_adapters(load_pretrained(path), section, seed=seed)
    state = peft_files.adapter_state(model)
    key = jax.random.PRNGKey(seed + 1)
    for i, (_, variable) in enumerate(nnx.to_flat_state(state)):
        value = variable.get_value()
        if not np.any(np.asarray(value)):
            variable.set_value(0.2 * jax.random.normal(jax.random.fold_in(key, i), value.shape))
    nnx.update(model, state)
    return model


def peft_twin(torch_model, model, section=SECTION):
    """PEFT's LoraModel over a copy of the torch model, holding our adapters' values."""
    config = peft.LoraConfig(**{k: v for k, v in peft_files.peft_config(section).items()
                                if k not in ("peft_type", "base_model_name_or_path", "inference_mode",
                                             "use_dora")})
    twin = peft.get_peft_model(copy.deepcopy(torch_model), config)
    tensors = {k: torch.as_tensor(v) for k, v in peft_files.adapter_tensors(model).items()}
    result = peft.set_peft_model_state_dict(twin, tensors)
    assert not result.unexpected_keys, result.unexpected_keys
    return twin.eval()


def loss_weights(shape):
    return np.random.default_rng(7).normal(size=shape).astype(np.float32)


def our_logits_and_grads(model, tokens):
    graphdef, adapters, rest = nnx.split(model, nnx.LoRAParam, ...)
    weights = jnp.asarray(loss_weights((*tokens.shape, VOCAB)))

    def loss(adapters):
        logits, _ = nnx.merge(graphdef, adapters, rest)(jnp.asarray(tokens))
        return jnp.mean(logits * weights), logits

    (_, logits), grads = jax.value_and_grad(loss, has_aux=True)(adapters)
    return np.asarray(logits), peft_files.adapter_tensors(model, grads)


def peft_logits_and_grads(twin, tokens):
    logits = twin(torch.as_tensor(tokens)).logits.float()
    (logits * torch.as_tensor(loss_weights(logits.shape))).mean().backward()
    grads = {k: p.grad.numpy() for k, p in twin.named_parameters() if p.grad is not None}
    return logits.detach().numpy(), grads


@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_and_adapter_gradients_match_peft(variant, request):
    path, torch_model = model_dir(variant, request)
    model = adapted(path)
    tokens = np.random.default_rng(1).integers(0, VOCAB, (2, 11))
    ours, our_grads = our_logits_and_grads(model, tokens)
    theirs, their_grads = peft_logits_and_grads(peft_twin(torch_model, model), tokens)
    logit_diff = float(np.max(np.abs(ours - theirs)))
    base_diff = float(np.max(np.abs(ours - torch_logits(torch_model, tokens))))
    grad_diff, scale = 0.0, 0.0
    for key, grad in our_grads.items():
        torch_key = key.replace(".weight", ".default.weight")
        grad_diff = max(grad_diff, float(np.max(np.abs(grad - their_grads[torch_key]))))
        scale = max(scale, float(np.max(np.abs(grad))))
    print(f"{variant}: max |logits - peft| = {logit_diff:.2e} (adapters move them by {base_diff:.2e}); "
          f"max |grad - peft| = {grad_diff:.2e} (grads up to {scale:.2e})")
    assert len(our_grads) == len(their_grads) == 2 * 7 * model.config.num_layers
    assert base_diff > 100 * TOL, "the adapters must change the logits for the test to mean anything"
    assert logit_diff <= TOL, logit_diff
    assert grad_diff <= TOL, grad_diff


def our_logits(model, tokens):
    return np.asarray(model(jnp.asarray(tokens))[0])


@pytest.mark.parametrize("variant", ["qwen2", "gemma3"])
def test_adapter_directory_loads_in_peft_and_merged_export_in_transformers(variant, request, tmp_path):
    path, torch_model = model_dir(variant, request)
    model = adapted(path)
    tokens = np.random.default_rng(2).integers(0, VOCAB, (2, 9))
    ours = our_logits(model, tokens)
    peft_files.save_adapter(model, tmp_path / "adapter", SECTION, base_name=path)
    loaded = peft.PeftModel.from_pretrained(copy.deepcopy(torch_model), tmp_path / "adapter").eval()
    adapter_diff = float(np.max(np.abs(torch_logits(loaded, tokens) - ours)))
    save_pretrained(lora.merge_adapters(model), tmp_path / "merged")
    merged = type(torch_model).from_pretrained(tmp_path / "merged").eval()
    merged_diff = float(np.max(np.abs(torch_logits(merged, tokens) - ours)))
    print(f"{variant}: PEFT over the base {adapter_diff:.2e}; merged export in transformers "
          f"{merged_diff:.2e}")
    assert adapter_diff <= TOL and merged_diff <= TOL, (adapter_diff, merged_diff)


def test_imported_adapter_gives_the_same_model_and_a_foreign_one_is_refused(request, tmp_path):
    path, _ = model_dir("qwen3", request)
    model = adapted(path)
    peft_files.save_adapter(model, tmp_path / "adapter", SECTION)
    fresh = lora.add_adapters(load_pretrained(path), SECTION, seed=5)
    peft_files.load_adapter(fresh, tmp_path / "adapter", SECTION)
    tokens = np.random.default_rng(3).integers(0, VOCAB, (1, 7))
    assert np.max(np.abs(our_logits(fresh, tokens) - our_logits(model, tokens))) == 0.0

    gemma, _ = model_dir("gemma3", request)  # four layers, another MLP width
    other = lora.add_adapters(load_pretrained(gemma), SECTION)
    with pytest.raises(ValueError, match=r"does not fit the model .*another base") as err:
        peft_files.load_adapter(other, tmp_path / "adapter", SECTION)
    assert "\n" not in str(err.value)
    # and a run config naming it over that base is refused from config.json alone, before any run
    section = LoraConfig(rank=4, alpha=8.0, adapter=str(tmp_path / "adapter"))
    with pytest.raises(ValueError, match=r"model\.lora\.adapter=.* does not fit the model"):
        policy_files.check_adapter(ModelConfig(path=str(gemma), lora=section))
    policy_files.check_adapter(ModelConfig(path=str(path), lora=section))  # its own base: fine
    with pytest.raises(ValueError, match=r"has r=4; the run's model.lora expects 8"):
        peft_files.load_adapter(fresh, tmp_path / "adapter", LoraConfig(rank=8, alpha=8.0))
    with pytest.raises(ValueError, match="target_modules"):
        peft_files.load_adapter(fresh, tmp_path / "adapter",
                                LoraConfig(rank=4, alpha=8.0, targets=["q_proj", "v_proj"]))
    # per-module ranks or scalings are not one model.lora section: refused, not silently mis-scaled
    import json
    config_file = tmp_path / "adapter" / "adapter_config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), "alpha_pattern": {"q_proj": 16}}))
    with pytest.raises(ValueError, match=r"has alpha_pattern=\{'q_proj': 16\}; expected none"):
        peft_files.load_adapter(fresh, tmp_path / "adapter", SECTION)


def brute_force_nf4(kernel, block):
    """QLoRA's NF4 by hand: blocks of `block` inputs per output column, each weight the nearest NF4
    level of w / max|w| over its block, times that max. kernel [in, out] (numpy)."""
    w = kernel.reshape(-1, block, kernel.shape[-1])
    absmax = np.abs(w).max(axis=1, keepdims=True)
    levels = quantised.NF4_LEVELS
    nearest = levels[np.abs(w[..., None] / absmax[..., None] - levels).argmin(-1)]
    return (nearest * absmax).reshape(kernel.shape)


@pytest.mark.parametrize("kind", ["int8", "nf4"])
def test_quantised_base_dequantises_to_the_rule_and_stays_near_the_fp_model(kind, request):
    path, _ = model_dir("qwen3", request)
    model = adapted(path)
    tokens = np.random.default_rng(4).integers(0, VOCAB, (2, 9))
    fp_logits = our_logits(model, tokens)
    stacked = {name: np.asarray(getattr(getattr(model.layers, lora.PROJECTIONS[name][0]), name)[...])
               for name in lora.PROJECTIONS}
    quantised.quantise_base(model, kind, lora.PROJECTIONS)
    worst_rule = 0.0
    for name, (module_path, _, n_in) in lora.PROJECTIONS.items():
        module = getattr(model.layers, module_path)
        assert not hasattr(module, name) and getattr(module, f"{name}_codes")[...].dtype == \
            (np.int8 if kind == "int8" else np.uint8)
        got = np.asarray(quantised.kernel(module, name))
        w = stacked[name]
        for layer in range(w.shape[0]):
            flat = w[layer].reshape(int(np.prod(w.shape[1:1 + n_in])), -1)
            if kind == "nf4":
                block = 64 if flat.shape[0] % 64 == 0 else flat.shape[0]
                want = brute_force_nf4(flat, block)
            else:
                scale = np.maximum(np.abs(flat).max(0, keepdims=True), 1e-12) / 127
                want = np.clip(np.round(flat / scale), -127, 127) * scale
            worst_rule = max(worst_rule, float(np.abs(got[layer].reshape(flat.shape) - want).max()))
    q_logits = our_logits(model, tokens)
    drift = float(np.abs(q_logits - fp_logits).max())
    print(f"{kind}: max |dequantised - rule| = {worst_rule:.2e}; logits move by {drift:.3f}")
    assert worst_rule <= 1e-6
    assert drift < (0.05 if kind == "int8" else 1.0)
    # the merged export of a quantised model is the adapted model: dequantised base + adapters
    merged = lora.merge_adapters(model)
    merge_diff = float(np.abs(our_logits(merged, tokens) - q_logits).max())
    assert merge_diff <= TOL, merge_diff
    # and adapters over a quantised base still train: a nonzero gradient for A and B
    _, grads = our_logits_and_grads(model, tokens)
    assert all(np.any(g) for g in grads.values())


def test_the_sampler_takes_adapters_alone_over_the_modules_base(request):
    """Online recipes hand the sampler a train state's parameters, which with LoRA are the adapters:
    they overlay the module's frozen base, giving what the adapted module itself samples."""
    from nash_jax.rollout.sampling import generate

    path, _ = model_dir("llama_gqa", request)
    model = adapted(path)
    base = lora.add_adapters(load_pretrained(path), SECTION, seed=9)  # B = 0: the base
    args = {"num_samples": 2, "max_new_tokens": 5, "temperature": 0.0, "key": jax.random.PRNGKey(0)}
    prompts = [[1, 2, 3], [4, 5]]
    own = generate(model, prompts, **args)
    overlaid = generate(base, prompts, params=peft_files.adapter_state(model), **args)
    plain = generate(base, prompts, **args)
    np.testing.assert_array_equal(overlaid.tokens, own.tokens)
    assert np.max(np.abs(overlaid.logprobs_raw - own.logprobs_raw)) < 1e-5
    assert not np.array_equal(plain.tokens, own.tokens), "the adapters must change what is sampled"


def test_a_lora_train_state_holds_adapters_only_and_steps_leave_the_shared_base_intact(request):
    """The optimiser state exists for the adapters only; the frozen base is an argument of the step,
    never donated, so a policy sharing it (an anchor: the base with other adapters) stays valid."""
    from nash_jax import parallel
    from nash_jax.config import OptimizerConfig
    from nash_jax.train import init_train_state, make_optimizer, make_step

    path, _ = model_dir("llama_gqa", request)
    model = lora.add_adapters(load_pretrained(path), SECTION)
    mesh = parallel.make_mesh(devices=jax.devices()[:1])
    tx, schedule = make_optimizer(OptimizerConfig(name="adamw", learning_rate=1e-2), 10)
    model_def, state, shardings = init_train_state(model, tx, mesh=mesh)
    paths = [".".join(map(str, p)) for p, _ in nnx.to_flat_state(state.params)]
    assert len(paths) == 2 * 7 and all("_lora_" in p for p in paths), paths
    opt_bytes = sum(x.nbytes for x in jax.tree.leaves(state.opt_state))
    adapter_bytes = sum(x.nbytes for x in jax.tree.leaves(state.params))
    assert opt_bytes <= 2 * adapter_bytes + 64  # Adam's two moments of the adapters, and a count
    base_before = [np.asarray(x) for x in jax.tree.leaves(model_def.frozen)]
    anchor = model_def.merge(jax.tree.map(jnp.copy, state.params))  # the base with π_0's adapters
    tokens = np.random.default_rng(5).integers(1, VOCAB, (4, 10))
    batch = {"tokens": tokens, "segment_ids": np.ones_like(tokens), "loss_mask": np.ones_like(tokens, bool),
             "anchor_logp": np.zeros(4, np.float32), "win_rate": np.asarray([0.9, 0.1, 0.7, 0.3], np.float32)}
    step = make_step("sppo", model_def, tx, schedule, shardings, mesh, eta=1.0)
    for _ in range(2):
        state, metrics = step(state, batch)
    assert float(metrics["skipped"]) == 0 and float(metrics["grad_norm"]) > 0
    for before, after in zip(base_before, jax.tree.leaves(model_def.frozen)):
        assert np.array_equal(before, np.asarray(after))
    moved = model_def.merge(state.params)
    assert np.abs(our_logits(moved, tokens) - our_logits(anchor, tokens)).max() > 1e-4


def test_a_step_asked_for_again_over_another_base_compiles_once_and_leaves_the_first_on_its_base(request):
    """Each SPPO iteration loads its base again: the compiled program is reused, but each caller's step
    keeps its own base (asking again must not move an earlier step onto the new one); the KL step
    reads its bases as arguments too."""
    from nash_jax import parallel
    from nash_jax.config import OptimizerConfig
    from nash_jax.train import init_train_state, make_optimizer
    from nash_jax.train.steps import make_kl, make_logprobs

    path, _ = model_dir("llama_gqa", request)
    mesh = parallel.make_mesh(devices=jax.devices()[:1])
    tx, _ = make_optimizer(OptimizerConfig(name="adamw", learning_rate=1e-2), 10)
    tokens = np.random.default_rng(6).integers(1, VOCAB, (2, 8))
    batch = {"tokens": tokens, "segment_ids": np.ones_like(tokens), "loss_mask": np.ones_like(tokens, bool)}
    plain_def, plain_state, _ = init_train_state(load_pretrained(path), tx, mesh=mesh)
    steps, kls, params = [], [], []
    for scale in (1.0, 1.5):
        model = lora.add_adapters(load_pretrained(path), SECTION)
        for _, variable in nnx.to_flat_state(nnx.state(model, nnx.Param)):
            variable.set_value(variable.get_value() * scale)  # another base, the same architecture
        model_def, state, _ = init_train_state(model, tx, mesh=mesh)
        steps.append(make_logprobs(model_def, mesh))
        kls.append(make_kl(model_def, plain_def, mesh))  # B = 0: KL 0 over the unscaled base only
        params.append(state.params)
    first_kl, second_kl = (np.asarray(kl((p, plain_state.params), batch)) for kl, p in zip(kls, params))
    np.testing.assert_allclose(first_kl, 0.0, atol=1e-5)
    assert np.all(second_kl > 1e-3), second_kl
    first, second = steps
    assert first.jitted.compiled is second.jitted.compiled
    assert first.frozen is not second.frozen
    assert not np.allclose(np.asarray(first(params[0], batch)), np.asarray(second(params[1], batch)))
    again = lora.add_adapters(load_pretrained(path), SECTION)
    again_def, again_state, _ = init_train_state(again, tx, mesh=mesh)
    want = np.asarray(make_logprobs(again_def, mesh)(again_state.params, batch))
    np.testing.assert_allclose(np.asarray(first(params[0], batch)), want, rtol=1e-6, atol=1e-6)
