"""Gemma 2 and Gemma 3 (text) against transformers' PyTorch classes: logits with sliding windows
shorter than the sequence, soft-capping, QK-norm, tied and untied heads, left padding, Gemma 3's two
ropes (linear scaling on the global layers, another base on the local ones); load and export round
trips; greedy decoding through the sampler; chunked log-probs with the final soft-cap."""

import copy
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx

from nash_jax.core import losses
from nash_jax.models import load_pretrained, save_pretrained
from nash_jax.models.hf import config_from_hf
from nash_jax.models.llama import Llama
from nash_jax.rollout.sampling import generate
from nash_jax.train import steps
from nash_jax.train.state import split_model
from tests.unit.models.test_llama import padded_batch
from tests.tiny_hf import saved_models_fixture, torch_logits

TOL = 1e-4
VOCAB = 101
SIZES = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
             num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=256,
             sliding_window=3, query_pre_attn_scalar=16, eos_token_id=None, bos_token_id=None,
             pad_token_id=0)
LAYER_TYPES = ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"]
VARIANTS = {  # name -> (config class, model class, config arguments)
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",
               dict(attn_logit_softcapping=1.5, final_logit_softcapping=2.0)),
    "gemma2_untied": ("Gemma2Config", "Gemma2ForCausalLM",
                      dict(attn_logit_softcapping=1.5, final_logit_softcapping=2.0,
                           tie_word_embeddings=False)),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM",
               dict(layer_types=LAYER_TYPES, rope_theta=10000.0, rope_local_base_freq=100.0,
                    rope_scaling={"rope_type": "linear", "factor": 4.0})),
    "gemma3_untied": ("Gemma3TextConfig", "Gemma3ForCausalLM",
                      dict(layer_types=LAYER_TYPES, rope_local_base_freq=100.0,
                           tie_word_embeddings=False, final_logit_softcapping=2.0)),
}
TOKENS = np.random.default_rng(1).integers(0, VOCAB, (2, 11))  # 11 tokens, windows of 3


