"""The domains of a config's numeric fields, the choices of its string fields, and sizes in bytes."""

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Range:
    """A numeric field's domain: low ≤ value ≤ high (an end open where said), or one of `also`.

    A section lists its fields' domains in a `DOMAINS` class attribute; `build` checks them, and every
    float is checked to be finite whatever its domain."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    also: tuple = ()

    def contains(self, value):
        if value in self.also:
            return True
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return not (self.high is not None and (value >= self.high if self.high_open else value > self.high))

    def __str__(self):
        if self.low is not None and self.high is not None:
            text = (f"a value in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}"
                    f"{')' if self.high_open else ']'}")
        elif self.low is not None:
            text = f"a value {'>' if self.low_open else '≥'} {self.low:g}"
        else:
            text = f"a value {'<' if self.high_open else '≤'} {self.high:g}"
        return text + "".join(f" or {v}" for v in self.also)


AT_LEAST_1 = Range(1)
POSITIVE = Range(0, low_open=True)
NON_NEGATIVE = Range(0)
PROBABILITY = Range(0, 1)


def check_choice(key, value, allowed):
    if value not in allowed:
        raise ValueError(f"{key}={value!r}; expected one of {list(allowed)}")


_BYTE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text, key="device memory"):
    """'80GiB', '141GB', '1.5 TiB', '1024' → bytes (GB = 10⁹, GiB = 2³⁰)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    unit = match and match.group(2).lower()
    if not match or unit not in _BYTE_UNITS or float(match.group(1)) <= 0:
        raise ValueError(f"{key}={text!r}; expected a positive size such as 80GiB or 141GB")
    return int(float(match.group(1)) * _BYTE_UNITS[unit])
