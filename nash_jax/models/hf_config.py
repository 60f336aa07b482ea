"""transformers config.json <-> LlamaConfig for every family the decoder supports: Llama, Mistral,
Qwen2, Qwen3, Gemma 2 and Gemma 3 (text).

`config_from_hf` checks the values it reads at the edge (models/config_values.py) and maps each
family's keys to the flags of `LlamaConfig`; `hf_config_from` writes a config.json for a model built
in code that transformers reads back as the same model. Only the text Gemma 3 (`Gemma3ForCausalLM`,
model_type gemma3_text) is supported, not the multimodal `Gemma3ForConditionalGeneration`.
"""

from nash_jax.models.config_values import check_divides, check_positive_ints, check_positive_numbers
from nash_jax.models.layers import ACTIVATIONS
from nash_jax.models.llama import LlamaConfig

SUPPORTED = {  # model_type -> the architectures name transformers writes
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
}
GEMMA = ("gemma2", "gemma3_text")
DTYPES = ("float32", "bfloat16", "float16")
# Gemma 3's defaults (transformers' Gemma3TextConfig.default_theta) and sliding/global pattern
GEMMA3_GLOBAL_THETA, GEMMA3_LOCAL_THETA, GEMMA3_PATTERN = 1_000_000.0, 10_000.0, 6
# What transformers' Gemma configs assume for a key config.json leaves out, where the generic reading
# below would assume something else (an explicit null is kept: no soft-cap)
GEMMA_DEFAULTS = {
    "gemma2": {"head_dim": 256, "num_key_value_heads": 4, "query_pre_attn_scalar": 256,
               "sliding_window": 4096, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0},
    "gemma3_text": {"head_dim": 256, "num_key_value_heads": 4, "query_pre_attn_scalar": 256,
                    "sliding_window": 4096},
}


def config_from_hf(hf, *, dtype="float32", param_dtype=None, source="config.json"):
    """LlamaConfig from a transformers config.json dict."""
    model_type = _check_model_type(hf, source)
    original, hf = hf, {**GEMMA_DEFAULTS.get(model_type, {}), **hf}
    for name in (dtype, param_dtype or dtype):
        if name not in DTYPES:
            raise ValueError(f"dtype {name!r} is not one of {DTYPES}")
    check_sizes(hf, source)
    gemma = model_type in GEMMA
    heads = hf["num_attention_heads"]
    layers = hf["num_hidden_layers"]
    theta, rope, local_theta = _rope(hf, model_type, source)
    attention_bias = bool(hf.get("attention_bias") or False)
    return LlamaConfig(
        vocab_size=hf["vocab_size"],
        hidden_size=hf["hidden_size"],
        intermediate_size=hf["intermediate_size"],
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=hf.get("num_key_value_heads") or heads,
        head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
        rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
        rope_theta=float(theta),
        rope_scaling=tuple(sorted(rope.items())),
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", gemma)),  # Gemma ties by default
        qkv_bias=model_type == "qwen2" or attention_bias,
        o_bias=attention_bias and model_type != "qwen2",
        mlp_bias=bool(hf.get("mlp_bias") or False),
        qk_norm=model_type in ("qwen3", "gemma3_text"),
        sliding_windows=_sliding_windows(hf, model_type, layers, source),
        hidden_act=_activation(hf, gemma, source),
        norm_plus_one=gemma, sandwich_norms=gemma, scale_embeddings=gemma,
        query_pre_attn_scalar=hf.get("query_pre_attn_scalar") if gemma else None,
        attn_logit_softcap=hf.get("attn_logit_softcapping") if gemma else None,
        final_logit_softcap=hf.get("final_logit_softcapping") if gemma else None,
        local_rope_theta=local_theta,
        dtype=dtype,
        param_dtype=param_dtype or dtype,
        hf_config=dict(original),
    )


