"""One SPPO update step of SmolLM2-135M-Instruct with LoRA (rank 16, alpha 32, every attention and MLP
projection; model.lora) against the full-weight step, and against PEFT + torch doing the same LoRA
step (peft.get_peft_model over transformers, AdamW over the adapters, global-norm clipping): time and
peak memory (RSS) of each, each implementation in its own subprocess, on the same weights and batch.

    python tools/bench/lora_step.py --model-dir DIR [--batch 8] [--length 128] [--repeats 3]

DIR: SmolLM2 as an HF directory (`nash-jax import-gguf package:smollm2 DIR`). Two JSON lines:
sppo_lora_step_smollm2_vs_full (peer: our full step) and sppo_lora_step_smollm2_vs_peft.
"""

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
from common import emit
from train_step import ETA, make_batch, torch_seq_logp, torch_sppo_loss

LR = 2e-4
RANK, ALPHA = 16, 32.0
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def run_jax(model_dir, batch, repeats, lora):
    import jax
    from common import timings

    from nash_jax import parallel
    from nash_jax.config import LoraConfig, OptimizerConfig
    from nash_jax.models import load_pretrained
    from nash_jax.models import lora as lora_lib
    from nash_jax.train import (
        init_train_state,
        make_logprobs,
        make_optimizer,
        make_step,
    )

    mesh = parallel.make_mesh(devices=jax.devices()[:1])
    tx, schedule = make_optimizer(OptimizerConfig(name="adamw", learning_rate=LR, schedule="constant",
                                                  warmup_ratio=0.0, clip_norm=1.0), 1000)
    model = load_pretrained(model_dir)
    if lora:
        lora_lib.add_adapters(model, LoraConfig(rank=RANK, alpha=ALPHA, targets=TARGETS))
    model_def, state, shardings = init_train_state(model, tx, mesh=mesh)
    batch["anchor_logp"] = np.asarray(make_logprobs(model_def, mesh)(state.params, batch))
    step = make_step("sppo", model_def, tx, schedule, shardings, mesh, eta=ETA)
    placed = step.place(batch)
    holder = {"state": state, "losses": []}

    def one_step():
        holder["state"], metrics = step.jitted(holder["state"], placed)
        holder["losses"].append(float(metrics["loss"]))

    compile_s, times = timings(one_step, repeats=repeats)
    return {"loss": holder["losses"][0], "times": times, "compile_s": compile_s}


def run_peft(model_dir, batch, repeats):
    import peft
    import torch
    import transformers
    from common import timings

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    model = peft.get_peft_model(model, peft.LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0,
                                                       target_modules=TARGETS))
    trained = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trained, lr=LR, weight_decay=0.0, eps=1e-8)
    win = torch.from_numpy(batch["win_rate"])
    with torch.no_grad():
        anchor = torch_seq_logp(model, batch["tokens"], batch["loss_mask"])
    losses = []

    def one_step():
        opt.zero_grad(set_to_none=True)
        loss = torch_sppo_loss(torch_seq_logp(model, batch["tokens"], batch["loss_mask"]), anchor,
                               win, ETA)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        opt.step()
        losses.append(float(loss.detach()))

    first_s, times = timings(one_step, repeats=repeats)
    return {"loss": losses[0], "times": times, "compile_s": first_s,
            "threads": torch.get_num_threads()}


def child(impl, model_dir, b, t, repeats):
    vocab = json.loads((Path(model_dir) / "config.json").read_text())["vocab_size"]
    batch = make_batch(b, t, vocab)
    result = (run_peft(model_dir, batch, repeats) if impl == "peft"
              else run_jax(model_dir, batch, repeats, lora=impl == "lora"))
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


def run(impl, model_dir, b, t, repeats):
    out = subprocess.run([sys.executable, __file__, "--batch", str(b), "--length", str(t),
                          "--repeats", str(repeats), "--child", impl, str(model_dir)],
                         capture_output=True, text=True, cwd=Path(__file__).parent, check=False)
    if out.returncode:
        sys.exit(f"{impl} run failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", nargs=2, metavar=("IMPL", "MODEL_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    b, t = args.batch, args.length
    if args.child:
        return child(*args.child, b, t, args.repeats)
    if not args.model_dir or not (Path(args.model_dir) / "config.json").is_file():
        sys.exit(f"--model-dir {args.model_dir}: expected an HF directory with config.json "
                 "(nash-jax import-gguf package:smollm2 DIR)")
    model_dir = Path(args.model_dir).resolve()  # the children run beside this script
    results = {impl: run(impl, model_dir, b, t, args.repeats) for impl in ("lora", "full", "peft")}
    ours = results["lora"]
    ours_s = float(np.median(ours["times"]))
    for peer_name, peer in (("full", "nash_jax full-weight SPPO step (AdamW over every parameter)"),
                            ("peft", "peft LoraModel + torch AdamW over the adapters")):
        other = results[peer_name]
        peer_s = float(np.median(other["times"]))
        emit(case=f"sppo_lora_step_smollm2_vs_{peer_name}", batch=b, length=t, rank=RANK,
             time_s=round(ours_s, 4), compile_s=round(ours["compile_s"], 2),
             peak_rss_mib=round(ours["peak_rss_mib"]), peer=peer, peer_time_s=round(peer_s, 4),
             peer_peak_rss_mib=round(other["peak_rss_mib"]), ratio=round(peer_s / ours_s, 3),
             memory_ratio=round(other["peak_rss_mib"] / ours["peak_rss_mib"], 3),
             first_loss=ours["loss"], peer_first_loss=other["loss"], fraction_of_peak=None)


if __name__ == "__main__":
    main()
