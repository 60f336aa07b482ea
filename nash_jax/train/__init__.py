"""Training: optimisers, the train state on the mesh, and the jit-compiled update steps."""

from nash_jax.train.optim import (
                                  SPPO_PRESET,
                                  OptimizerConfig,
                                  learning_rate_schedule,
                                  make_optimizer,
)
from nash_jax.train.state import ModelDef, TrainState, init_train_state, split_model
from nash_jax.train.steps import (
                                  make_logprobs,
                                  make_nash_md_pg_step,
                                  make_pair_step,
                                  make_sft_step,
                                  make_sppo_step,
)

__all__ = ["SPPO_PRESET", "ModelDef", "OptimizerConfig", "TrainState", "init_train_state",
           "learning_rate_schedule", "make_logprobs", "make_nash_md_pg_step", "make_optimizer",
           "make_pair_step", "make_sft_step", "make_sppo_step", "split_model"]
