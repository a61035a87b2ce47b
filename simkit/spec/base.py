"""What every spec module shares: :class:`ConfigError` (the one error a bad scenario raises),
the errors field validators and the resolve step raise, and the field validators themselves
(finite, positive, bounded sizes).

Imports attrs and :mod:`simkit.core.units` only.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import attrs

from simkit.core.units import MAX_SIM_TIME_S


class ConfigError(Exception):
    """A scenario (or command-line override) is invalid.

    ``messages`` holds one human-readable line per problem, already prefixed with the
    source (file name) when known: ``scenarios/x.yaml: 'workers' must be >= 1: 0 @ $.pools.decode``.
    """

    def __init__(self, messages: list[str]) -> None:
        super().__init__("\n".join(messages))
        self.messages = list(messages)


# ----------------------------------------------------------------------------- validators


class FieldValueError(ValueError):
    """A field validator's complaint; ``field`` completes the error path."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name


#: the largest magnitude a float field accepts: beyond it sums overflow (ms, s, tokens, GB/s)
MAX_FLOAT = 1e15


def _finite(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and isinstance(value, float) and not math.isfinite(value):
        raise FieldValueError(attribute.name, f"'{attribute.name}' must be a finite number: {value!r}")
    # a duration or an offset: the clock's own limit (rates keep their own validators)
    problem = None if attribute.name.endswith("_per_s") else _time_problem(attribute.name, value)
    if problem is not None:
        raise FieldValueError(attribute.name, problem)
    if value is not None and isinstance(value, float) and abs(value) > MAX_FLOAT:
        limit = _own_limit(attribute)
        if limit is not None and value > limit:  # the field's own bound is the one to name
            raise FieldValueError(attribute.name, f"'{attribute.name}' must be <= {limit}: {value!r}")
        raise FieldValueError(attribute.name, f"'{attribute.name}' must be at most {sci(MAX_FLOAT)}: {exact(value)}")


def _own_limit(attribute: attrs.Attribute) -> Optional[float]:
    """The tightest :func:`_at_most` bound among ``attribute``'s validators, or None."""
    validator = attribute.validator
    checks = getattr(validator, "_validators", (validator,))
    limits = [check.limit for check in checks if hasattr(check, "limit")]
    return min(limits) if limits else None


def _at_least(limit: float, zero_ok: bool = True):
    """Values in (0, limit) are refused; 0 itself is left to the field's other validators
    (``zero_ok``: whether the message offers it)."""
    what = "0 or at least" if zero_ok else "at least"

    def check(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is not None and 0 < value < limit:
            raise FieldValueError(attribute.name, f"'{attribute.name}' must be {what} {limit:g}: {value!r}")

    return check


def _positive(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not value > 0:
        raise FieldValueError(attribute.name, f"'{attribute.name}' must be > 0: {value!r}")


def _non_negative(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not value >= 0:
        raise FieldValueError(attribute.name, f"'{attribute.name}' must be >= 0: {value!r}")


def _at_most(limit: int):
    def check(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is not None and value > limit:
            raise FieldValueError(attribute.name, f"'{attribute.name}' must be <= {limit}: {value!r}")

    check.limit = limit  # (read by _finite, which runs first, to name this bound)
    return check


#: the largest value of a time-like field, by the unit its name ends with (team rule: units in
#: names): every simulated time stays within MAX_SIM_TIME_S (float64 resolves 1 us there)
TIME_UNITS = {"_s": ("s", MAX_SIM_TIME_S), "_ms": ("ms", MAX_SIM_TIME_S * 1e3),
              "_us": ("us", MAX_SIM_TIME_S * 1e6)}
#: the smallest positive rate (``*_per_s``): one event in MAX_SIM_TIME_S
MIN_RATE_PER_S = 1.0 / MAX_SIM_TIME_S


def exact(value: float) -> str:
    """``value`` short (``:g``) when that is exact, else in full (``repr``): a value beyond a
    bound must not be shown rounded to one within it (1.0000001e9 as ``1e+09``)."""
    return f"{value:g}" if float(f"{value:g}") == value else repr(value)


def sci(value: float) -> str:
    """A round limit as messages write it: 1e9, 1e12, 1e-09 -> 1e-9."""
    mantissa, _, exponent = f"{value:.0e}".partition("e")
    return f"{mantissa}e{int(exponent)}"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def time_field_problem(spec: Any, path: str = "") -> Optional[tuple[str, str]]:
    """The first field of ``spec`` (an attrs instance, walked through nested specs and lists of
    them) that breaks the clock's rule, as ``(dotted path, message)``, or None. A field is
    time-like by the unit its name ends with: ``_s``, ``_ms`` or ``_us`` (a duration or an
    offset: its magnitude at most :data:`TIME_UNITS`), ``_per_s`` (a rate: 0 or at least
    :data:`MIN_RATE_PER_S`). So every time-like field, present or future, obeys one rule."""
    for a in attrs.fields(type(spec)):
        value = getattr(spec, a.name)
        where = f"{path}.{a.name}" if path else a.name
        if attrs.has(type(value)):
            found = time_field_problem(value, where)
        elif isinstance(value, (list, tuple)):
            found = next((p for i, v in enumerate(value) if attrs.has(type(v))
                          for p in [time_field_problem(v, f"{where}[{i}]")] if p), None)
        else:
            problem = _time_problem(a.name, value)
            found = None if problem is None else (where, problem)
        if found:
            return found
    return None


def _time_problem(name: str, value: Any) -> Optional[str]:
    """Why the value of field ``name`` breaks the clock's rule (by the unit its name ends
    with), or None."""
    if not _number(value) or not math.isfinite(value):
        return None
    if name.endswith("_per_s"):
        if 0 < value < MIN_RATE_PER_S:
            return (f"'{name}' must be at least {sci(MIN_RATE_PER_S)} (one per {sci(MAX_SIM_TIME_S)} s, the "
                    f"longest simulated time): {exact(value)}")
        return None
    unit = next((u for suffix, u in TIME_UNITS.items() if name.endswith(suffix)), None)
    if unit is not None and abs(value) > unit[1]:
        return (f"'{name}' must be at most {sci(unit[1])} {unit[0]} (simulated times stay within 1e9 s, about "
                f"31 years): {exact(value)}")
    return None


_pos = [_finite, _positive]
_nonneg = [_finite, _non_negative]
#: rates (per second): below one event in 30 years the arrival times overflow
_rate = [_finite, _positive, _at_least(1e-9, zero_ok=False)]
#: sizes: positive and bounded (a typo like 10**20 workers must fail, not hang)
_count = [_positive, _at_most(1_000_000)]
_tokens = [_positive, _at_most(1 << 31)]



class ResolveError(ValueError):
    """Values that are well formed but cannot be built: an unknown model or GPU, a
    tensor-parallel size that does not divide the heads, weights that leave no KV room. Raised
    by the resolve step (:mod:`simkit.engine.resolve`), which knows the hardware. ``problems``
    holds one ``(path, message)`` per problem, ``path`` being where the value sits in the
    scenario (``$.latency.model``) for the ``@ $.path`` of its :class:`ConfigError` line."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("\n".join(message for _, message in problems))
        self.problems = list(problems)

    def lines(self, source: str) -> list[str]:
        """The problems as :class:`ConfigError` lines: ``SOURCE: message @ $.path``."""
        return [f"{source}: {message} @ {path}" for path, message in self.problems]
