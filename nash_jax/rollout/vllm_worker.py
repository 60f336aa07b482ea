"""The vLLM side of `sampling.engine: vllm`: a script run as `PYTHON vllm_worker.py REQUEST.json` by the
interpreter `sampling.vllm_python` names (a separate environment, since vLLM pins its own torch and
transformers). It imports nothing of nash_jax, only the standard library and vLLM, so that environment
needs no nash_jax; the parent (rollout/vllm_engine.py) writes the request and reads the results.

The request (JSON): {"model": HF directory, "dtype", "max_model_len", "engine_seed", "n" (K),
"temperature", "top_p", "top_k", "max_tokens", "stop_token_ids", "out_dir", "digest",
"batches": [{"index", "seed", "seeds" (one per prompt), "prompts" (token-id lists)}]}.

Each batch is one `LLM.generate` call; its result is written to OUT_DIR/batch_<index>.json by
write-and-rename ({"digest", "index", "tokens" [B][K][n], "logprobs" [B][K][n] (vLLM's raw
log-probs: untempered, untruncated), "finished" [B][K]}) and `done <index>` is printed on stdout, so
that a killed stage keeps its finished batches and redoes the rest.

Seeding: every prompt's request carries its own seed (SamplingParams.seed; vLLM gives its K samples
seed, seed + 1, …), so a prompt's samples do not depend on what else is batched with it. vLLM's CPU
build fails on a seeded request whose prefill is split across steps (chunked prefill): vLLM then
rewinds the request's generator with Generator.set_offset, and torch's CPU generator raises
"CPU Generator does not use offset". On a CPU the worker therefore turns chunked prefill off (every
prompt is prefilled in one step), which keeps per-request seeds working there too.

Stopping: exactly on the request's stop_token_ids (the tokenizer's EOS ids, as nash_jax's sampler
stops): ignore_eos keeps vLLM from adding config.json's or generation_config.json's EOS ids.
"""

import json
import os
import sys

MISSING_VLLM_EXIT = 3  # the parent turns this exit status into its one-line error


def main(request_path):
    with open(request_path) as f:
        request = json.load(f)
    _die_with_parent()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process
    try:
        import vllm  # noqa: F401
    except ImportError as err:
        print(f"no vllm in {sys.executable}: {err}", file=sys.stderr)
        sys.exit(MISSING_VLLM_EXIT)
    llm = engine(request)
    print("ready", flush=True)
    for batch in request["batches"]:
        out = generate_batch(llm, request, batch)
        path = os.path.join(request["out_dir"], f"batch_{batch['index']:06d}.json")
        write_json_atomically(path, out)
        print(f"done {batch['index']}", flush=True)


def engine(request):
    """vllm.LLM on the request's HF directory (on a CPU: chunked prefill off, see the module's
    docstring, and a tenth of the memory for the KV cache, where vLLM's default takes 92 %; on a GPU:
    what is free)."""
    from vllm import LLM
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        device = {"enable_chunked_prefill": False, "enforce_eager": True, "gpu_memory_utilization": 0.1,
                  "max_num_batched_tokens": max(request["max_model_len"], 2048)}
    else:
        device = {"gpu_memory_utilization": _free_share()}
    # the HF directory's generation_config.json would add its sampling defaults: "vllm" keeps
    # vLLM's, and the request names every setting itself
    return LLM(model=request["model"], dtype=request["dtype"], seed=request["engine_seed"],
               max_model_len=request["max_model_len"], skip_tokenizer_init=True,
               generation_config="vllm", **{**device, **request.get("engine_args", {})})


def _free_share():
    """vLLM's gpu_memory_utilization (a share of the whole device) as 90 % of what is free now: the
    JAX process that started this worker keeps its own memory (all it preallocated, unless
    XLA_PYTHON_CLIENT_PREALLOCATE=false), where vLLM's default of 92 % of the device would not fit."""
    import torch

    free, total = torch.cuda.mem_get_info()
    return max(0.05, round(0.9 * free / total, 3))


def generate_batch(llm, request, batch):
    """One batch's K samples per prompt as lists (tokens, vLLM's log-probs, finished)."""
    from vllm import SamplingParams

    params = [SamplingParams(
        n=request["n"], temperature=request["temperature"], top_p=request["top_p"],
        top_k=request["top_k"] if request["top_k"] > 0 else -1, max_tokens=request["max_tokens"],
        stop_token_ids=request["stop_token_ids"], ignore_eos=True, logprobs=0, detokenize=False,
        seed=seed) for seed in batch["seeds"]]
    prompts = [{"prompt_token_ids": ids} for ids in batch["prompts"]]
    outputs = llm.generate(prompts, params, use_tqdm=False)
    tokens, logprobs, finished = [], [], []
    for output in outputs:
        samples = sorted(output.outputs, key=lambda o: o.index)
        tokens.append([list(o.token_ids) for o in samples])
        logprobs.append([[step[t].logprob for step, t in zip(o.logprobs, o.token_ids)] for o in samples])
        finished.append([o.finish_reason == "stop" for o in samples])
    return {"digest": request["digest"], "index": batch["index"], "tokens": tokens,
            "logprobs": logprobs, "finished": finished}


def _die_with_parent():
    """Ask Linux to SIGKILL this process when its parent dies (a killed run leaves no worker holding
    the device)."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:
            sys.exit("vllm_worker: the parent process has already exited")


def write_json_atomically(path, value):
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w") as f:
        json.dump(value, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: vllm_worker.py REQUEST.json")
    main(sys.argv[1])
