"""Advantage and return estimators over ``[T, B]`` with terminations and truncations.

Each operator is written for one stream ``[T]`` (shapes asserted with chex) and batched over the
environment axis with ``vmap``, in the style of rlax.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from podracer.util.ops import vary_as


def _backward_recursion(delta_t, discount_t, trace_t, like):
    """``x_t = delta_t + discount_t * trace_t * x_{t+1}`` backwards over one stream ``[T]``,
    from ``x_T = 0``: GAE's advantages and V-trace's errors alike. The carry starts as
    ``zeros_like(like[0])``, varying over the device axes as ``like`` does (``shard_map``
    rejects a Python ``0.0`` carry, as in rlax's own scans, that later takes per-device values)."""

    def backward(x_t, xs):
        delta, discount, trace = xs
        x_tm1 = delta + discount * trace * x_t
        return x_tm1, x_tm1

    _, xs = jax.lax.scan(
        backward, jnp.zeros_like(like[0]), (delta_t, discount_t, trace_t), reverse=True, unroll=16
    )
    return xs


def _gae_one_stream(r_t, v_tm1, v_t, terminated_t, truncated_t, gamma, lambda_):
    chex.assert_rank([r_t, v_tm1, v_t, terminated_t, truncated_t], 1)
    chex.assert_equal_shape([r_t, v_tm1, v_t, terminated_t, truncated_t])
    discount_t = gamma * (1.0 - terminated_t.astype(v_t.dtype))
    trace_t = lambda_ * (1.0 - (terminated_t | truncated_t).astype(v_t.dtype))
    delta_t = r_t + discount_t * v_t - v_tm1
    return _backward_recursion(delta_t, discount_t, trace_t, like=v_t)


def gae(
    r_t: chex.Array,
    v_tm1: chex.Array,
    v_t: chex.Array,
    terminated_t: chex.Array,
    truncated_t: chex.Array,
    gamma: float,
    lambda_: float,
) -> chex.Array:
    r"""Generalised advantage estimation over ``[T, B]`` with terminations and truncations.

    For each step ``t`` (``v_tm1[t] = v(s_t)``, ``v_t[t]`` the value of the observation that
    followed, taken before any auto-reset):

    .. math::
        \delta_t = r_t + \gamma (1 - \mathrm{term}_t) v_t - v_{t-1}, \qquad
        A_t = \delta_t + \gamma \lambda (1 - \mathrm{done}_t) A_{t+1}, \quad A_T = 0,

    with :math:`\mathrm{done}_t = \mathrm{term}_t \lor \mathrm{trunc}_t`. At a truncation the
    advantage still bootstraps from the value of the final observation, but the λ-trace is cut:
    the next step belongs to another episode. When nothing is truncated this is
    ``rlax.truncated_generalized_advantage_estimation`` with ``discount_t = γ (1 - term_t)``.

    Schulman et al., 2016, https://arxiv.org/abs/1506.02438.

    Args:
      r_t: f32 ``[T, B]`` rewards.
      v_tm1: f32 ``[T, B]`` values of the observations the actions were taken in.
      v_t: f32 ``[T, B]`` values of the observations that followed (bootstrap values).
      terminated_t: bool ``[T, B]``: the episode ended at step ``t`` (no bootstrap).
      truncated_t: bool ``[T, B]``: a time limit cut the episode at step ``t`` (bootstrap,
        cut the trace).
      gamma: discount (a float or a traced scalar).
      lambda_: trace parameter (a float or a traced scalar).

    Returns:
      f32 ``[T, B]`` advantages; the λ-returns are ``advantages + v_tm1``.
    """
    chex.assert_rank([r_t, v_tm1, v_t, terminated_t, truncated_t], 2)
    return jax.vmap(_gae_one_stream, in_axes=(1, 1, 1, 1, 1, None, None), out_axes=1)(
        r_t, v_tm1, v_t, terminated_t, truncated_t, gamma, lambda_
    )


class VTraceOutput(NamedTuple):
    """What :func:`vtrace` returns, every field f32 ``[T, B]``."""

    errors: chex.Array  # v_s - v(x_s): the V-trace target minus the value (target stop-gradient)
    pg_advantage: chex.Array  # min(clip_pg_rho, rho_s) (q_s - v(x_s))
    q_estimate: chex.Array  # q_s = r_s + gamma_s * (bootstrap of the next step), the pg target


def _vtrace_one_stream(
    v_tm1,
    v_t,
    r_t,
    terminated_t,
    truncated_t,
    rho_tm1,
    gamma,
    lambda_,
    clip_rho,
    clip_pg_rho,
    stop_target_gradients,
):
    chex.assert_rank([v_tm1, v_t, r_t, terminated_t, truncated_t, rho_tm1], 1)
    chex.assert_equal_shape([v_tm1, v_t, r_t, terminated_t, truncated_t, rho_tm1])
    dtype = v_t.dtype
    discount_t = gamma * (1.0 - terminated_t.astype(dtype))
    lambda_t = lambda_ * (1.0 - (terminated_t | truncated_t).astype(dtype))  # trace cut
    c_t = lambda_t * jnp.minimum(1.0, rho_tm1)
    delta_t = jnp.minimum(clip_rho, rho_tm1) * (r_t + discount_t * v_t - v_tm1)
    # (rlax.vtrace's scan starts from a Python 0.0, which shard_map rejects.)
    errors = _backward_recursion(delta_t, discount_t, c_t, like=v_t)
    if stop_target_gradients:
        errors = jax.lax.stop_gradient(errors + v_tm1) - v_tm1
    # rlax bootstraps q from v_tm1[t + 1], the value of the next episode's first observation
    # after an episode ended; v_t[t] is the value of the observation that really followed.
    targets_tm1 = errors + v_tm1
    next_target = jnp.concatenate([targets_tm1[1:], v_t[-1:]])
    q_bootstrap = lambda_t * next_target + (1.0 - lambda_t) * v_t
    q_estimate = r_t + discount_t * q_bootstrap
    pg_advantage = jnp.minimum(clip_pg_rho, rho_tm1) * (q_estimate - v_tm1)
    return VTraceOutput(errors=errors, pg_advantage=pg_advantage, q_estimate=q_estimate)


def vtrace(
    v_tm1: chex.Array,
    v_t: chex.Array,
    r_t: chex.Array,
    terminated_t: chex.Array,
    truncated_t: chex.Array,
    rho_tm1: chex.Array,
    gamma: float,
    lambda_: float = 1.0,
    clip_rho: float = 1.0,
    clip_pg_rho: float = 1.0,
    *,
    stop_target_gradients: bool = True,
) -> VTraceOutput:
    r"""V-trace targets and policy-gradient advantages over ``[T, B]`` with terminations and
    truncations.

    With :math:`\bar\rho_s = \min(\bar\rho, \rho_s)`, :math:`c_s = \lambda \min(1, \rho_s)
    (1 - \mathrm{done}_s)`, :math:`\gamma_s = \gamma (1 - \mathrm{term}_s)` and
    :math:`V_s = v_t[s]` the value of the observation that followed step ``s`` (before any
    auto-reset):

    .. math::
        \delta_s = \bar\rho_s (r_s + \gamma_s V_s - v(x_s)), \qquad
        v_s - v(x_s) = \delta_s + \gamma_s c_s (v_{s+1} - v(x_{s+1})), \quad v_T - v(x_T) = 0,

    .. math::
        q_s = r_s + \gamma_s \big(\lambda_s v_{s+1} + (1 - \lambda_s) V_s\big), \quad
        \lambda_s = \lambda (1 - \mathrm{done}_s), \; v_{T} := V_{T-1}, \qquad
        A^{pg}_s = \min(\bar\rho_{pg}, \rho_s) (q_s - v(x_s)),

    with :math:`\mathrm{done}_s = \mathrm{term}_s \lor \mathrm{trunc}_s`. As in :func:`gae`, a
    truncation still bootstraps from the value of the final observation but cuts the trace: the
    next step belongs to another episode. When nothing is truncated (and ``v_t[s] ==
    v_tm1[s + 1]`` inside episodes whenever ``lambda_ < 1``) this is
    ``rlax.vtrace_td_error_and_advantage`` with ``discount_t = γ (1 - term_t)`` (tested); the
    errors are ``rlax.vtrace`` with a per-step λ that is zero where an episode ends. rlax is not
    called: its scan's initial carry does not vary over a ``shard_map`` device axis, which
    ``jax.shard_map``'s check rejects.

    Espeholt et al., 2018, "IMPALA", https://arxiv.org/abs/1802.01561, section 4.

    Args:
      v_tm1: f32 ``[T, B]`` values of the observations the actions were taken in.
      v_t: f32 ``[T, B]`` values of the observations that followed (bootstrap values).
      r_t: f32 ``[T, B]`` rewards.
      terminated_t: bool ``[T, B]``: the episode ended at step ``s`` (no bootstrap).
      truncated_t: bool ``[T, B]``: a time limit cut the episode at step ``s`` (bootstrap,
        cut the trace).
      rho_tm1: f32 ``[T, B]`` importance ratios ``pi(a_s | x_s) / mu(a_s | x_s)``.
      gamma: discount.
      lambda_: trace parameter (1 in IMPALA).
      clip_rho: :math:`\bar\rho`, the clip of the ratios in the TD errors.
      clip_pg_rho: :math:`\bar\rho_{pg}`, the clip of the ratios in the policy-gradient advantage.
      stop_target_gradients: no gradient through the targets: ``errors`` is
        ``stop_gradient(v_s) - v(x_s)`` (``pg_advantage`` and ``q_estimate`` are not stopped).

    Returns:
      :class:`VTraceOutput` of f32 ``[T, B]`` arrays; the V-trace targets are
      ``errors + v_tm1``.
    """
    chex.assert_rank([v_tm1, v_t, r_t, terminated_t, truncated_t, rho_tm1], 2)
    one_stream = functools.partial(
        _vtrace_one_stream,
        gamma=gamma,
        lambda_=lambda_,
        clip_rho=clip_rho,
        clip_pg_rho=clip_pg_rho,
        stop_target_gradients=stop_target_gradients,
    )
    return jax.vmap(one_stream, in_axes=1, out_axes=1)(
        v_tm1, v_t, r_t, terminated_t, truncated_t, rho_tm1
    )


def bootstrap_values(
    value_fn,
    params,
    v_obs: chex.Array,
    bootstrap_obs: chex.Array,
    truncated_t: chex.Array,
    time_axis: int = 0,
) -> chex.Array:
    """The values of a trajectory's ``bootstrap_obs`` from those of its ``obs``, ``v_obs``
    (``[T, B, ...]``, or ``[B, T, ...]`` with ``time_axis=1``), with as few network passes as
    the trajectory allows.

    Inside an episode ``bootstrap_obs[t] == obs[t + 1]`` (the :class:`~podracer.types.Trajectory`
    contract), so the bootstrap value of step ``t`` is ``v_obs[t + 1]``, except at the last step
    (``value_fn`` on ``bootstrap_obs[T - 1]``: ``B`` rows) and at episode ends. A termination's
    bootstrap is multiplied by a zero discount, so whatever stands there does; a truncation
    before the last step needs ``value_fn`` of its final observation: the truncated steps' final
    observations are gathered ``B`` at a time (a ``lax.while_loop``: no pass without a
    truncation, one ``B``-row pass for up to ``B`` of them, which is every case where the time
    limit is longer than the rollout) and their values put in place. Under ``vmap`` with a
    batched ``truncated_t`` (vmapped members) the loop runs as many passes as the member with
    the most truncations needs.

    ``value_fn(params, obs [N, ...]) -> [N, ...]`` gives values or action values (a pytree of
    them); the result has ``v_obs``'s shape. ``bootstrap_obs`` may be a pytree of ``[T, B, ...]``
    leaves too: a recurrent network's bootstrap is ``(carry after the step, bootstrap_obs)``
    (:func:`podracer.core.memory.bootstrap_outputs`). (``params`` is marked as varying over the
    observations' ``shard_map`` axes before the loop, as every value the loop computes is.)
    """
    num_steps = truncated_t.shape[time_axis]
    dims = truncated_t.ndim
    last = jax.tree.map(lambda x: jnp.take(x, num_steps - 1, axis=time_axis), bootstrap_obs)
    tail = jax.tree.map(lambda v: jnp.expand_dims(v, time_axis), value_fn(params, last))
    shifted = jax.tree.map(
        lambda v, t: jnp.concatenate(
            [jax.lax.slice_in_dim(v, 1, num_steps, axis=time_axis), t], axis=time_axis
        ),
        v_obs,
        tail,
    )

    size = truncated_t.size
    rows = size // num_steps  # one step's worth: B
    step_index = jax.lax.broadcasted_iota(jnp.int32, truncated_t.shape, time_axis)
    before_last = (truncated_t & (step_index < num_steps - 1)).reshape(size)

    def flat(tree):
        return jax.tree.map(lambda x: x.reshape(size, *x.shape[dims:]), tree)

    flat_obs = flat(bootstrap_obs)
    # Typed as varying as the observations are, as every value computed in the loop is.
    varying = vary_as(params, jax.tree.leaves(bootstrap_obs)[0])

    def pending(carry):
        return jnp.any(carry[0])

    def one_pass(carry):
        """The values of the next ``rows`` truncated steps' final observations, in place."""
        mask, values = carry
        (index,) = jnp.nonzero(mask, size=rows, fill_value=size)  # size: no step (dropped)
        picked = jax.tree.map(lambda x: jnp.take(x, index, axis=0, mode="clip"), flat_obs)
        new = value_fn(varying, picked)
        values = jax.tree.map(lambda v, n: v.at[index].set(n, mode="drop"), values, new)
        return mask.at[index].set(False, mode="drop"), values

    _, values = jax.lax.while_loop(pending, one_pass, (before_last, flat(shifted)))
    return jax.tree.map(lambda v, s: v.reshape(s.shape), values, shifted)
