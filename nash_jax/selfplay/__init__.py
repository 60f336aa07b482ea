"""What is generic to multi-agent self-play, on the host: rollouts and their roles, whole-episode
assembly, comparison groups (`episodes`), text diversity for proposers (`diversity`), and answer sources
over the tasks that the task families register (`answer_sources`). Plain Python and numpy; what these
produce (rewards, group ids, cluster ids) goes to the pure functions of `nash_jax.core.advantages`.
Nothing here knows a task family: tests/test_layering.py keeps it so."""
