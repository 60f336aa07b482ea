"""The online-training layer every online recipe builds on (Nash-MD, GRPO, proposer–solver, game
self-play, bug injection).

What these recipes set up alike lives here once, so that a `train.*` field means the same in each:
π_θ loaded from its initial directory, the optimiser over the recipe's steps, the train state, the one
compiled step (with `train.micro_batches` and `train.logprob_chunk`), the sampling settings, parameter
copies that outlive the donated state, snapshot export, π_0's log-probs for a KL towards it, and the
resumable loop (with `train.checkpoint_every` and `train.max_skipped_fraction`). A recipe keeps only what is its own: what
one step samples, scores and trains on.
"""

from dataclasses import dataclass

import jax
import numpy as np

from nash_jax import parallel
from nash_jax.parallel.padding import round_up
from nash_jax.engine import policy_files
from nash_jax.engine.loop import train_loop
from nash_jax.engine.policy_files import optimizer_config
from nash_jax.engine.plan import StepShape
from nash_jax.rollout.sampling import eos_ids_of, pad_id_of
from nash_jax.train import init_train_state, make_optimizer, make_step
from nash_jax.train.steps import token_logprobs


@dataclass
class OnlineTraining:
    config: object  # the run config
    run: object  # the RunDir
    mesh: object
    initial: object  # π_0 as a module (lends its structure to the sampler, which takes params apart)
    model_def: object  # nnx graph definition: merge(params) is the policy
    state: object  # TrainState; donated to each step, so keep copies with `copy`
    step_fn: object  # the compiled step (train/steps.py:Step)
    tokenizer_dir: object  # tokenizer files written beside every exported snapshot

    def export(self, params, directory):
        """Write the policy with `params` as a Hugging Face directory (a snapshot)."""
        policy_files.export_policy(self.model_def.merge(params), directory, self.tokenizer_dir)

    def reference_logprobs(self):
        """batch -> ref_logp [N, T] under π_0 at the sampling temperature (the `pg_kl` objective's KL
        towards it, between the two tempered policies). Call it before the first step: the state holds
        π_0 until then, on a resume too (the loop restores it later)."""
        return reference_logprobs(self.model_def, copy(self.state.params), self.mesh,
                                  self.config.sampling.temperature)

    def loop(self, stage, *, total, work, **kwargs):
        """train_loop over this state with the run's checkpointing and skip limit; → (state, extra)."""
        t = self.config.train
        return train_loop(self.run, stage, state=self.state, total=total, work=work,
                          checkpoint_every=t.checkpoint_every, max_skipped_fraction=t.max_skipped_fraction,
                          **kwargs)


def start(config, run, mesh, *, initial_dir, tokenizer_dir, objective, total_steps, **hyperparameters):
    """Load π_0 from `initial_dir` and build the train state and the step of `objective` (its
    hyperparameters as keywords) with an optimiser scheduled over `total_steps` updates. `mesh` comes
    from preparation.fitting_mesh, which has checked that the step fits its devices."""
    initial = policy_files.load_policy(initial_dir, config.model, mesh)
    tx, schedule = make_optimizer(optimizer_config(config.train.optimizer, total_steps))
    model_def, state, shardings = init_train_state(initial, tx, mesh=mesh, seed=config.seed)
    step_fn = make_step(objective, model_def, tx, schedule, shardings, mesh,
                        micro_batches=config.train.micro_batches,
                        logprob_chunk=config.train.logprob_chunk,
                        sampling_temperature=config.sampling.temperature, **hyperparameters)
    return OnlineTraining(config, run, mesh, initial, model_def, state, step_fn, tokenizer_dir)


def pg_step_shape(section, *, rows, max_len, prompt_tokens):
    """The clipped policy-gradient update of a recipe section with clip_low, clip_high, aggregation and
    kl_coef: `pg_kl` (a k3 KL to π_0) when kl_coef > 0, else `pg`; `rows` sequences of at most
    `prompt_tokens` + `max_len` tokens, rounded up to a multiple of 8: the width every batch of the run
    is padded to (rollouts.pg_batch), so that one program serves them all and a power-of-two bucket
    (73 tokens → 128) does not nearly double the work."""
    kl = {"kl_coef": section.kl_coef} if section.kl_coef > 0 else {}
    return StepShape("pg_kl" if kl else "pg",
                     dict(clip_low=section.clip_low, clip_high=section.clip_high,
                          aggregation=section.aggregation, max_len=max_len, **kl),
                     rows, round_up(prompt_tokens + max_len, 8))


def sampling_settings(config, tokenizer, mesh):
    """The generate() keywords of the run's `sampling` section (max_new_tokens aside: roles differ)."""
    s = config.sampling
    return dict(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                eos_token_ids=eos_ids_of(tokenizer), pad_id=pad_id_of(tokenizer), mesh=mesh)


def copy(params):
    """A copy of parameters that outlives them (the train state is donated to each step)."""
    return jax.tree.map(lambda x: x.copy(), params)


def reference_logprobs(model_def, params, mesh, temperature=1.0):
    """batch -> ref_logp [N, T] under fixed `params` on `mesh` at `temperature`: their log-prob of
    token t at position t, 0 at position 0 and wherever the loss mask is off."""
    fn = jax.jit(parallel.traced_on(mesh, lambda p, tokens, segments, mask: token_logprobs(
        model_def, p, tokens, segments, mask, temperature=temperature)[0]))

    def reference(step_fn, batch):
        placed = step_fn.place_global({**batch, "ref_logp": np.zeros_like(batch["behaviour_logp"])})
        logp = parallel.gather_to_host(fn(params, placed["tokens"], placed["segment_ids"],
                                          placed["loss_mask"]))
        return np.concatenate([np.zeros((logp.shape[0], 1), np.float32), np.asarray(logp, np.float32)], 1)

    return reference
