"""A tiny decoder and batches for the training tests (built in code: no checkpoint needed)."""

import jax
import numpy as np
from flax import nnx

from nash_jax import parallel
from nash_jax.models.llama import Llama, LlamaConfig
from nash_jax.config import OptimizerConfig
from nash_jax.train import init_train_state, make_logprobs, make_optimizer

CONFIG = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                     num_kv_heads=2, head_dim=8)
MESHES = [(1, 1, 1), (8, 1, 1), (2, 4, 1), (1, 4, 2), (1, 2, 4)]


def mesh_of(shape):
    return parallel.make_mesh(*shape, devices=jax.devices()[:int(np.prod(shape))])


def token_batch(n, t=12, prompt=5, seed=0, lead=()):
    """Left-padded prompt + response rows: tokens, segment_ids, loss_mask of shape [*lead, n, t]."""
    rng = np.random.default_rng(seed)
    shape = (*lead, n, t)
    tokens = rng.integers(3, CONFIG.vocab_size, shape)
    pads = rng.integers(0, 3, shape[:-1])  # 0-2 padding tokens on the left of each row
    cols = np.arange(t)
    segment_ids = (cols >= pads[..., None]).astype(np.int32)
    tokens = np.where(segment_ids == 1, tokens, 0)
    loss_mask = (cols >= prompt) & (segment_ids == 1)
    return {"tokens": tokens, "segment_ids": segment_ids, "loss_mask": loss_mask}


def setup(shape=(1, 1, 1), optimizer=None, seed=0, mesh=None, total_steps=100):
    """(model_def, state, shardings, mesh, optimizer, schedule, logprobs) for a fresh tiny model."""
    mesh = mesh or mesh_of(shape)
    optimizer_config = optimizer or OptimizerConfig(name="adamw", learning_rate=1e-3,
                                                    warmup_ratio=0.0)
    tx, schedule = make_optimizer(optimizer_config, total_steps)
    model = Llama(CONFIG, rngs=nnx.Rngs(seed))
    model_def, state, shardings = init_train_state(model, tx, mesh=mesh)
    return model_def, state, shardings, mesh, tx, schedule, make_logprobs(model_def, mesh)
