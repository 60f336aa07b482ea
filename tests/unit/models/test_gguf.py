"""`nash-jax import-gguf`: tiny GGUF files written by the gguf package's writer (each type it can
quantise, Q/K permuted as llama.cpp permutes them) imported tensor by tensor, loaded in nash_jax and
transformers with the same logits, and every refusal one line with nothing left behind."""

import json
import os
import subprocess
import sys

import gguf
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file

from nash_jax import cli
from nash_jax.models import gguf as gguf_import
from nash_jax.models import hf, load_pretrained
from nash_jax.models.gguf import import_gguf
from tests.tiny_gguf import WRITABLE_TYPES, gguf_tensors, round_trip, write_gguf
from tests.tiny_hf import build_torch_model, random_torch_model, torch_logits

# Rows a multiple of 32 (every block type's block) in every 2-D weight.
LLAMA = dict(hidden_size=64, intermediate_size=96, head_dim=16)
GEMMA3 = dict(vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=7,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
              sliding_window=4, query_pre_attn_scalar=16)
TOKENS = np.random.default_rng(3).integers(0, 101, (2, 12))


@pytest.fixture(scope="module")
def tiny_llama():
    return build_torch_model("llama_gqa", **LLAMA)


@pytest.fixture(scope="module")
def tiny_gemma3():
    return random_torch_model("Gemma3TextConfig", "Gemma3ForCausalLM", GEMMA3)


def imported_tensors(path):
    return load_file(path / "model.safetensors")


def max_diff(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float32) - np.asarray(b, np.float32))))


def leftovers(parent, name):
    return [p.name for p in parent.iterdir() if name in p.name]


@pytest.mark.parametrize("type_name", WRITABLE_TYPES)
def test_each_tensor_type_imports_as_the_dequantised_hf_tensor(type_name, tiny_llama, tmp_path):
    file = write_gguf(tmp_path / "tiny.gguf", tiny_llama, "llama", type_name)
    imported = imported_tensors(import_gguf(file, tmp_path / "out").path)
    original = {k: v.float().numpy() for k, v in tiny_llama.state_dict().items()}
    assert sorted(imported) == sorted(original)
    worst = 0.0
    for key, value in original.items():
        # Quantisation is row-wise, so dequantise(quantise(permute(W))) = permute(dequantise(quantise(W))):
        # the import must give back exactly what the file holds, in Hugging Face's row order.
        expected = round_trip(value, type_name)
        assert imported[key].dtype == np.float32 and imported[key].shape == value.shape, key
        assert max_diff(imported[key], expected) == 0.0, (key, max_diff(imported[key], expected))
        worst = max(worst, max_diff(imported[key], value) / float(np.abs(value).max()))
    print(f"{type_name}: every tensor equals the file's; worst error against fp32 {worst:.1e} of max")
    assert worst < 0.15


def test_imported_llama_gives_transformers_logits_in_nash_jax_and_transformers(tiny_llama, tmp_path):
    file = write_gguf(tmp_path / "tiny.gguf", tiny_llama, "llama", "F32")
    out = import_gguf(file, tmp_path / "out").path
    expected = torch_logits(tiny_llama, TOKENS)
    ours, _ = load_pretrained(out)(jnp.asarray(TOKENS))
    theirs = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, gguf_file=file.name, dtype=torch.float32).eval()
    diffs = {"nash_jax": max_diff(ours, expected), "transformers": max_diff(torch_logits(theirs, TOKENS),
                                                                            expected),
             "transformers' GGUF loader": max_diff(torch_logits(reference, TOKENS), expected)}
    print("imported tiny llama, max |logit - original|:", {k: f"{v:.1e}" for k, v in diffs.items()})
    assert diffs["nash_jax"] <= 1e-4 and diffs["transformers"] <= 1e-5, diffs
    assert diffs["transformers' GGUF loader"] <= 1e-5, diffs


