"""Memory: what a learner needs to re-run a recurrent policy over the sequences acting recorded.

A recurrent network is four pure functions (:class:`Recurrent`): ``embed`` (the torso, on any
batch of observations), ``core`` (one step of the cell), ``heads`` (the outputs, on any batch)
and ``initial`` (the carry where an episode starts). Acting takes one step of all three with the
carry the loop keeps (:func:`step`). A learner re-runs a trajectory ``[T, B]`` from the carry
recorded at its first step (:func:`unroll`): ``embed`` over all ``T * B`` observations at once,
``core`` step by step in a ``lax.scan``, ``heads`` over all ``T * B`` outputs at once; the carry
is reset where an episode starts by :func:`podracer.core.acting.reset_actor_state`, the rule
acting uses.

The reset rule, on a trajectory (``done = terminated | truncated``; the carry ``c`` given to act
at step ``t`` is ``Trajectory.actor_state[t]``)::

    t        0     1     2     3     4
    done     F     T     F     F     T
    start    -     F     T     F     F      start[t] = done[t - 1]: the step after an end
    carry    c0    f(c0) init  f(..) f(..)  c0 = actor_state[0], already reset by acting

The carry *after* step ``t`` (before any reset) is what ``bootstrap_obs[t]`` is evaluated with:
inside an episode that is the next step's own output; at a truncation and at ``t = T - 1`` one
more step of ``core`` from it (:func:`bootstrap_outputs`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from podracer.core.acting import reset_actor_state
from podracer.types import Trajectory, split_action_mask


class Recurrent(NamedTuple):
    """A recurrent network as pure functions; ``N`` is any batch."""

    initial: Callable[[int], Any]  # initial(N) -> the carry where an episode starts [N, ...]
    embed: Callable[[Any, Any], Any]  # embed(params, obs [N, ...]) -> x [N, ...]
    core: Callable[[Any, Any, Any], tuple[Any, Any]]  # core(params, carry, x) -> (carry, h)
    heads: Callable[[Any, Any], Any]  # heads(params, h [N, ...]) -> outputs [N, ...]
    mask: Callable[[Any, Any], Any]  # mask(outputs, action_mask or None): illegal actions out
    sequence: Callable[..., tuple[Any, Any]] | None = None
    """``sequence(params, carry [B], x [T, B], starts [T, B], cuts [T, B]) -> (carries, h)
    [T, B]``: ``core`` over time with the reset (and no gradient through the carry into the
    steps before a cut), written for speed (:mod:`podracer.core.cells`); None: a ``lax.scan``
    of ``core``."""


def recurrent(module, memory: str, size: int) -> Recurrent:
    """The :class:`Recurrent` of a flax module with ``embed``, ``core`` and ``heads`` methods
    whose carry is ``memory``'s (:func:`podracer.networks.initial_carry`). Over a sequence, a
    :class:`podracer.networks.RecurrentBase` whose ``core`` is its flax cell ``cell`` (as
    :class:`~podracer.networks.RecurrentActorCritic` and ``RecurrentQNetwork``) runs as
    :mod:`podracer.core.cells` writes the cell; any other module, as a scan of its own
    ``core``."""
    from podracer.core.cells import SEQUENCES
    from podracer.networks import RecurrentBase, initial_carry, mask_outputs

    def embed(params, obs):
        return module.apply(params, obs, method=type(module).embed)

    def core(params, carry, x):
        return module.apply(params, carry, x, method=type(module).core)

    def heads(params, h):
        return module.apply(params, h, method=type(module).heads)

    def mask(outputs, action_mask):
        return mask_outputs(module, outputs, action_mask)

    def sequence(params, carry, x, starts, cuts=None):
        return SEQUENCES[memory](params["params"]["cell"], carry, x, starts, cuts)

    fast = (
        isinstance(module, RecurrentBase)
        and type(module).core is RecurrentBase.core
        and memory in SEQUENCES
    )
    return Recurrent(
        lambda n: initial_carry(memory, size, n),
        embed,
        core,
        heads,
        mask,
        sequence if fast else None,
    )


def scan_core(net: Recurrent, params, carry, x, starts, cuts=None, *, time_unroll: int = 1):
    """``net.core`` over time in a ``lax.scan``, the carry reset to ``net.initial`` before the
    steps where ``starts [T, B]`` (:func:`podracer.core.acting.reset_actor_state`) and
    stop-gradiented before the steps where ``cuts [T, B]``; the reference
    :attr:`Recurrent.sequence` equals. Returns ``(carries, h)`` ``[T, B, ...]``."""
    initial = net.initial(starts.shape[1])
    cuts = jnp.zeros_like(starts) if cuts is None else cuts

    def one(carry, inputs):
        x_t, start_t, cut_t = inputs
        carry = reset_actor_state(jax.lax.stop_gradient(carry), carry, cut_t)
        carry = reset_actor_state(initial, carry, start_t)
        carry, h = net.core(params, carry, x_t)
        return carry, (carry, h)

    _, (carries, h) = jax.lax.scan(one, carry, (x, starts, cuts), unroll=time_unroll)
    return carries, h


def step(net: Recurrent, params, carry, obs):
    """One step, as acting takes it: ``(carry, outputs)`` for ``obs [N, ...]``."""
    carry, h = net.core(params, carry, net.embed(params, obs))
    return carry, net.mask(net.heads(params, h), split_action_mask(obs)[1])


def episode_starts(terminated, truncated) -> jax.Array:
    """``start [T, B]`` of time-major episode ends: ``start[t] = done[t - 1]``, and False at
    ``t = 0`` (whose carry acting recorded already reset)."""
    done = terminated | truncated
    return jnp.concatenate([jnp.zeros_like(done[:1]), done[:-1]], axis=0)


def merge_leading_axes(tree, count: int = 2):
    """Every leaf's first ``count`` axes merged into one: ``[T, B, ...] -> [T * B, ...]``."""
    return jax.tree.map(lambda x: x.reshape(-1, *x.shape[count:]), tree)


