"""config.json values checked at the edge: every size and count a model family reads is a positive
integer, and the ones that must divide each other do, so that a bad file is one line naming the file,
the key, the value and what was expected (not a traceback from JAX or huggingface_hub)."""

import math


def check_positive_ints(hf, source, required, optional=()):
    """Each key of `required`, and of `optional` where given (not null), is a positive integer."""
    for key in (*required, *(k for k in optional if hf.get(k) is not None)):
        value = hf.get(key, "missing")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{source}: {key}: {value!r}; expected a positive integer")


def check_positive_numbers(hf, source, keys):
    """Each key of `keys` that is given (not null) is a positive finite number."""
    for key in keys:
        value = hf.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value <= 0):
            raise ValueError(f"{source}: {key}: {value!r}; expected a positive number")


def check_divides(hf, source, divisor, dividend, why):
    """hf[divisor] divides hf[dividend] (both already checked to be positive integers)."""
    if hf[dividend] % hf[divisor]:
        raise ValueError(f"{source}: {divisor}: {hf[divisor]} does not divide {dividend}: "
                         f"{hf[dividend]}; expected a divisor ({why})")