def _check_model_type(hf, source):
    model_type = hf.get("model_type")
    if model_type == "gemma3" and "text_config" in hf:
        raise ValueError(f"{source}: a multimodal Gemma 3 (Gemma3ForConditionalGeneration, weights under "
                         "language_model.) is not supported; only the text Gemma3ForCausalLM "
                         "(model_type gemma3_text)")
    if model_type not in SUPPORTED:
        archs = hf.get("architectures")
        raise ValueError(f"{source}: model_type={model_type!r} (architectures={archs}) is not supported; "
                         f"supported model types: {sorted(SUPPORTED)} ({sorted(SUPPORTED.values())})")
    if model_type in GEMMA and hf.get("use_bidirectional_attention"):
        raise ValueError(f"{source}: use_bidirectional_attention=true (an encoder); only causal "
                         "Gemma decoders are supported")
    return model_type


def _activation(hf, gemma, source):
    """The MLP's activation: Gemma reads hidden_activation, the others hidden_act."""
    key, default = ("hidden_activation", "gelu_pytorch_tanh") if gemma else ("hidden_act", "silu")
    name = hf.get(key) or default
    if name not in ACTIVATIONS:
        raise ValueError(f"{source}: {key}={name!r}; supported: {sorted(ACTIVATIONS)}")
    return name


def check_sizes(hf, source):
    """Every size and count the family reads is a positive integer (or number), and they fit."""
    check_positive_ints(hf, source, ("vocab_size", "hidden_size", "intermediate_size",
                                     "num_hidden_layers", "num_attention_heads"),
                        optional=("num_key_value_heads", "head_dim", "sliding_window",
                                  "sliding_window_pattern"))
    check_positive_numbers(hf, source, ("rms_norm_eps", "rope_theta", "rope_local_base_freq",
                                        "query_pre_attn_scalar", "attn_logit_softcapping",
                                        "final_logit_softcapping"))
    if hf.get("head_dim") is None:
        check_divides(hf, source, "num_attention_heads", "hidden_size",
                      "without head_dim, each head takes hidden_size / num_attention_heads")
    if hf.get("num_key_value_heads") is not None:
        check_divides(hf, source, "num_key_value_heads", "num_attention_heads",
                      "each key/value head serves a whole group of query heads")
    layer_types = hf.get("layer_types")
    kinds = ("sliding_attention", "full_attention")
    if layer_types is not None and (not isinstance(layer_types, list)
                                    or len(layer_types) != hf["num_hidden_layers"]
                                    or any(kind not in kinds for kind in layer_types)):
        raise ValueError(f"{source}: layer_types: {str(layer_types)[:80]}; expected a list of one "
                         f"entry per layer (num_hidden_layers: {hf['num_hidden_layers']}), each one "
                         f"of {kinds}")


def _rope(hf, model_type, source):
    """(global rope theta, global scaling {key: value} without the defaults, local theta or None).

    Gemma 3 has two ropes: `rope_parameters` keyed by layer type (transformers 5), or the older
    `rope_theta` + `rope_scaling` for the global layers and `rope_local_base_freq` for the local ones.
    """
    params = dict(hf.get("rope_parameters") or {})
    if model_type != "gemma3_text":
        rope = dict(params or hf.get("rope_scaling") or {})
        return _one_rope(rope, hf.get("rope_theta", 10000.0)) + (None,)
    if "full_attention" in params or "sliding_attention" in params:
        full, local = dict(params.get("full_attention") or {}), dict(params.get("sliding_attention") or {})
    else:
        full = dict(hf.get("rope_scaling") or {})
        local = {"rope_theta": hf.get("rope_local_base_freq", GEMMA3_LOCAL_THETA)}
    theta, scaling = _one_rope(full, hf.get("rope_theta", GEMMA3_GLOBAL_THETA))
    local_theta, local_scaling = _one_rope(local, GEMMA3_LOCAL_THETA)
    if local_scaling:
        raise ValueError(f"{source}: rope scaling {local_scaling} on the sliding-window layers; only "
                         "plain rope is supported there (scaling goes on the full-attention layers)")
    return theta, scaling, float(local_theta)


