"""The online learner: the one step skeleton under every online recipe (Nash-MD, GRPO, proposer–solver,
game self-play, SSR), in the spirit of tunix's RLLearner with one hook.

A recipe supplies an `OnlineRecipe`: its stage, its number of steps, the update it trains (a StepShape:
objective, hyperparameters, rows, width) and `rollout(learner, step, params, extra, item) -> Rollout`,
what one step samples and scores and the batch it trains on; optionally `evaluate` (anchors, exact
metrics) and the trees it carries between steps (`extra`: μ, baselines, an archive). The learner owns
everything else, once, so that it means the same in every recipe:

    π_0             loaded from the run's initial directory; its parameters copied at construction,
                    before any checkpoint is restored, for the log-probs a KL towards π_0 reads
    the update      the optimiser scheduled over the run's steps, the train state, the compiled step
                    (train.micro_batches, train.logprob_chunk, the sampling temperature)
    epochs          train.epochs updates on each step's batch; a step counts as skipped when any of
                    its epochs was (merge_epochs)
    an empty batch  (a rollout with no rows: Rollout.batch None) trains nothing; the step count, and
                    with it the learning-rate schedule, moves on by train.epochs, as for a batch
                    whose updates were all skipped; the step logs empty_batch = 1
    evaluation      every eval_every steps from step 0, and once more after the last
    snapshots       RUN_DIR/iter_k/policy at `snapshots` evenly spaced steps (snapshot_dirs)
    host draws      learner.host_rng(step, what): numpy generators keyed like every other draw
    the loop        engine/loop.py's resumable loop (train.checkpoint_every, max_skipped_fraction)
"""

import contextlib
from dataclasses import dataclass, field
from typing import Callable

import jax
import numpy as np

from nash_jax import parallel
from nash_jax.engine import policy_files
from nash_jax.engine.loop import train_loop
from nash_jax.engine.plan import StepShape
from nash_jax.judges.user_code import UserCodeError
from nash_jax.parallel.padding import round_up
from nash_jax.rollout.sampling import eos_ids_of, pad_id_of
from nash_jax.runs.keys import stage_seed
from nash_jax.runs.metrics import defined_metrics
from nash_jax.train import init_train_state, make_optimizer, make_step, objectives
from nash_jax.train.steps import token_logprobs


@dataclass(frozen=True)
class Rollout:
    """What one step of a recipe gives the learner."""

    batch: dict | None  # the update's batch (host arrays, alike on every process); None: no rows
    metrics: dict = field(default_factory=dict)  # the recipe's own figures of the step
    extra: dict | None = None  # the carried trees after this step; None: unchanged


@dataclass(frozen=True)
class OnlineRecipe:
    """What an online recipe supplies to the learner."""

    stage: str  # the training stage's name (checkpoints, metrics)
    steps: int
    shape: StepShape  # the update (the `nash-jax plan` of the recipe sizes the same)
    rollout: Callable  # rollout(learner, step, params, extra, item) -> Rollout
    snapshots: int = 1  # policies exported, evenly spaced over `steps` (which they divide)
    evaluate: Callable | None = None  # evaluate(learner, step, params, extra) -> (metrics, extra)
    eval_every: int | None = None
    eval_stage: str | None = None  # the stage its metrics are logged under
    # the carried trees' initial values, or a function of the built learner that gives them
    extra: dict | Callable = field(default_factory=dict)
    batches: object = None  # an iterator of items handed to rollout (its position is checkpointed)
    # where the objective reads ref_logp and a batch has none: the learner's π_0 log-probs (False: the
    # recipe's rollout supplies them itself, as Nash-MD's under μ does)
    reference_is_initial: bool = True
    finish_info: Callable | None = None  # finish_info(extra) -> what the manifest records of the stage


def snapshot_dirs(run, snapshots):
    """Where the learner exports its `snapshots` policies: RUN_DIR/iter_k/policy."""
    return [run / f"iter_{k}" / "policy" for k in range(snapshots)]


