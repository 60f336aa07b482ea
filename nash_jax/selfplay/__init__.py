"""Host side of multi-agent self-play: rollouts and their roles, whole-episode assembly, comparison
groups (`episodes`), and text diversity for proposers (`diversity`). Plain Python and numpy; what these
produce (rewards, group ids, cluster ids) goes to the pure functions of `nash_jax.core.advantages`."""
