"""The run's judges built from their config sections, and preference matrices judged in chunks."""

from nash_jax import judges, runs


def make_judge(judge_config, mesh=None, key="judge"):
    """judges.make_judge (the public builder), looked up here so that tests can replace it."""
    return judges.make_judge(judge_config, mesh, key)


def judge_matrices(judge, prompts, candidates, *, per_call, where, bar=None, crash_prefix=None,
                   notes=None):
    """[B, K, K] from `judge` in chunks of `per_call` prompts, with a progress bar and crash points
    (notes: a dict for the judge's per-prompt figures, see judge_in_chunks)."""
    from nash_jax.judges.base import judge_in_chunks

    def after_call(judged, calls):
        if bar is not None:
            bar.update(judged)
        if crash_prefix:
            runs.crash_point(f"{crash_prefix}:call={calls}")

    return judge_in_chunks(judge, prompts, candidates, per_call=per_call, where=where,
                           after_call=after_call, notes=notes)