def split_leading_axis(tree, shape: tuple[int, ...]):
    """Every leaf's first axis split into ``shape``: ``[T * B, ...] -> [T, B, ...]`` (the
    inverse of :func:`merge_leading_axes`)."""
    return jax.tree.map(lambda x: x.reshape(*shape, *x.shape[1:]), tree)


def unroll(net: Recurrent, params, carry, obs, starts, cuts=None, *, time_unroll: int = 1):
    """Re-runs a recurrent network over time-major sequences.

    Args:
      net: the network.
      params: its params.
      carry: the carry at the first step ``[B, ...]`` (as acting recorded it: already reset
        where an episode starts there).
      obs: observations ``[T, B, ...]``.
      starts: bool ``[T, B]``: an episode starts at this step (:func:`episode_starts`); the
        carry is reset to ``net.initial`` before it.
      cuts: bool ``[T, B]`` or None: no gradient flows back through the carry entering these
        steps (a burn-in's end).
      time_unroll: ``unroll`` of the time ``lax.scan`` (without ``net.sequence``).

    Returns:
      ``(carries, outputs)``: the carry after each step ``[T, B, ...]`` (before any reset) and
      the heads' outputs ``[T, B, ...]``.
    """
    num_steps, num_envs = starts.shape
    x = split_leading_axis(net.embed(params, merge_leading_axes(obs, 2)), (num_steps, num_envs))
    if net.sequence is None:
        carries, h = scan_core(net, params, carry, x, starts, cuts, time_unroll=time_unroll)
    else:
        carries, h = net.sequence(params, carry, x, starts, cuts)
    outputs = split_leading_axis(net.heads(params, merge_leading_axes(h, 2)), (num_steps, num_envs))
    return carries, net.mask(outputs, split_action_mask(obs)[1])


