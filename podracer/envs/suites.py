"""What the adapters of the JAX environment suites share: the optional
library's import with a one-line error naming its extra, unknown names with the closest known
one, same-step auto-reset over pytrees, and observation specs of pytrees.

An adapter (``podracer/envs/jax/<family>.py``) has a ``make(env_id, **kwargs)`` that returns a
:class:`~podracer.types.Environment`, named by its family's row of :mod:`podracer.envs.registry`;
:func:`podracer.envs.make` imports it only when an id of its family is made, so none of the
suites is needed to import podracer.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp

from podracer.envs import registry
from podracer.errors import ConfigValueError
from podracer.types import ObservationSpec


def require(library: str, env_id: str) -> Any:
    """``import library``, or a :class:`ConfigValueError` that names the id, the library and the
    extra that installs it (the ``extra`` of the id's family, :mod:`podracer.envs.registry`)."""
    extra = registry.extra_of(env_id) or library.split(".")[0]
    try:
        return importlib.import_module(library)
    except ImportError as error:
        raise ConfigValueError(
            f"environment id {env_id!r} needs the {library.split('.')[0]} library, which is not "
            f"installed ({error}): pip install 'podracer[{extra}]' (or 'podracer[envs]' for "
            "every suite)"
        ) from None


def check_name(env_id: str, name: str, known: Iterable[str], family: str) -> None:
    """A :class:`ConfigValueError` for a ``name`` not in ``known``, with the closest known
    name and the list."""
    known = tuple(known)
    if name in known:
        return
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" Did you mean {family + close[0]!r}?" if close else ""
    raise ConfigValueError(
        f"unknown environment id {env_id!r}: {name!r} is not one of the {family} environments "
        f"podracer adapts.{hint} Known: {', '.join(known)}"
    )


VMA_ERRORS = (
    "manual axis types do not match",
    "branches must have equal output types",
    "requires varying manual axes to match",
    "must have equal types",
    "pvary is a invariant->variant collective",
)
"""What JAX 0.10 says when a checked ``shard_map`` refuses code that mixes values varying over
the device axes with constants of its own (in a ``lax.cond``'s branches, a loop's carry)."""


def traced(env_id: str, library: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` (a library's reset or step); inside a ``jax.shard_map`` that checks varying
    manual axes, its refusal of the library's code as a one-line :class:`ConfigValueError`
    (an adapter whose library needs it says ``check_vma = False``: Anakin runs its
    ``shard_map`` unchecked)."""
    try:
        return fn(*args)
    except (TypeError, ValueError) as error:
        if not jax.sharding.get_abstract_mesh().manual_axes or not any(
            text in str(error) for text in VMA_ERRORS
        ):
            raise
        raise ConfigValueError(
            f"{env_id}: {library}'s code does not trace inside a jax.shard_map that checks "
            "varying manual axes: it mixes values that vary over the device axes with constants "
            "of its own (in a lax.cond or a loop); give shard_map check_vma=False, as the "
            f"environment's check_vma attribute says and Anakin does ({str(error).splitlines()[0]})"
        ) from None


def select_tree(done: jax.Array, on_done: Any, otherwise: Any) -> Any:
    """``on_done`` where ``done`` (a bool scalar, or ``[B]`` under ``vmap``), else
    ``otherwise``, leaf by leaf (the two pytrees have one structure): how an adapter takes a
    fresh episode's state and observation after a step that ended one."""

    def pick(a, b):
        a, b = jnp.asarray(a), jnp.asarray(b)
        return jnp.where(
            jnp.reshape(done, jnp.shape(done) + (1,) * (a.ndim - jnp.ndim(done))), a, b
        )

    return jax.tree.map(pick, on_done, otherwise)


def observation_spec_of(obs: Any) -> Any:
    """The :class:`~podracer.types.ObservationSpec` of one (unbatched) observation, or the
    dict of them for a dict observation (an adapter turns a library's named tuple into a dict
    first)."""
    if isinstance(obs, dict):
        return {name: observation_spec_of(leaf) for name, leaf in obs.items()}
    return ObservationSpec(tuple(jnp.shape(obs)), jnp.dtype(jnp.result_type(obs)))
