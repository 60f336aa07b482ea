"""K samples per prompt from an exported policy with vLLM (`sampling.engine: vllm`), in a subprocess
of `sampling.vllm_python` running rollout/vllm_worker.py: it holds the device only while it samples.

The parent writes the request (the policy's HF directory, the prompts in batches of
sampling.prompts_per_batch with their seeds, K, temperature, top-p, top-k, the token budget and the EOS
ids) into a work directory of the stage; the worker writes one file per finished batch there. A stage
killed midway keeps the batches whose files are there (same request digest) and asks the worker only
for the rest. Seeds come from the run's (seed, iteration, stage, batch) keys, as the nash_jax
sampler's do: prompt i of batch b is sampled with the seed of fold_in(key_b, i) (vllm_worker.py).
"""

import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np

from nash_jax import runs

WORKER = Path(__file__).with_name("vllm_worker.py")
MISSING_VLLM_EXIT = 3  # vllm_worker.MISSING_VLLM_EXIT (the worker imports nothing of nash_jax)
PYTHON_ENV = "NASH_JAX_VLLM_PYTHON"  # what the tests read for sampling.vllm_python


def interpreter(vllm_python):
    """The Python that runs the worker: sampling.vllm_python, or this one when it is null."""
    return vllm_python or sys.executable


def missing_vllm(vllm_python):
    """The one-line reason why `vllm_python`'s interpreter cannot run vLLM, or None when it can."""
    python = interpreter(vllm_python)
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"
    try:
        found = subprocess.run([python, "-c", probe], capture_output=True, timeout=120,
                               check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired) as err:
        return (f"sampling.vllm_python={vllm_python!r} cannot be run ({type(err).__name__}: {err}); "
                "expected the path of a Python interpreter that has vllm")
    if found:
        return None
    where = "this interpreter" if vllm_python is None else f"sampling.vllm_python={vllm_python}"
    return (f"sampling.engine=vllm needs the vllm package, and {where} ({python}) has none: pip install "
            "'nash-jax[vllm]' (a GPU), or point sampling.vllm_python at an environment that has vllm")


def prompt_seeds(key, size):
    """One seed per prompt of a batch (non-negative 31-bit ints): prompt i's from fold_in(key, i),
    `key` being the batch's (seed, iteration, stage, batch) key."""
    import jax

    return [int(jax.random.randint(jax.random.fold_in(key, i), (), 0, 2**31 - 1)) for i in range(size)]


def request_of(policy_dir, batches, *, num_samples, sampling, max_new_tokens, eos_ids, dtype,
               engine_seed, max_prompt_len):
    """The worker's request, without out_dir; its digest names everything the samples depend on (the
    policy by its files' sizes and modification times: a re-exported policy is another request)."""
    policy_dir = Path(policy_dir).resolve()
    files = {p.name: [p.stat().st_size, p.stat().st_mtime_ns] for p in sorted(policy_dir.glob("*"))
             if p.is_file()}
    request = {"model": str(policy_dir), "model_files": files, "dtype": dtype,
               "max_model_len": int(max_prompt_len + max_new_tokens), "engine_seed": int(engine_seed),
               "n": num_samples, "temperature": float(sampling.temperature),
               "top_p": float(sampling.top_p), "top_k": int(sampling.top_k),
               "max_tokens": int(max_new_tokens), "stop_token_ids": [int(i) for i in eos_ids],
               "batches": batches}
    request["digest"] = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()[:16]
    return request


def finished_batches(work_dir, digest):
    """{index: the worker's output} of the batch files in `work_dir` made for the request `digest`."""
    out = {}
    for path in sorted(Path(work_dir).glob("batch_*.json")):
        try:
            value = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # written by rename, so never partial; unreadable: redo it
        if value.get("digest") == digest:
            out[value["index"]] = value
    return out


def run_worker(request, work_dir, vllm_python, *, on_batch=lambda index: None, on_ready=lambda: None):
    """Run the worker on the request's batches not yet in `work_dir`; on_batch(index) after each one
    it finishes (the caller's crash points and progress), on_ready() once vLLM has started (a
    benchmark's clock). Returns the batches' outputs by index."""
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    done = finished_batches(work_dir, request["digest"])
    todo = [b for b in request["batches"] if b["index"] not in done]
    if todo:
        path = work_dir / "request.json"
        runs.write_text_atomically(path, json.dumps({**request, "batches": todo,
                                                     "out_dir": str(work_dir.resolve())}))
        _launch(path, vllm_python, on_batch, on_ready)
        done = finished_batches(work_dir, request["digest"])
    missing = [b["index"] for b in request["batches"] if b["index"] not in done]
    if missing:
        raise RuntimeError(f"the vLLM worker finished without batches {missing} ({work_dir})")
    return done


def _launch(request_path, vllm_python, on_batch, on_ready):
    """Run the worker to its end, calling on_ready() and on_batch(index) as it reports them."""
    python = interpreter(vllm_python)
    env = dict(os.environ)
    if vllm_python is not None:
        env.pop("PYTHONPATH", None)  # this environment's packages are not the other one's
    process = subprocess.Popen([python, str(WORKER), str(request_path)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
    errors = []
    reader = threading.Thread(target=lambda: errors.extend(process.stderr), daemon=True)
    reader.start()
    for line in process.stdout:
        if line.startswith("done "):
            on_batch(int(line.split()[1]))
        elif line.strip() == "ready":
            on_ready()
    process.wait()
    reader.join()
    if process.returncode == MISSING_VLLM_EXIT:
        raise ValueError(missing_vllm(vllm_python) or "".join(errors[-3:]).strip())
    if process.returncode != 0:
        tail = "".join(errors[-40:])
        raise RuntimeError(f"the vLLM worker ({python} {WORKER.name} {request_path}) exited with "
                           f"status {process.returncode}; the end of its output:\n{tail}")


def sample_policy_vllm(policy_dir, prompt_ids, *, num_samples, sampling, key_of,
                       max_new_tokens, eos_ids, dtype, work_dir, on_batch=lambda index: None):
    """K samples per prompt from the HF directory `policy_dir` with vLLM → {"response_ids" [B][K],
    "lengths", "finished", "logp_vllm" (Σ of vLLM's raw log-probs: untempered, untruncated)}."""
    per_batch = sampling.prompts_per_batch
    batches = []
    for index, start in enumerate(range(0, len(prompt_ids), per_batch)):
        prompts = [[int(t) for t in p] for p in prompt_ids[start:start + per_batch]]
        batches.append({"index": index, "seeds": prompt_seeds(key_of(index), len(prompts)),
                        "prompts": prompts})
    engine_seed = batches[0]["seeds"][0] if batches else 0  # unused: every request has its own
    request = request_of(policy_dir, batches, num_samples=num_samples, sampling=sampling,
                         max_new_tokens=max_new_tokens, eos_ids=eos_ids, dtype=dtype,
                         engine_seed=engine_seed,
                         max_prompt_len=max((len(p) for p in prompt_ids), default=1))
    done = run_worker(request, work_dir, sampling.vllm_python, on_batch=on_batch)
    columns = {"response_ids": [], "lengths": [], "finished": [], "logp_vllm": []}
    for b in sorted(done):
        out = done[b]
        for tokens, logprobs, finished in zip(out["tokens"], out["logprobs"], out["finished"]):
            columns["response_ids"].append(tokens)
            columns["lengths"].append([len(t) for t in tokens])
            columns["finished"].append(list(finished))
            columns["logp_vllm"].append([float(np.sum(lp)) for lp in logprobs])
    return columns
