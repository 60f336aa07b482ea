"""nash_jax: game-theoretic preference optimisation (SPPO, Nash-MD) for language models in JAX."""

__version__ = "0.1.0"