def test_tokenizer_encodes_as_transformers_gguf_tokenizer(tiny_llama, tmp_path):
    file = write_gguf(tmp_path / "tiny.gguf", tiny_llama, "llama", "F32")
    out = import_gguf(file, tmp_path / "out").path
    ours = transformers.AutoTokenizer.from_pretrained(out)
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file=file.name)
    for text in ["the theme", "  th he!", "<|im_start|>user\nhi<|im_end|>"]:
        assert ours(text).input_ids == theirs(text).input_ids, text
    chat = [{"role": "user", "content": "the he"}]
    assert ours.apply_chat_template(chat, tokenize=False) == theirs.apply_chat_template(chat,
                                                                                        tokenize=False)
    assert (ours.bos_token, ours.eos_token) == ("<|im_start|>", "<|im_end|>")
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == 2


def test_bfloat16_import_is_the_float32_import_rounded(tiny_llama, tmp_path):
    file = write_gguf(tmp_path / "tiny.gguf", tiny_llama, "llama", "Q8_0")
    f32 = imported_tensors(import_gguf(file, tmp_path / "f32").path)
    bf16 = imported_tensors(import_gguf(file, tmp_path / "bf16", dtype="bfloat16").path)
    for key, value in f32.items():
        assert bf16[key].dtype.name == "bfloat16"
        assert max_diff(bf16[key], value.astype(bf16[key].dtype)) == 0.0, key
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["dtype"] == "bfloat16"


def test_gemma3_imports_tensor_by_tensor_with_its_config(tiny_gemma3, tmp_path):
    file = write_gguf(tmp_path / "gemma.gguf", tiny_gemma3, "gemma3", "F32")
    out = import_gguf(file, tmp_path / "out").path
    imported = imported_tensors(out)
    original = {k: v.float().numpy() for k, v in tiny_gemma3.state_dict().items()
                if k != "lm_head.weight"}  # tied
    assert sorted(imported) == sorted(original)
    for key, value in original.items():  # norms come back from w + 1 - 1, exact to float32 rounding
        assert max_diff(imported[key], value) <= 1e-6, (key, max_diff(imported[key], value))
    config = json.loads((out / "config.json").read_text())
    want = tiny_gemma3.config.to_dict()
    for key in ("model_type", "layer_types", "sliding_window", "head_dim", "query_pre_attn_scalar",
                "rope_parameters", "num_key_value_heads", "tie_word_embeddings", "hidden_size",
                "num_hidden_layers", "vocab_size", "hidden_activation"):
        assert config[key] == want[key], (key, config[key], want[key])
    assert config["architectures"] == ["Gemma3ForCausalLM"]
    assert config["rms_norm_eps"] == pytest.approx(want["rms_norm_eps"])
    # (transformers' own GGUF loader is no reference here: it leaves query_pre_attn_scalar at 256,
    # the value of the real Gemma 3 files up to 12B, where llama.cpp reads head_dim (16 in this one).)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    expected = torch_logits(tiny_gemma3, TOKENS)
    diff = max_diff(torch_logits(theirs, TOKENS), expected)
    ours, _ = load_pretrained(out)(jnp.asarray(TOKENS))
    print(f"imported tiny gemma3 vs the original, max |Δlogit|: transformers {diff:.1e}, "
          f"nash_jax {max_diff(ours, expected):.1e}")
    assert diff <= 1e-5 and max_diff(ours, expected) <= 1e-4, (diff, max_diff(ours, expected))