def bootstrap_outputs(
    net: Recurrent, params, carries, bootstrap_obs, outputs, truncated, *, time_axis: int = 0
):
    """The outputs for every ``bootstrap_obs [T, B, ...]`` (or ``[B, T, ...]`` with
    ``time_axis=1``), each from the carry after its own step (``carries`` of :func:`unroll`),
    given the ``outputs`` of ``obs`` that the re-run computed. Inside an episode
    ``bootstrap_obs[t]`` is ``obs[t + 1]`` and the carry after step ``t`` is the one step
    ``t + 1`` starts from, so its output is ``outputs[t + 1]``; the last step (and, inside a
    ``lax.cond``, the truncated ones) take one more step of the network from the carry before
    the reset (:func:`podracer.core.returns.bootstrap_values`). Terminations bootstrap from
    whatever stands there: their discount is zero."""
    from podracer.core.returns import bootstrap_values

    def value_fn(params, carry_and_obs):
        carry, obs = carry_and_obs
        return step(net, params, carry, obs)[1]

    return bootstrap_values(
        value_fn, params, outputs, (carries, bootstrap_obs), truncated, time_axis=time_axis
    )


def windows(tree, window: int):
    """Time-major ``[T, B, ...]`` leaves cut into batch-major windows ``[B * T / W, W, ...]``:
    sample ``b * (T / W) + k`` is steps ``k W .. (k + 1) W - 1`` of environment ``b``, in time
    order. ``window`` must divide ``T``."""

    def one(x):
        num_steps, num_envs = x.shape[:2]
        if num_steps % window:
            raise ValueError(f"windows: window={window} does not divide the {num_steps} steps")
        per_env = num_steps // window
        x = x.reshape(per_env, window, num_envs, *x.shape[2:])
        x = jnp.moveaxis(x, 2, 0)  # [B, K, W, ...]
        return x.reshape(num_envs * per_env, window, *x.shape[3:])

    return jax.tree.map(one, tree)


def window_carries(actor_state, window: int):
    """The carry at each window's first step, ``[B * T / W, ...]`` in :func:`windows`' order,
    from the carries acting recorded (``Trajectory.actor_state [T, B, ...]``)."""

    def one(x):
        first = jnp.moveaxis(x[::window], 1, 0)  # [B, T / W, ...]
        return first.reshape(-1, *first.shape[2:])

    return jax.tree.map(one, actor_state)


class Sequences(NamedTuple):
    """What a recurrent learner re-runs a window from: its first carry and where its episodes
    start (batch-major, :func:`windows`' order)."""

    carry: Any  # [N, ...]: the carry acting recorded at the window's first step
    starts: jax.Array  # bool [N, W]: an episode starts at this step (reset the carry first)


def sequences(traj: Trajectory, window: int) -> Sequences:
    """The :class:`Sequences` of a trajectory cut into windows of ``window`` steps; the first
    step of a window does not reset: its recorded carry already is."""
    starts = windows(episode_starts(traj.terminated, traj.truncated), window)
    return Sequences(window_carries(traj.actor_state, window), starts.at[:, 0].set(False))


def unroll_batch(net: Recurrent, params, seqs: Sequences, obs, cuts=None, *, time_unroll: int = 1):
    """:func:`unroll` over batch-major windows: ``obs [N, W, ...]`` from ``seqs`` (``cuts``
    ``[N, W]`` or None); returns the carries and outputs batch-major ``[N, W, ...]``."""
    time_major = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), obs)
    carries, outputs = unroll(
        net,
        params,
        seqs.carry,
        time_major,
        jnp.swapaxes(seqs.starts, 0, 1),
        None if cuts is None else jnp.swapaxes(cuts, 0, 1),
        time_unroll=time_unroll,
    )
    return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), (carries, outputs))


__all__ = [
    "Recurrent",
    "Sequences",
    "bootstrap_outputs",
    "episode_starts",
    "recurrent",
    "sequences",
    "step",
    "unroll",
    "unroll_batch",
    "windows",
]
