"""The policy at the table: a sampling player of the run's `sampling` settings, and its exact metrics
(exploitability, NashConv, illegal mass) in the games that have an exact evaluator."""

from nash_jax.selfplay import games as games_lib


def model_player(config, model, tokenizer, key, mesh):
    s = config.sampling
    return games_lib.ModelPlayer(model, tokenizer, key=key, mesh=mesh, max_new_tokens=s.max_new_tokens,
                                 temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                                 max_prompt_tokens=config.data.max_prompt_tokens)


def exact_metrics(evaluators, model, mesh, pad_id):
    """{exploitability (first exact game), exploitability_<game>, nash_conv_<game>, illegal_mass_<game>}."""
    out = {}
    for name, evaluator in evaluators.items():
        metrics, _ = evaluator.model_metrics(model, mesh, pad_id)
        out.setdefault("exploitability", metrics["exploitability"])
        out.update({f"{k}_{name}": v for k, v in metrics.items()})
    return out
