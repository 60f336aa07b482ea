"""`nash-jax plan`'s words: a plan (engine/plan.py) as a table, as JSON, and the one line saying what
does not fit."""

import json

TERMS = ("frozen", "parameters", "optimizer", "gradients", "update", "activations")


def gib(n):
    return n / 2**30


def size_text(n):
    """Bytes as a readable size: 1.50 GiB, 12.0 MiB, 640 B."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.{2 if unit == 'GiB' else 1}f} {unit}"
    return f"{n} B"


# ---------------------------------------------------------------------------------------------------
# verdicts

def shortfall(result):
    """None when the plan fits (or no device memory is known), else one line naming what does not."""
    memory = result["device_memory_bytes"]
    if memory is None or result["fits"]:
        return None
    terms = {k: result[f"{k}_bytes"] for k in TERMS}
    largest = max(terms, key=terms.get)
    parts = " + ".join(f"{k} {size_text(v)}" for k, v in terms.items())
    what = (f"the compiled step needs {size_text(result['total_bytes'])} per device "
            f"(analytic: {parts})" if result["decided_by"] == "compiled"
            else f"{parts} = {size_text(result['total_bytes'])} per device")
    over = result["total_bytes"] - memory
    alone = [k for k, v in terms.items() if v > memory]
    return (f"does not fit: {what}, {size_text(over)} over the {size_text(memory)} of device "
            f"memory ({result['device_memory_source']}); the largest term is {largest} "
            f"({size_text(terms[largest])})"
            + (f"; {', '.join(alone)} alone exceed it" if alone else "")
            + f" on mesh {result['mesh']}")


def table(result):
    """The plan as readable lines."""
    memory = result["device_memory_bytes"]
    trained = "adapter parameters" if result["lora"] else "parameters"
    lines = [f"model: {result['model']} ({result['parameters_count'] / 1e9:.3f} B {trained}, "
             f"{result['param_dtype']} parameters, {result['dtype']} compute, remat "
             f"{result['remat']})",
             f"mesh: {result['mesh']} on {result['devices']} devices; {result['optimizer']}, "
             f"objective {result['objective']}, {result['rows_per_device']} rows × "
             f"{result['length']} tokens per device per micro-batch "
             f"({result['micro_batches']} micro-batches), logprob_chunk {result['logprob_chunk']}",
             "per device                     GiB"]
    for k in TERMS:
        label = "activations (estimate)" if k == "activations" else k
        lines.append(f"  {label:<26} {gib(result[f'{k}_bytes']):9.2f}")
    lines.append(f"  {'analytic total':<26} {gib(result['analytic_total_bytes']):9.2f}")
    compiled = result["compiled"]
    if compiled:
        for k in ("argument", "output", "alias", "temp"):
            lines.append(f"  {'compiled ' + k:<26} {gib(compiled[k]):9.2f}")
        lines.append(f"  {'compiled total':<26} {gib(compiled['total_bytes']):9.2f}")
        if result.get("compiled_note"):
            lines.append(f"  ({result['compiled_note']})")
    elif result.get("compiled_skipped"):
        lines.append(f"  (not compiled: {result['compiled_skipped']})")
    if memory is None:
        lines.append("device memory: unknown (give --device-memory or mesh.device_memory)")
    else:
        spare = memory - result["total_bytes"]
        verdict = (f"fits, {gib(spare):.2f} GiB to spare" if result["fits"]
                   else f"DOES NOT FIT, {gib(-spare):.2f} GiB over")
        lines.append(f"device memory: {gib(memory):.2f} GiB ({result['device_memory_source']}): "
                     f"{verdict}")
    return "\n".join(lines)


def to_json(result):
    return json.dumps(result)