def build_torch_gemma(variant, seed=0):
    """A random transformers Gemma; norm weights w ~ 0.3 N(0, 1) (the scale is 1 + w, as in Gemma)."""
    config_class, model_class, extra = VARIANTS[variant]
    config = getattr(transformers, config_class)(**SIZES, **extra)
    torch.manual_seed(seed)
    model = getattr(transformers, model_class)(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_((0.3 if name.endswith("norm.weight") else 0.15) * torch.randn_like(p))
    return model


gemma_dir = saved_models_fixture(build_torch_gemma)


def max_diff(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


def with_config(model, **changes):
    """The same parameters under a changed config (shapes unchanged)."""
    graphdef, state = nnx.split(Llama(dataclasses.replace(model.config, **changes),
                                      rngs=nnx.Rngs(0)))
    return nnx.merge(graphdef, nnx.state(model))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_logits_match_transformers(variant, gemma_dir):
    path, torch_model = gemma_dir(variant)
    model = load_pretrained(path)
    reference = torch_logits(torch_model, TOKENS)
    ours, _ = model(jnp.asarray(TOKENS))
    diff = max_diff(ours, reference)
    print(f"{variant}: max |logits_jax - logits_torch| = {diff:.2e} (max |logit| "
          f"{np.max(np.abs(reference)):.2f})")
    assert diff <= TOL, f"{variant}: max abs logit difference {diff:.2e}"
    c = model.config
    assert c.tie_word_embeddings == ("untied" not in variant)
    # the windows (shorter than the sequence) and the soft-caps change the logits: the test sees them
    changes = {"sliding_windows": (), "attn_logit_softcap": None, "final_logit_softcap": None,
               "local_rope_theta": None}
    for name, value in changes.items():
        if getattr(c, name) not in ((), None):
            other, _ = with_config(model, **{name: value})(jnp.asarray(TOKENS))
            assert max_diff(other, ours) > 1e-2, f"{variant}: {name} makes no difference"


@pytest.mark.parametrize("variant", ["gemma2", "gemma3"])
def test_xla_attention_takes_the_gemma_scale_and_soft_cap(variant, gemma_dir):
    path, torch_model = gemma_dir(variant)
    ours, _ = load_pretrained(path, attention="xla")(jnp.asarray(TOKENS))
    diff = max_diff(ours, torch_logits(torch_model, TOKENS))
    print(f"{variant} with attention='xla': max |logits_jax - logits_torch| = {diff:.2e}")
    assert diff <= TOL, diff


@pytest.mark.parametrize("variant", ["gemma2", "gemma3"])
def test_left_padded_batch_matches_unpadded_transformers_runs(variant, gemma_dir):
    path, torch_model = gemma_dir(variant)
    model = load_pretrained(path)
    rng = np.random.default_rng(0)
    sequences = [rng.integers(1, VOCAB, n) for n in (9, 5, 7)]
    tokens, segments = padded_batch(sequences, "left")
    logits, _ = jax.jit(lambda t, s: model(t, segment_ids=s))(jnp.asarray(tokens),
                                                              jnp.asarray(segments))
    worst = max(max_diff(np.asarray(logits)[row][segments[row] == 1],
                         torch_logits(torch_model, seq[None])[0])
                for row, seq in enumerate(sequences))
    # transformers' own left-padded batch (attention mask) agrees too
    padded = torch_logits(torch_model, tokens, attention_mask=torch.as_tensor(segments))
    worst_masked = max_diff(np.asarray(logits)[segments == 1], padded[segments == 1])
    print(f"{variant} left-padded: max |Δ| {worst:.2e} against unpadded runs, {worst_masked:.2e} "
          "against transformers' masked batch")
    assert worst <= TOL and worst_masked <= TOL, (worst, worst_masked)
    assert np.all(np.isfinite(np.asarray(logits))), "padding rows must stay finite"


@pytest.mark.parametrize("variant", ["gemma2", "gemma3"])
def test_rows_continuing_a_shared_prefix_match_transformers_on_the_whole_texts(variant, gemma_dir):
    """Two prompts (left-padded heads of 6 and 4 tokens, longer than the windows of 3), two rows each:
    the rows read their head's keys in place (hidden_states(prefix=...), the LLM judge's pairs) and
    their logits equal transformers' on each whole text."""
    from nash_jax.models.llama import KVCache, positions_from_segments

    path, torch_model = gemma_dir(variant)
    model = load_pretrained(path)
    rng = np.random.default_rng(2)
    heads = [rng.integers(1, VOCAB, n) for n in (6, 4)]
    rests = [rng.integers(1, VOCAB, n) for n in (5, 3, 4, 5)]
    head_tokens, head_segments = (jnp.asarray(a) for a in padded_batch(heads, "left"))
    rest_tokens, rest_segments = padded_batch(rests, "right")
    _, prefix = model.hidden_states(head_tokens, positions_from_segments(head_segments), head_segments,
                                    KVCache.create(model.config, 2, head_tokens.shape[1]))
    positions = jnp.asarray([[len(heads[i // 2])] for i in range(4)]) + jnp.arange(5)[None]
    hidden, _ = model.hidden_states(jnp.asarray(rest_tokens), positions, jnp.asarray(rest_segments),
                                    prefix=prefix)
    logits = np.asarray(model.logits(hidden))
    worst = max(max_diff(logits[row][rest_segments[row] == 1],
                         torch_logits(torch_model, np.concatenate([heads[row // 2], rest])[None])[0,
                                                                                          -len(rest):])
                for row, rest in enumerate(rests))
    print(f"{variant} rows after a shared prefix: max |Δ| {worst:.2e} against whole texts")
    assert worst <= TOL, worst


@pytest.mark.parametrize("variant", ["gemma2_untied", "gemma3"])
def test_export_reloads_in_transformers_with_the_same_logits(variant, gemma_dir, tmp_path):
    path, torch_model = gemma_dir(variant)
    reference = torch_logits(torch_model, TOKENS)
    model = load_pretrained(path, scan_layers=False)
    unrolled, _ = model(jnp.asarray(TOKENS))
    scanned, _ = load_pretrained(path)(jnp.asarray(TOKENS))
    print(f"{variant}: scanned vs unrolled {max_diff(scanned, unrolled):.2e}")
    assert max_diff(scanned, unrolled) <= 1e-5
    # the config.json as read, and one written from the config alone (a model built in code)
    for name, source in (("as read", model), ("built", with_config(model, hf_config={}))):
        out = save_pretrained(source, tmp_path / name.replace(" ", "_"))
        reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
        assert type(reloaded) is type(torch_model)
        diff = max_diff(torch_logits(reloaded, TOKENS), reference)
        ours, _ = load_pretrained(out)(jnp.asarray(TOKENS))
        print(f"{variant} export ({name}): transformers reload vs original {diff:.2e}, "
              f"nash_jax reload {max_diff(ours, reference):.2e}")
        assert diff <= 1e-6 and max_diff(ours, reference) <= TOL, diff


@pytest.mark.parametrize("variant", ["gemma2", "gemma3"])
def test_greedy_decoding_equals_transformers_generate(variant, gemma_dir):
    """Windows of 3 over prompts of up to 11 tokens and 12 new ones: the sampler's KV-cache decoding
    must keep each sliding layer's window and each layer's rope (and Gemma 2's soft-caps)."""
    path, torch_model = gemma_dir(variant)
    model = load_pretrained(path)
    prompts, new = [[5, 6, 7], list(range(10, 21)), [42]], 12
    references = []
    for prompt in prompts:
        with torch.no_grad():
            out = torch_model.generate(torch.tensor([prompt]), attention_mask=torch.ones(
                1, len(prompt), dtype=torch.long), do_sample=False, max_new_tokens=new, pad_token_id=0)
        references.append(out[0, len(prompt):].numpy())
    ours = generate(model, prompts, num_samples=1, max_new_tokens=new, temperature=0.0,
                    key=jax.random.PRNGKey(0))
    for i, reference in enumerate(references):
        np.testing.assert_array_equal(ours.tokens[i, 0], reference, err_msg=f"prompt {i}")
    assert len({tuple(r) for r in references}) > 1  # not one degenerate continuation


@pytest.mark.parametrize("variant", ["gemma2", "gemma3_untied"])
def test_chunked_logprobs_with_final_softcap_equal_the_full_logits(variant, gemma_dir):
    path, torch_model = gemma_dir(variant)
    model_def, params = split_model(load_pretrained(path))
    tokens = np.random.default_rng(3).integers(1, VOCAB, (3, 10))
    segments = np.ones_like(tokens, np.int32)
    segments[0, :3] = 0  # a left-padded row
    mask = (np.arange(10) >= 4) & (segments == 1)
    args = (model_def, params, jnp.asarray(tokens), jnp.asarray(segments), jnp.asarray(mask))
    full, _ = steps.token_logprobs(*args, logprob_chunk=0)
    chunked, _ = steps.token_logprobs(*args, logprob_chunk=4)  # 27 positions in 7 chunks
    reference = torch.log_softmax(torch.as_tensor(torch_logits(torch_model, tokens[1:, :-1])), -1)
    picked = np.take_along_axis(reference.numpy(), tokens[1:, 1:, None], -1)[..., 0]
    torch_diff = max_diff(np.where(mask[1:, 1:], full[1:], 0), np.where(mask[1:, 1:], picked, 0))
    print(f"{variant}: chunked vs full log-probs {max_diff(chunked, full):.2e}, full vs torch "
          f"{torch_diff:.2e}")
    assert max_diff(chunked, full) <= 1e-5 and torch_diff <= TOL
    uncapped = losses.chunked_token_logprobs(
        jnp.ones((1, 5, 32)), params["embed"][...], jnp.ones((1, 5), jnp.int32),
        jnp.ones((1, 5), bool), chunk=2)
    capped = losses.chunked_token_logprobs(
        jnp.ones((1, 5, 32)), params["embed"][...], jnp.ones((1, 5), jnp.int32),
        jnp.ones((1, 5), bool), chunk=2, softcap=0.5)
    assert max_diff(uncapped, capped) > 1e-3  # the cap reaches the chunked path


def test_bfloat16_embeddings_round_the_scale_as_transformers_does(gemma_dir):
    """transformers multiplies the bf16 embedding by √hidden rounded to bf16 (5.65625 for 32), not by
    the fp32 factor: the scaled embeddings agree bit for bit."""
    path, torch_model = gemma_dir("gemma3")
    ours = load_pretrained(path, dtype="bfloat16").embed_tokens(jnp.asarray(TOKENS))
    embedding = copy.deepcopy(torch_model.model.embed_tokens).to(torch.bfloat16)
    with torch.no_grad():
        theirs = embedding(torch.as_tensor(TOKENS)).float().numpy()
    unrounded = (torch_model.model.embed_tokens.weight.detach().numpy()[TOKENS]
                 * np.float32(32 ** 0.5)).astype(jnp.bfloat16)
    print(f"bf16 embeddings: max |Δ| {max_diff(ours.astype(jnp.float32), theirs):.2e}; with an unrounded "
          f"factor it would be {max_diff(unrounded.astype(np.float32), theirs):.2e}")
    assert ours.dtype == jnp.bfloat16 and max_diff(ours.astype(jnp.float32), theirs) == 0


def test_a_262k_vocabulary_goes_through_the_chunked_logprobs():
    """Gemma 3's 262,144-token vocabulary (a tiny model otherwise, built in code): chunks of 8 positions
    give the full path's log-probs."""
    config = config_from_hf({**OLD_STYLE_GEMMA3, "hidden_size": 32, "intermediate_size": 48,
                             "num_hidden_layers": 2, "head_dim": 8, "final_logit_softcapping": 30.0})
    assert config.vocab_size == 262_144
    model_def, params = split_model(Llama(config, rngs=nnx.Rngs(0)))
    tokens = np.random.default_rng(4).integers(0, config.vocab_size, (2, 12))
    args = (model_def, params, jnp.asarray(tokens), jnp.ones((2, 12), jnp.int32),
            jnp.asarray(np.broadcast_to(np.arange(12) >= 3, (2, 12))))
    full, mask = steps.token_logprobs(*args, logprob_chunk=0)
    chunked, _ = jax.jit(lambda p: steps.token_logprobs(args[0], p, *args[2:], logprob_chunk=8))(params)
    print(f"262K vocabulary: chunked vs full log-probs {max_diff(chunked, full):.2e}")
    assert max_diff(chunked, full) <= 1e-5 and np.all(np.asarray(full)[np.asarray(mask)] < 0)


OLD_STYLE_GEMMA3 = {  # the keys of a Gemma 3 text config.json written before transformers 5
    "model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "vocab_size": 262144,
    "hidden_size": 640, "intermediate_size": 2048, "num_hidden_layers": 18, "num_attention_heads": 4,
    "num_key_value_heads": 1, "head_dim": 256, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0, "rope_scaling": None, "sliding_window": 512,
    "sliding_window_pattern": 6, "query_pre_attn_scalar": 256, "hidden_activation": "gelu_pytorch_tanh",
    "final_logit_softcapping": None, "attn_logit_softcapping": None}


def test_config_from_hf_reads_older_gemma3_keys_and_the_default_pattern():
    c = config_from_hf(OLD_STYLE_GEMMA3)
    assert c.sliding_windows == tuple(None if (i + 1) % 6 == 0 else 512 for i in range(18))
    assert (c.rope_theta, c.rope_scaling, c.local_rope_theta) == (1e6, (), 1e4)
    assert c.tie_word_embeddings and c.qk_norm and c.norm_plus_one and c.sandwich_norms
    assert c.attention_scale == 256 ** -0.5 and c.hidden_act == "gelu_pytorch_tanh"
    scaled = config_from_hf({**OLD_STYLE_GEMMA3, "rope_scaling": {"rope_type": "linear", "factor": 8.0}})
    assert scaled.rope_scaling == (("factor", 8.0), ("rope_type", "linear"))


@pytest.mark.parametrize("model_type, config_class", [("gemma2", "Gemma2Config"),
                                                       ("gemma3_text", "Gemma3TextConfig")])
def test_keys_left_out_read_as_transformers_reads_them(model_type, config_class):
    bare = {"model_type": model_type, "vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 48,
            "num_hidden_layers": 6, "num_attention_heads": 8}
    theirs = getattr(transformers, config_class)(**{k: v for k, v in bare.items() if k != "model_type"})
    ours = config_from_hf(bare)
    windows = tuple(theirs.sliding_window if kind == "sliding_attention" else None
                    for kind in theirs.layer_types)
    assert (ours.head_dim, ours.num_kv_heads, ours.attention_scale, ours.sliding_windows,
            ours.attn_logit_softcap, ours.final_logit_softcap, ours.tie_word_embeddings,
            ours.hidden_act) == (theirs.head_dim, theirs.num_key_value_heads,
                                 theirs.query_pre_attn_scalar ** -0.5, windows,
                                 theirs.attn_logit_softcapping, theirs.final_logit_softcapping,
                                 theirs.tie_word_embeddings, theirs.hidden_activation)


@pytest.mark.parametrize("change, message", [
    ({"model_type": "gemma3", "text_config": {}}, "multimodal Gemma 3"),
    ({"use_bidirectional_attention": True}, "use_bidirectional_attention"),
    ({"hidden_activation": "relu"}, "hidden_activation='relu'"),
    ({"final_logit_softcapping": -1.0}, "final_logit_softcapping: -1.0"),
    ({"layer_types": ["sliding"] * 18}, "layer_types"),
    ({"rope_parameters": {"sliding_attention": {"rope_type": "linear", "factor": 2.0}}},
     "sliding-window layers"),
])
def test_bad_gemma_configs_are_one_line_errors(change, message):
    with pytest.raises(ValueError, match=message):
        config_from_hf({**OLD_STYLE_GEMMA3, **change}, source="m/config.json")
