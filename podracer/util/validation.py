"""Validation helpers for frozen config dataclasses.

Every message names the dataclass, the field, the value and what is allowed, so a bad value on the
command line or in a config file is fixed without reading code.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from typing import Any

from podracer.errors import ConfigError, ConfigValueError


class ArgumentParser(argparse.ArgumentParser):
    """``argparse`` whose errors (a missing argument, ``--seed abc``) are a :class:`ConfigError`,
    printed by the command line as one line, instead of the usage text and ``SystemExit``."""

    def error(self, message: str):
        raise ConfigError(f"{self.prog}: {message} (--help lists the flags)")


def _name(obj: Any, field: str) -> str:
    return f"{type(obj).__name__}.{field}"


def _traced(value: Any) -> bool:
    """A traced value (a swept hyper-parameter inside ``jit`` / ``vmap``): checked before it was
    traced, not here."""
    import jax

    return isinstance(value, jax.core.Tracer)


def check_positive(obj: Any, *fields: str) -> None:
    for field in fields:
        value = getattr(obj, field)
        if _traced(value):
            continue
        if not value > 0:
            raise ConfigError(f"{_name(obj, field)}={value!r} is not allowed: it must be > 0")


def check_range(
    obj: Any, field: str, low: float | None, high: float | None, *, low_open: bool = False
) -> None:
    value = getattr(obj, field)
    if _traced(value):
        return
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and value > high
    if too_low or too_high:
        lo = "" if low is None else (f"> {low}" if low_open else f">= {low}")
        hi = "" if high is None else f"<= {high}"
        allowed = " and ".join(s for s in (lo, hi) if s)
        raise ConfigError(f"{_name(obj, field)}={value!r} is not allowed: it must be {allowed}")


def check_fraction(obj: Any, *fields: str) -> None:
    """Each field in ``[0, 1]`` (:func:`check_range`'s message)."""
    for field in fields:
        check_range(obj, field, 0.0, 1.0)


def check_non_negative(obj: Any, *fields: str) -> None:
    """Each field ``>= 0`` (:func:`check_range`'s message)."""
    for field in fields:
        check_range(obj, field, 0.0, None)


def check_choice(obj: Any, field: str, choices: Sequence[Any]) -> None:
    value = getattr(obj, field)
    if value not in choices:
        raise ConfigError(
            f"{_name(obj, field)}={value!r} is not allowed: choose one of "
            f"{', '.join(map(str, choices))}"
        )


def check_layer_sizes(obj: Any, field: str) -> None:
    value = getattr(obj, field)
    if not value or any(size < 1 for size in value):
        raise ConfigError(
            f"{_name(obj, field)}={value!r} is not allowed: give one or more positive sizes"
        )


def check_fields(where: str, kind: Any, values: Any, owner: str) -> None:
    """A :class:`ConfigValueError` when ``values`` names a field that the dataclass ``kind`` (a
    class or an instance: an environment's params) does not have, listing the fields it has."""
    fields = {field.name for field in dataclasses.fields(kind)}
    unknown = sorted(set(values) - fields)
    if unknown:
        name = kind.__name__ if isinstance(kind, type) else type(kind).__name__
        raise ConfigValueError(
            f"{where}: {', '.join(unknown)} not among {owner}'s parameters of {name}: "
            f"{', '.join(sorted(fields))}"
        )
