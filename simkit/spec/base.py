"""What every spec module shares: :class:`ConfigError` (the one error a bad scenario raises),
the errors field validators and the resolve step raise, and the field validators themselves
(finite, positive, bounded sizes).

Imports attrs only: no other simkit module.
"""

from __future__ import annotations

import math
from typing import Any

import attrs


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
    if value is not None and isinstance(value, float) and abs(value) > MAX_FLOAT:
        raise FieldValueError(attribute.name, f"'{attribute.name}' must be at most {MAX_FLOAT:g}: {value!r}")


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

    return check


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
