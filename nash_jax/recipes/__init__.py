"""The recipe packages: sppo, nash_md, grpo, proposer_solver, game_selfplay, ssr. Each registers itself
with the engine (nash_jax.engine.register) and supplies only what is its own: its config section, its
rollout and credit, its anchors and its report sections. Nothing here is shared framework code: that is
nash_jax.engine."""