def adapter_dir(policy_dir):
    """Where a LoRA policy exported at `policy_dir` keeps its PEFT adapter: iter_k/adapter."""
    return policy_dir.parent / "adapter"


class OnlineLearner:
    """π_θ, its update and the loop of one online training stage (see the module's docstring)."""

    def __init__(self, config, run, mesh):
        """π_0 loaded onto `mesh` (from preparation.fitting_mesh, which has checked that the step fits
        its devices); `build` or `train` makes the rest."""
        self.config, self.run_dir, self.mesh = config, run, mesh
        self.tokenizer_dir = policy_files.tokenizer_source(config.model, run)
        # lends its structure to the sampler, which takes the parameters of each step apart
        # with model.lora, the base with π_0's adapters (B = 0, or an imported adapter): π_θ, π_0 and
        # every anchor a recipe keeps are adapters over this one base
        self.initial = policy_files.load_trainable_policy(
            policy_files.initial_policy_dir(config.model.path, run), config.model, mesh,
            seed=stage_seed(config.seed, 0, "lora"))

    # ------------------------------------------------------------------------------------------------
    # what a recipe's rollout uses

    def policy(self, params):
        """The policy module with `params` (the sampler and the scorers take modules)."""
        return self.model_def.merge(params)

    def host_rng(self, step, what):
        """A numpy generator for the host's draws of `what` at `step`, keyed like the device's."""
        return np.random.default_rng(stage_seed(self.config.seed, step, what))

    def sampling(self, tokenizer):
        """The generate() keywords of the run's `sampling` section."""
        return dict(sampling_settings(self.config, tokenizer, self.mesh),
                    max_new_tokens=self.config.sampling.max_new_tokens)

    def export(self, params, directory):
        """Write the policy with `params` as a Hugging Face directory (with model.lora: merged, and
        its adapters beside it as a PEFT adapter directory, adapter_dir(directory))."""
        policy = self.policy(params)
        policy_files.export_policy(policy, directory, self.tokenizer_dir)
        if self.config.model.lora is not None:
            policy_files.export_adapter(policy, adapter_dir(directory), self.config.model.lora,
                                        base_name=policy_files.adapter_base(self.config.model, self.run_dir))

    # ------------------------------------------------------------------------------------------------
    # the stage

    def build(self, recipe):
        """The train state and the compiled step of `recipe`'s update (the optimiser scheduled over
        its steps); π_0's parameters copied if its objective reads `ref_logp`. Returns self."""
        t, shape = self.config.train, recipe.shape
        # the schedule runs over every update the run takes: train.epochs a step, applied or not
        tx, schedule = make_optimizer(t.optimizer, recipe.steps * t.epochs)
        self.model_def, self.state, shardings = init_train_state(self.initial, tx, mesh=self.mesh,
                                                                 seed=self.config.seed)
        self.step_fn = make_step(shape.objective, self.model_def, tx, schedule, shardings, self.mesh,
                                 micro_batches=t.micro_batches, logprob_chunk=t.logprob_chunk,
                                 sampling_temperature=self.config.sampling.temperature,
                                 **shape.hyperparameters)
        reads_reference = "ref_logp" in objectives.get(shape.objective).fields and \
            recipe.reference_is_initial
        self.reference = (reference_logprobs(self.model_def, copy(self.state.params), self.mesh,
                                             self.config.sampling.temperature)
                          if reads_reference else None)
        return self

    def train(self, recipe):
        """Run (or resume) `recipe`'s training stage and finish it with its snapshots; → (the final
        train state, the carried trees)."""
        self.build(recipe)
        per_snapshot = recipe.steps // recipe.snapshots
        snapshots = snapshot_dirs(self.run_dir, recipe.snapshots)

        def work(step, state, extra, item):
            with user_code_located(f"stage {recipe.stage}, step {step}"):
                if recipe.evaluate is not None and step % recipe.eval_every == 0:
                    extra = self._evaluate(recipe, step, state.params, extra)
                rollout = recipe.rollout(self, step, state.params, extra, item)
            state, metrics = self.update(state, rollout.batch)
            if (step + 1) % per_snapshot == 0:
                self.export(state.params, snapshots[(step + 1) // per_snapshot - 1])
            extra = extra if rollout.extra is None else rollout.extra
            return state, extra, defined_metrics({**metrics, **rollout.metrics})

        t = self.config.train
        extra = recipe.extra(self) if callable(recipe.extra) else recipe.extra
        state, extra = train_loop(self.run_dir, recipe.stage, state=self.state, total=recipe.steps,
                                  work=work, batches=recipe.batches, extra=extra,
                                  checkpoint_every=t.checkpoint_every,
                                  max_skipped_fraction=t.max_skipped_fraction)
        if recipe.evaluate is not None:
            with user_code_located(f"stage {recipe.stage}, the final evaluation"):
                extra = self._evaluate(recipe, recipe.steps, state.params, extra)
        info = recipe.finish_info(extra) if recipe.finish_info is not None else {}
        if self.config.model.lora is not None:
            snapshots = [d for p in snapshots for d in (p, adapter_dir(p))]
        self.run_dir.finish(recipe.stage, [str(p.relative_to(self.run_dir.path)) for p in snapshots],
                            **info)
        return state, extra

    def update(self, state, batch):
        """train.epochs updates on `batch` (π_0's ref_logp added where the objective reads it and the
        batch has none); no update for a batch of None, whose step only moves the schedule on."""
        epochs = self.config.train.epochs
        if batch is None:
            return state.replace(step=state.step + epochs), {"empty_batch": 1.0}
        if self.reference is not None and "ref_logp" not in batch:
            batch = {**batch, "ref_logp": self.reference(self.step_fn, batch)}
        placed = self.step_fn.place_global(batch)
        per_epoch = []
        for _ in range(epochs):
            state, metrics = self.step_fn.jitted(state, placed)
            per_epoch.append(metrics)
        return state, {**merge_epochs(per_epoch), "empty_batch": 0.0}

    def _evaluate(self, recipe, step, params, extra):
        metrics, extra = recipe.evaluate(self, step, params, extra)
        self.run_dir.log_metrics(recipe.eval_stage or f"{recipe.stage}_eval", step,
                                 defined_metrics(metrics))
        return extra


def merge_epochs(epochs):
    """One step's metrics from its epochs' (each a dict of device scalars): the last epoch's, with
    `skipped` and `zero_gradient` the share of epochs that were (so that a non-finite earlier epoch
    counts towards train.max_skipped_fraction: the loop counts a step with skipped > 0)."""
    merged = dict(epochs[-1])
    if len(epochs) > 1:  # on the device: the loop fetches a step's metrics after queueing the next
        for name in ("skipped", "zero_gradient"):
            merged[name] = sum(m[name] for m in epochs) / len(epochs)
    return merged


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
    """(step_fn, batch) -> ref_logp [N, T] under fixed `params` on `mesh` at `temperature`: their
    log-prob of token t at position t, 0 at position 0 and wherever the loss mask is off."""
    fn = jax.jit(parallel.traced_on(mesh, lambda p, frozen, tokens, segments, mask: token_logprobs(
        model_def.with_frozen(frozen), p, tokens, segments, mask, temperature=temperature)[0]))

    def reference(step_fn, batch):
        placed = step_fn.place_global({**batch, "ref_logp": np.zeros_like(batch["behaviour_logp"])})
        logp = parallel.gather_to_host(fn(params, model_def.frozen, placed["tokens"],
                                          placed["segment_ids"], placed["loss_mask"]))
        return np.concatenate([np.zeros((logp.shape[0], 1), np.float32), np.asarray(logp, np.float32)], 1)

    return reference


@contextlib.contextmanager
def user_code_located(place):
    """A user's judge or reward that raises inside the block is said to have done so at `place`."""
    try:
        yield
    except UserCodeError as err:
        raise err.located(place)