def _one_rope(rope, default_theta):
    theta = rope.pop("rope_theta", None) or default_theta
    rope = {k: v for k, v in rope.items() if v is not None}
    if rope.get("rope_type", rope.get("type", "default")) == "default":
        rope = {}
    return theta, rope


def _sliding_windows(hf, model_type, layers, source):
    window = hf.get("sliding_window")
    layer_types = hf.get("layer_types")
    if model_type in GEMMA and layer_types is None:  # Gemma 2 alternates; Gemma 3 has 1 global in 6
        pattern = 2 if model_type == "gemma2" else hf.get("sliding_window_pattern", GEMMA3_PATTERN)
        layer_types = ["sliding_attention" if (i + 1) % pattern else "full_attention"
                       for i in range(layers)]
    if model_type in GEMMA and not window and "sliding_attention" in layer_types:
        raise ValueError(f"{source}: sliding_window: {window!r} with sliding_attention layers; "
                         "expected a positive integer")
    if not window:
        return ()
    if model_type == "mistral":
        return (window,) * layers
    if layer_types is None:  # qwen2/qwen3 written before layer_types existed
        if not hf.get("use_sliding_window"):
            return ()
        first = hf.get("max_window_layers", layers)
        layer_types = ["sliding_attention" if i >= first else "full_attention" for i in range(layers)]
    windows = tuple(window if kind == "sliding_attention" else None for kind in layer_types)
    return windows if any(windows) else ()


def hf_config_from(config):
    """A config.json dict for a model built in code (not loaded from HF)."""
    gemma = config.norm_plus_one
    if not gemma and (config.sandwich_norms or config.scale_embeddings
                      or config.local_rope_theta is not None or config.hidden_act != "silu"):
        raise ValueError("a config with Gemma's layer flags but plain RMSNorms has no transformers "
                         "family to be written as")
    if gemma:
        model_type = "gemma3_text" if config.qk_norm else "gemma2"
    else:
        model_type = "qwen3" if config.qk_norm else "qwen2" if config.qkv_bias and not config.o_bias \
            else "llama"
    rope = {"rope_type": "default", **dict(config.rope_scaling), "rope_theta": config.rope_theta}
    hf = {
        "model_type": model_type, "architectures": [SUPPORTED[model_type]],
        "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size, "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads, "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_dim, "rms_norm_eps": config.rms_norm_eps,
        "tie_word_embeddings": config.tie_word_embeddings, "max_position_embeddings": 4096,
        "rope_parameters": rope,
    }
    if gemma:
        hf.update(_gemma_fields(config, rope))
    else:
        hf["hidden_act"] = "silu"
    if model_type == "llama":
        hf.update(attention_bias=config.o_bias, mlp_bias=config.mlp_bias)
    return hf


def _gemma_fields(config, rope):
    """The Gemma keys of hf_config_from: one sliding window, the layer pattern, the two ropes."""
    windows = {w for w in config.sliding_windows if w is not None}
    if len(windows) > 1 or not (config.sandwich_norms and config.scale_embeddings) or (
            config.local_rope_theta is not None and not config.qk_norm):
        raise ValueError("a Gemma config needs sandwich norms, scaled embeddings, at most one "
                         f"sliding window (got {sorted(windows)}), and a local rope base only with "
                         "QK-norm (Gemma 3)")
    layer_types = ["sliding_attention" if config.window(i) else "full_attention"
                   for i in range(config.num_layers)]
    fields = {
        "hidden_activation": config.hidden_act, "query_pre_attn_scalar": config.query_pre_attn_scalar
        or config.head_dim, "attn_logit_softcapping": config.attn_logit_softcap,
        "final_logit_softcapping": config.final_logit_softcap, "layer_types": layer_types,
        "sliding_window": windows.pop() if windows else 4096, "attention_bias": config.qkv_bias,
    }
    if config.qk_norm:  # Gemma 3: the full-attention layers' rope, and the sliding layers' own base
        local = config.local_rope_theta or config.rope_theta
        fields["rope_parameters"] = {"full_attention": rope, "sliding_attention": {
            "rope_type": "default", "rope_theta": local}}
    return fields