def test_gemma3_sliding_window_metadata_sets_its_rope_pattern_and_attention_scale(tmp_path):
    values = dict(GEMMA3, query_pre_attn_scalar=64,
                  layer_types=["full_attention" if i % 3 == 2 else "sliding_attention" for i in range(7)],
                  rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                   "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}})
    model = random_torch_model("Gemma3TextConfig", "Gemma3ForCausalLM", values)
    metadata = {"gemma3.rope.freq_base_swa": 100.0, "gemma3.attention.sliding_window_pattern": 3,
                "gemma3.attention.scale": 0.125}  # 64 ** -0.5
    file = write_gguf(tmp_path / "gemma.gguf", model, "gemma3", "F32", extra_metadata=metadata)
    out = import_gguf(file, tmp_path / "out").path
    config = json.loads((out / "config.json").read_text())
    want = model.config.to_dict()
    for key in ("layer_types", "rope_parameters", "query_pre_attn_scalar"):
        assert config[key] == want[key], (key, config[key], want[key])
    expected = torch_logits(model, TOKENS)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    ours, _ = load_pretrained(out)(jnp.asarray(TOKENS))
    assert max_diff(torch_logits(theirs, TOKENS), expected) <= 1e-5
    assert max_diff(ours, expected) <= 1e-4, max_diff(ours, expected)


def test_import_needs_no_torch(tiny_llama, tmp_path):
    file = write_gguf(tmp_path / "tiny.gguf", tiny_llama, "llama", "Q8_0")
    # sys.modules["torch"] = None: `import torch` fails, and transformers finds no torch either.
    code = ("import sys; sys.modules['torch'] = None; from nash_jax.models.gguf import import_gguf; "
            f"import_gguf({str(file)!r}, {str(tmp_path / 'no_torch')!r})")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    with_torch = imported_tensors(import_gguf(file, tmp_path / "with_torch").path)
    without = imported_tensors(tmp_path / "no_torch")
    assert all(np.array_equal(without[key], value) for key, value in with_torch.items())


def test_cli_prints_one_line_and_refuses_an_existing_directory(tiny_llama, tmp_path, capsys):
    file = write_gguf(tmp_path / "tiny.gguf", tiny_llama, "llama", "Q4_0")
    assert cli.main(["import-gguf", str(file), str(tmp_path / "out"), "--dtype", "bfloat16"]) == 0
    line = capsys.readouterr().out.strip()
    assert "\n" not in line and "llama (LlamaForCausalLM)" in line and "parameters" in line, line
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    assert cli.main(["import-gguf", str(file), str(tmp_path / "taken")]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "refusing to replace" in error, error
    assert os.listdir(tmp_path / "taken") == ["notes.txt"]


def test_a_full_disk_is_one_line_and_leaves_no_directory_it_made(tiny_llama, tmp_path, capsys, monkeypatch):
    from safetensors import SafetensorError

    from nash_jax.models import hf

    def full(*args, **kwargs):
        raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, '
                              'message: "No space left on device" })')

    file = write_gguf(tmp_path / "tiny.gguf", tiny_llama, "llama", "Q8_0")
    monkeypatch.setattr(hf, "save_file", full)
    assert cli.main(["import-gguf", str(file), str(tmp_path / "new" / "parents" / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "No space left on device" in error and "model.safetensors" in error, error
    assert sorted(os.listdir(tmp_path)) == ["tiny.gguf"]  # new/parents/ went with the failure


def test_a_rerun_removes_what_a_killed_import_left_beside_out_dir(tiny_llama, tmp_path):
    """A SIGKILLed import leaves its hidden temporary (and a packaged checkpoint's scratch) beside
    OUT_DIR, named with its pid; the next import removes those of dead processes, not a live one's."""
    file = write_gguf(tmp_path / "tiny.gguf", tiny_llama, "llama", "Q8_0")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    from nash_jax.runs.files import _HOST

    stale = [tmp_path / f".out.nash-jax-{dead}-{_HOST}-abc123.tmp",
             tmp_path / f".out.nash-jax-{dead}-{_HOST}-scratch-x1.tmp",
             tmp_path / f".out.nash-jax-{os.getpid()}-{_HOST}-x9.tmp"]  # this pid, not made here: a
    live = tmp_path / f".out.nash-jax-{os.getppid()}-{_HOST}-live99.tmp"   # container's repeated pid
    elsewhere = tmp_path / f".out.nash-jax-{dead}-otherhost-y2.tmp"  # another host's: cannot tell
    for d in (*stale, live, elsewhere):
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"partial")
    other = tmp_path / ".out.someone-else.tmp"
    other.write_text("not ours")
    assert cli.main(["import-gguf", str(file), str(tmp_path / "out")]) == 0
    assert not any(d.exists() for d in stale) and live.is_dir() and elsewhere.is_dir() and other.is_file()


def test_bad_arguments_are_refused_before_jax_is_loaded(tmp_path):
    """Refusals come in about a second: nothing heavy is imported before the arguments are checked."""
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "mine.txt").write_text("mine")
    code = ("import sys; from nash_jax import cli; "
            f"status = cli.main(['import-gguf', {str(tmp_path / 'none.gguf')!r}, {str(tmp_path / 'o')!r}]); "
            f"status2 = cli.main(['import-gguf', 'package:nothing', {str(tmp_path / 'o')!r}]); "
            f"status3 = cli.main(['import-gguf', 'package:smollm2', {str(tmp_path / 'taken')!r}]); "
            "print(status, status2, status3, 'jax' in sys.modules, 'transformers' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["2", "2", "2", "False", "False"], (done.stdout, done.stderr)
    assert "GGUF file" in done.stderr and "package:nothing" in done.stderr and "refusing" in done.stderr
    assert not (tmp_path / "o").exists()


def _unknown_architecture(tiny_llama, path):
    tensors = gguf_tensors(tiny_llama, "llama")
    write_gguf(path, tiny_llama, "falcon", tensors=tensors)
    return "architecture 'falcon' is not supported; supported: ['gemma2', 'gemma3', 'llama'"


def _unsupported_type(tiny_llama, path):
    write_gguf(path, tiny_llama, "llama")
    reader = gguf.GGUFReader(path)  # relabel one tensor as a type the gguf package cannot read
    tensor = next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight")
    _retype(path, tensor, gguf.GGMLQuantizationType.Q8_1)
    return "tensor blk.0.attn_q.weight"


def _truncated(tiny_llama, path):
    write_gguf(path, tiny_llama, "llama")
    data = path.read_bytes()
    path.write_bytes(data[:len(data) - 5000])
    return "is not a complete GGUF file"


def _corrupt(tiny_llama, path):
    path.write_bytes(b"GGUX" + bytes(200))
    return "is not a complete GGUF file"


def _unmapped_name(tiny_llama, path):
    tensors = gguf_tensors(tiny_llama, "llama")
    tensors["blk.0.attn_gate.weight"] = np.zeros((64, 64), np.float32)
    write_gguf(path, tiny_llama, "llama", tensors=tensors)
    return "tensor blk.0.attn_gate.weight has no Hugging Face name"


def _only_embedding(tiny_llama, path):
    tensors = {"token_embd.weight": gguf_tensors(tiny_llama, "llama")["token_embd.weight"]}
    write_gguf(path, tiny_llama, "llama", tensors=tensors)
    return "missing tensor 'model.layers.0."  # every layer (and so "... and N more"), not tied


def _mis_shaped(tiny_llama, path):
    tensors = gguf_tensors(tiny_llama, "llama")
    tensors["blk.1.ffn_up.weight"] = tensors["blk.1.ffn_up.weight"][:64]
    write_gguf(path, tiny_llama, "llama", tensors=tensors)
    return "tensor 'model.layers.1.mlp.up_proj.weight' has shape [64, 64]; expected [96, 64]"


def _layer_beyond_the_count(tiny_llama, path):
    tensors = gguf_tensors(tiny_llama, "llama")
    tensors["blk.9.attn_norm.weight"] = np.ones(64, np.float32)
    write_gguf(path, tiny_llama, "llama", tensors=tensors)
    return "(1 problems): unexpected tensor 'model.layers.9.input_layernorm.weight'"


def _no_vocabulary(tiny_llama, path):
    write_gguf(path, tiny_llama, "llama", tokenizer=False)
    return "metadata tokenizer.ggml.tokens is missing"


def _merge_out_of_vocabulary(tiny_llama, path):
    write_gguf(path, tiny_llama, "llama", merges=["t h", "zz q"])  # the tokenizers library: Exception
    return "cannot build its tokenizer from the tokenizer.* metadata: Error while initializing BPE"


def _attention_scale_on_llama(tiny_llama, path):
    write_gguf(path, tiny_llama, "llama", extra_metadata={"llama.attention.scale": 0.5})
    return "metadata llama.attention.scale (the attention's query scale) is not supported"


def _sliding_pattern_on_llama(tiny_llama, path):
    write_gguf(path, tiny_llama, "llama",
               extra_metadata={"llama.attention.sliding_window_pattern": 2})
    return "metadata llama.attention.sliding_window_pattern (which layers attend in a sliding window)"


def _retype(path, tensor, qtype):
    """Rewrite the type id of `tensor` in its info record, in place (it follows the name, dims)."""
    data = bytearray(path.read_bytes())
    name = tensor.name.encode()
    start = data.index(name) + len(name) + 4 + 8 * len(tensor.shape)
    assert int.from_bytes(data[start:start + 4], "little") == tensor.tensor_type
    data[start:start + 4] = int(qtype).to_bytes(4, "little")
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("make", [_unknown_architecture, _unsupported_type, _truncated, _corrupt,
                                  _unmapped_name, _only_embedding, _mis_shaped,
                                  _layer_beyond_the_count, _no_vocabulary, _merge_out_of_vocabulary,
                                  _attention_scale_on_llama, _sliding_pattern_on_llama],
                         ids=lambda f: f.__name__.strip("_"))
def test_bad_files_are_one_line_errors_before_any_tensor_is_dequantised(make, tiny_llama, tmp_path,
                                                                         monkeypatch):
    expected = make(tiny_llama, tmp_path / "bad.gguf")
    dequantised = []
    monkeypatch.setattr(gguf_import, "dequantize", lambda tensor, file: dequantised.append(tensor.name))
    with pytest.raises(ValueError) as err:
        import_gguf(tmp_path / "bad.gguf", tmp_path / "out")
    message = str(err.value)
    print(message)
    assert expected in message and "\n" not in message and "bad.gguf" in message, message
    assert dequantised == [] and leftovers(tmp_path, "out") == []


def test_a_file_of_one_embedding_names_a_few_missing_tensors_and_counts_the_rest(tiny_llama,
                                                                                 tmp_path):
    _only_embedding(tiny_llama, tmp_path / "bad.gguf")
    with pytest.raises(ValueError, match=r"\(\d+ problems\): missing tensor .*; and \d+ more$") as err:
        import_gguf(tmp_path / "bad.gguf", tmp_path / "out")
    assert str(err.value).count("missing tensor") == 3, str(err.value)


def test_tensors_are_dequantised_shard_by_shard_as_they_are_written(tiny_llama, tmp_path,
                                                                    monkeypatch):
    file = write_gguf(tmp_path / "tiny.gguf", tiny_llama, "llama", "Q8_0")
    events, dequantize, save_file = [], gguf_import.dequantize, hf.save_file

    def dequantize_logged(tensor, file):
        events.append("dequantise")
        return dequantize(tensor, file)

    def save_logged(shard, *args, **kwargs):
        events.append(len(shard))
        return save_file(shard, *args, **kwargs)

    monkeypatch.setattr(gguf_import, "dequantize", dequantize_logged)
    monkeypatch.setattr(hf, "save_file", save_logged)
    out = import_gguf(file, tmp_path / "out", max_shard_bytes=40_000).path
    # each shard's tensors are dequantised just before it is saved: never more than one shard's
    shards, pending = [], 0
    for event in events:
        if event == "dequantise":
            pending += 1
        else:
            shards.append((pending, event))  # (dequantised since the last save, tensors saved)
            pending = 0
    assert len(shards) > 2 and pending == 0 and all(n == saved for n, saved in shards), events
    expected = torch_logits(tiny_llama, TOKENS)
    ours, _ = load_pretrained(out)(jnp.asarray(TOKENS))
    assert max_diff(ours, expected) <= 0.05, max_diff(ours, expected)
