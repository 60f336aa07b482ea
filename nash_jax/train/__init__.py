"""Training: optimisers, the train state on the mesh, and the jit-compiled update steps."""

from nash_jax.train.optim import learning_rate_schedule, make_optimizer
from nash_jax.train.state import ModelDef, TrainState, init_train_state, split_model
from nash_jax.train.objectives import OBJECTIVES, Objective
from nash_jax.train.steps import make_logprobs, make_step

__all__ = ["OBJECTIVES", "ModelDef", "Objective", "TrainState",
           "init_train_state", "learning_rate_schedule", "make_logprobs", "make_optimizer", "make_step",
           "split_model"]
