"""Code repositories and Self-play SWE-RL (SSR): the shipped small repositories (`code_repositories`,
code_repos/) and a procedural family of them (`generated_repos`); the mutation engine that writes
demonstration bugs (`mutations`, `ssr_demonstrations`); the SSR artifact, its patches, checks, repair
and prompts (`ssr_*`) and the byte-level tokenizer (ssr_tokenizer/). Tests run in nash_jax.sandbox."""
