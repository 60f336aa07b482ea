"""Low-rank adapters (LoRA) on the decoder family: y = W x + (alpha / rank) · B A x on the projections a
`model.lora` section names (PEFT's names: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj,
down_proj), the base W frozen.

Why in-house and not qwix. qwix's `apply_lora_to_model` intercepts the dot_general/einsum calls of
the modules it matches and creates the adapters lazily, on the first call, inside the module; our
layers run as one program under `jax.lax.scan` over stacked parameters (models/llama.py), with the
module rebuilt from a slice of the stacked state inside the scan body, so lazily created variables
would be born inside the trace. That is the pattern behind MaxText issue #5129 (under scan, qwix's
LoRA restacked a copy of the whole base per adapter: 1,194 MB for 6.1 MB of adapters on gemma2-2b).
Here the adapters are ordinary stacked variables made before any trace: `add_adapters` hangs an
`nnx.LoRAParam` pair `{proj}_lora_a [L, *in, r]`, `{proj}_lora_b [L, r, *out]` beside each target
kernel, so that

  - the scan carries them with the layer's other parameters: layers stay scanned, the base is never
    copied or restacked (tests/unit/models/test_lora.py bounds a LoRA step's compiled memory);
  - A's logical axes are the kernel's input axes plus "lora_rank" and B's are "lora_rank" plus the
    kernel's output axes, so the one rules table shards them as it shards the kernel (rank replicated);
  - `nnx.split(model, nnx.LoRAParam, ...)` separates what trains from the frozen base, and the base
    is shared, not copied, by every policy that differs only in adapters (anchors, μ, π_0: zero B);
  - the PEFT checkpoint layout is one more key table for models/loading.py (adapter_model.safetensors
    keys `base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight`, [r, in] and [out, r]).

Numerics follow PEFT's LoraModel: the adapter path in the compute dtype, B's init zero, A's
kaiming-uniform (bound 1/√fan_in), scaling alpha / rank.
"""

import math

import jax
import jax.numpy as jnp
from flax import nnx

from nash_jax.models import loading, quantised

# projection -> (module path under `layers`, HF module path, number of input axes of the kernel)
PROJECTIONS = {
    "q_proj": ("attn", "self_attn", 1), "k_proj": ("attn", "self_attn", 1),
    "v_proj": ("attn", "self_attn", 1), "o_proj": ("attn", "self_attn", 2),
    "gate_proj": ("mlp", "mlp", 1), "up_proj": ("mlp", "mlp", 1), "down_proj": ("mlp", "mlp", 1),
}
RANK_AXIS = "lora_rank"


def scaling(lora):
    return lora.alpha / lora.rank


def targets(lora):
    """The section's target projections in a fixed order."""
    return [name for name in PROJECTIONS if name in lora.targets]


def add_adapters(model, lora, seed=0):
    """Hang adapters of the `lora` section (config.LoraConfig) on every target projection of `model`
    (in place; returns it): A kaiming-uniform from `seed`, B zero, so the adapted model equals the
    base until B moves."""
    if adapters_of(model):
        raise ValueError("the model already carries adapters")
    key = jax.random.PRNGKey(seed)
    for i, name in enumerate(targets(lora)):
        module_path, _, n_in = PROJECTIONS[name]
        module = getattr(model.layers, module_path)
        kernel = getattr(module, name)
        value, axes = kernel.get_value(), kernel.get_metadata().get("logical_axes")
        layers, in_shape, out_shape = value.shape[0], value.shape[1:1 + n_in], value.shape[1 + n_in:]
        bound = 1.0 / math.sqrt(math.prod(in_shape))
        # fp32 whatever the base's dtype, as PEFT/QLoRA keep them: a bf16 adapter would round away
        # the small steps of a low learning rate (the forward casts them to the compute dtype)
        a = jax.random.uniform(jax.random.fold_in(key, i), (layers, *in_shape, lora.rank),
                               jnp.float32, -bound, bound)
        b = jnp.zeros((layers, lora.rank, *out_shape), jnp.float32)
        a_axes = (axes[0], *axes[1:1 + n_in], RANK_AXIS) if axes else None
        b_axes = (axes[0], RANK_AXIS, *axes[1 + n_in:]) if axes else None
        setattr(module, f"{name}_lora_a", nnx.LoRAParam(a, logical_axes=a_axes))
        setattr(module, f"{name}_lora_b", nnx.LoRAParam(b, logical_axes=b_axes))
        module.lora_scaling = scaling(lora)
    return model


