"""Held-out accuracy under a verifier: each iterate's greedy response to every held-out prompt, checked
by `eval.verifier` (a function named by import path, as a python judge is).

The verifier takes (prompts, responses) — the prompts as the user wrote them, before any chat
template — and returns one dict per pair with at least "correct" (bool); "answer" and "formatted"
(bool) are read when present, and every field is kept. Per iterate this gives:

  heldout_accuracy      the share of correct greedy responses
  heldout_format_rate   the share the verifier calls well formatted (when it says)
  heldout_finished      the share that ended with EOS before eval.max_new_tokens

Each iterate's responses are a cached stage (eval/heldout_<name>, RUN_DIR/eval/heldout_<name>.jsonl);
`write_all` joins them into RUN_DIR/eval/heldout.jsonl (fields iterate, prompt, answer, response,
correct, finished, and what else the verifier returned), so that anyone can re-decode the exported
iterates and compare.
"""

import dataclasses
import json

import numpy as np

from nash_jax import runs
from nash_jax.judges.simple import import_function
from nash_jax.rollout.batches import sample_rows

def verify(run, label, load_model, prompts, prompt_ids, tokenizer, mesh, *, verifier, sampling,
           max_new_tokens, seed):
    """{metric: value} of iterate `label` (stage eval/heldout_<label>; `load_model()` is called only
    when the stage is not done yet). verifier: eval.verifier's import path; sampling: the run's
    sampling section (made greedy here); max_new_tokens: eval.max_new_tokens; seed: the run's."""
    stage, path = f"eval/heldout_{label}", run / "eval" / f"heldout_{label}.jsonl"
    if run.done(stage):
        return run.info(stage)
    greedy = dataclasses.replace(sampling, temperature=0.0, top_p=1.0, top_k=0)
    columns = sample_rows(load_model(), tokenizer, prompt_ids, num_samples=1, sampling=greedy, mesh=mesh,
                          desc=f"held-out {label}", max_new_tokens=max_new_tokens,
                          key_of=lambda b: runs.stage_key(seed, 0, "heldout", b))
    responses = [r[0] for r in columns["responses"]]
    verdicts = checked_verdicts(verifier, prompts, responses)
    rows = [{"iterate": label, "prompt": prompt, "answer": verdict.get("answer"), "response": response,
             **verdict, "correct": bool(verdict["correct"]), "finished": bool(finished[0])}
            for prompt, response, verdict, finished in zip(prompts, responses, verdicts,
                                                           columns["finished"])]
    runs.write_text_atomically(path, "".join(json.dumps(row, default=_plain) + "\n" for row in rows))
    metrics = {"heldout_accuracy": float(np.mean([r["correct"] for r in rows])),
               "heldout_finished": float(np.mean([r["finished"] for r in rows]))}
    if all("formatted" in v for v in verdicts):
        metrics["heldout_format_rate"] = float(np.mean([bool(v["formatted"]) for v in verdicts]))
    run.finish(stage, [str(path.relative_to(run.path))], **metrics)
    return metrics


def checked_verdicts(spec, prompts, responses):
    """The verifier's verdicts, checked: one dict with "correct" per response (ValueError otherwise)."""
    verdicts = list(import_function(spec, "eval.verifier")(prompts, responses))
    if len(verdicts) != len(responses) or not all(isinstance(v, dict) and "correct" in v
                                                  for v in verdicts):
        raise ValueError(f"eval.verifier={spec!r} returned {len(verdicts)} verdicts for {len(responses)} "
                         "responses; expected one dict with a \"correct\" field per response")
    return verdicts


def write_all(run, names):
    """RUN_DIR/eval/heldout.jsonl: the rows of every iterate in `names`, in that order."""
    text = "".join((run / "eval" / f"heldout_{name}.jsonl").read_text() for name in names)
    runs.write_text_atomically(run / "eval" / "heldout.jsonl", text)


def _plain(value):
    """A verifier's numpy scalar as JSON (anything else as its text)."""
    return value.item() if hasattr(value, "item") else str(value)
