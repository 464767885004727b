"""Advantage and return estimators over ``[T, B]`` with terminations and truncations.

Each operator is written for one stream ``[T]`` (shapes asserted with chex) and batched over the
environment axis with ``vmap``, in the style of rlax.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def _gae_one_stream(r_t, v_tm1, v_t, terminated_t, truncated_t, gamma, lambda_):
    chex.assert_rank([r_t, v_tm1, v_t, terminated_t, truncated_t], 1)
    chex.assert_equal_shape([r_t, v_tm1, v_t, terminated_t, truncated_t])
    discount_t = gamma * (1.0 - terminated_t.astype(v_t.dtype))
    trace_t = lambda_ * (1.0 - (terminated_t | truncated_t).astype(v_t.dtype))
    delta_t = r_t + discount_t * v_t - v_tm1

    def backward(adv_t, xs):
        delta, discount, trace = xs
        adv_tm1 = delta + discount * trace * adv_t
        return adv_tm1, adv_tm1

    _, adv = jax.lax.scan(
        backward, jnp.zeros_like(v_t[0]), (delta_t, discount_t, trace_t), reverse=True, unroll=16
    )
    return adv


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
      terminated_t, truncated_t: bool ``[T, B]``.
      gamma, lambda_: discount and trace parameter (floats or traced scalars).

    Returns:
      f32 ``[T, B]`` advantages; the λ-returns are ``advantages + v_tm1``.
    """
    chex.assert_rank([r_t, v_tm1, v_t, terminated_t, truncated_t], 2)
    return jax.vmap(_gae_one_stream, in_axes=(1, 1, 1, 1, 1, None, None), out_axes=1)(
        r_t, v_tm1, v_t, terminated_t, truncated_t, gamma, lambda_
    )