def adapters_of(model):
    """The projections of `model` that carry adapters, in PROJECTIONS order."""
    out = []
    for name, (module_path, _, _) in PROJECTIONS.items():
        module = getattr(model.layers, module_path, None)
        if module is not None and hasattr(module, f"{name}_lora_a"):
            out.append(name)
    return out


def delta(module, name, x, n_in):
    """The adapter's contribution (alpha / r) · (x A) B for projection `name` of `module` on inputs x
    [..., *in] (n_in input axes), in x's dtype; 0 when the projection has no adapter."""
    a_var = getattr(module, f"{name}_lora_a", None)
    if a_var is None:
        return 0.0
    a, b = a_var[...].astype(x.dtype), getattr(module, f"{name}_lora_b")[...].astype(x.dtype)
    lead, rank = x.shape[:x.ndim - n_in], a.shape[-1]
    h = x.reshape(*lead, -1) @ a.reshape(-1, rank)
    out = (h @ b.reshape(rank, -1)).reshape(*lead, *b.shape[1:])
    return out * jnp.asarray(module.lora_scaling, x.dtype)


def merged_kernel(module, name, n_in):
    """W + (alpha / r) A B of a stacked kernel [L, *in, *out], in the kernel's dtype (fp32 sums)."""
    kernel = quantised.kernel(module, name)
    a = getattr(module, f"{name}_lora_a")[...].astype(jnp.float32)
    b = getattr(module, f"{name}_lora_b")[...].astype(jnp.float32)
    layers, rank = a.shape[0], a.shape[-1]
    product = jnp.einsum("lir,lro->lio", a.reshape(layers, -1, rank), b.reshape(layers, rank, -1))
    merged = kernel.astype(jnp.float32) + module.lora_scaling * product.reshape(kernel.shape)
    return merged.astype(kernel.dtype)


def merge_adapters(model):
    """A copy of `model` with every adapter folded into its kernel and removed: a plain model of the
    same architecture (what the merged export writes)."""
    out = nnx.clone(model)
    for name in adapters_of(out):
        module_path, _, n_in = PROJECTIONS[name]
        module = getattr(out.layers, module_path)
        if hasattr(module, f"{name}_codes"):  # a quantised base: dequantised + A B, in param_dtype
            quantised.restore(module, name,
                              merged_kernel(module, name, n_in).astype(out.config.param_dtype))
        else:
            getattr(module, name).set_value(merged_kernel(module, name, n_in))
        delattr(module, f"{name}_lora_a")
        delattr(module, f"{name}_lora_b")
    for module_path in ("attn", "mlp"):
        module = getattr(out.layers, module_path)
        if hasattr(module, "lora_scaling"):
            delattr(module, "lora_scaling")
    return out


# PEFT's kernels: lora_A.weight [r, in], lora_B.weight [out, r]; ours A [*in, r], B [r, *out]
_A = loading.Transform("lora_a", lambda t, shape: t.T.reshape(shape),
                       lambda a: a.reshape(-1, a.shape[-1]).T)
_B = loading.Transform("lora_b", lambda t, shape: t.T.reshape(shape),
                       lambda a: a.reshape(a.shape[0], -1).T)
PEFT_PREFIX = "base_model.model."


def adapter_key_map():
    """Our adapter paths <-> PEFT's adapter_model.safetensors keys (without the PEFT_PREFIX)."""
    rules = []
    for name, (module_path, hf_path, _) in PROJECTIONS.items():
        for ours, hf, transform in (("a", "A", _A), ("b", "B", _B)):
            rules.append(loading.Rule(f"model.layers.{{layer}}.{hf_path}.{name}.lora_{hf}.weight",
                                      f"layers.{module_path}.{name}_lora_{ours}", transform))
    return loading.KeyMap(rules)


def abstract_model(llama, section=None):
    """The decoder of `llama` (a LlamaConfig) as abstract arrays, with the adapters and the quantised
    base of a `model.lora` section when given (what `nash-jax plan` sizes)."""
    from nash_jax.models.llama import Llama

    def build():
        model = Llama(llama, rngs=nnx.Rngs(0))
        if section is not None:
            add_adapters(model, section)
            quantised.quantise_base(model, section.base, PROJECTIONS)
        return model

    return nnx.eval_shape(build)
