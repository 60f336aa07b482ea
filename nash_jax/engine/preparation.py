"""What a run needs before its first stage: the mesh, the tokenizer, the prompt splits and the judge,
and, on the synthetic task, the initial policy π_0 warm-started by a short supervised fit."""

import dataclasses
import numpy as np
from flax import nnx

from nash_jax import engine
from nash_jax.engine import judging, policy_files, prompt_sets
from nash_jax.models.hf_config import config_from_hf
from nash_jax.models.llama import Llama
from nash_jax.rollout.batches import token_batch
from nash_jax.runs import stage_seed
from nash_jax.rollout.sampling import pad_id_of
from nash_jax.engine import planning
from nash_jax.engine.loop import fit_rows
from nash_jax.tasks.registry import tiny_llama_values
from nash_jax.tasks.synthetic import synthetic
from nash_jax.config import OptimizerConfig


def prepare(config, run, *, prompt_blocks=1):
    """(mesh, tokenizer, prompt splits, judge) of a run, with the synthetic task's π_0 made first.

    prompt_blocks: how many disjoint training blocks the prompts are split into (besides the held-out
    ones)."""
    mesh = fitting_mesh(config)
    tokenizer = policy_files.load_policy_tokenizer(config.model, run)
    splits = prompt_sets.prompt_splits(config.data, run, eval_prompts=config.eval.prompts, seed=config.seed,
                                      blocks=prompt_blocks)
    prompt_sets.check_prompt_lengths(config.data, tokenizer, splits)
    judge = judging.make_judge(config.judge, mesh)
    if is_builtin(config):  # check_paths has made sure it is the synthetic task's
        warm_start(config, run, tokenizer, mesh)
    return mesh, tokenizer, splits, judge


def is_builtin(config):
    """Whether the run's policy is a built-in task's tiny model (tasks.registry), warm-started in the
    run by its recipe, rather than a model directory."""
    return policy_files.builtin_model(config.model.path) is not None


def fitting_mesh(config):
    """The config's mesh (policy_files.make_mesh), after checking that the recipe's batches split
    over it (its Recipe.batch_sizes) and that its step can fit its devices: a run that cannot stops
    here, in seconds, before any weights are read or fitted."""
    batch_sizes = engine.get(config.recipe).batch_sizes(config)
    mesh = policy_files.make_mesh(config.mesh, config.train.micro_batches, batch_sizes)
    planning.check_before_loading(config, mesh)
    return mesh


def warm_start(config, run, tokenizer, mesh):
    """Fit a tiny Llama to the synthetic task's demonstrations and export it as π_0 (stage `init`)."""
    if run.done("init"):
        return
    w = config.warm_start
    model = tiny_llama(config, tokenizer)
    rng = np.random.default_rng(stage_seed(config.seed, 0, "warm_start"))
    prompts = synthetic.prompt_texts(w.steps * w.batch_size, seed=rng.integers(1 << 31))
    prompt_ids, _, _ = prompt_sets.encode_prompts(config.data, tokenizer, prompts, "warm-start prompts",
                                                 too_long="truncate_left")
    demonstrations = [(p, synthetic.demonstration(text, rng)) for p, text in zip(prompt_ids, prompts)]
    fit_demonstrations(config, run, model, demonstrations, tokenizer, synthetic.TOKENIZER_DIR, mesh)


def tiny_llama(config, tokenizer):
    """A freshly initialised Llama of the `warm_start` section's size for `tokenizer`'s vocabulary."""
    w = config.warm_start
    llama = config_from_hf(tiny_llama_values(len(tokenizer), w.hidden_size, w.num_layers),
                           source="tasks.registry.tiny_llama_values")
    # exported from its fields (hf_config_from), as before, not from the values it was built from
    return Llama(dataclasses.replace(llama, hf_config={}), rngs=nnx.Rngs(config.seed))


def fit_demonstrations(config, run, model, demonstrations, tokenizer, tokenizer_dir, mesh,
                       micro_batches=1, logprob_chunk=None):
    """The warm start: one supervised epoch of `model` on (prompt ids, response text) pairs (EOS
    appended to each response), exported with `tokenizer_dir`'s files as π_0 (RUN_DIR/init/policy);
    finishes stage `init`. A real model's fit passes train.micro_batches and train.logprob_chunk."""
    w, eos = config.warm_start, tokenizer.eos_token_id
    rows = [{"prompt_ids": p, "response_ids": tokenizer(text, add_special_tokens=False)["input_ids"] + [eos]}
            for p, text in demonstrations]
    pad_id = pad_id_of(tokenizer)

    def to_batch(batch):
        return token_batch([r["prompt_ids"] for r in batch], [r["response_ids"] for r in batch], pad_id)

    optimizer = OptimizerConfig(name="adamw", learning_rate=w.learning_rate, schedule="cosine",
                                warmup_ratio=0.05, clip_norm=1.0)
    model = fit_rows(run, "init", model, rows, objective="sft", to_batch=to_batch, optimizer=optimizer,
                     batch_size=w.batch_size, epochs=1, seed=stage_seed(config.seed, 0, "warm_start"),
                     checkpoint_every=w.checkpoint_every or config.train.checkpoint_every, mesh=mesh,
                     micro_batches=micro_batches, logprob_chunk=logprob_chunk)
    policy_files.export_policy(model, run / "init" / "policy", tokenizer_dir)
    run.finish("init", ["init/policy"], examples=len(rows))
