"""flax's recurrent cells over a whole sequence, written so that XLA:CPU runs the time loop fast.

:func:`gru_sequence` and :func:`lstm_sequence` compute exactly what ``flax.linen.GRUCell`` and
``flax.linen.OptimizedLSTMCell`` compute step by step (same params, same maths; tested equal),
over ``T`` steps of a batch ``[B]``, with the carry reset to zeros before every step where an
episode starts (the rule of :func:`podracer.core.acting.reset_actor_state`). Three things make
the loop cheap, measured on a 2-core CPU (``docs/memory.md``):

- the input projections (``x @ W_i + b``) of every step are one batched product before the
  loop; only ``h @ W_h`` stays inside;
- inside the loop every gate has its own product and nothing is sliced along the features (XLA
  emits an elementwise fusion that slices its minor axis several times slower inside a loop);
- the backward pass (a ``jax.custom_vjp``) runs the recurrence backwards once, emitting each
  step's gate gradients, and takes the recurrent weights' gradients in one product after the
  loop, instead of accumulating a ``[H, H]`` gradient per gate at every step.

Each returns ``(carries, outputs)``: the carry after every step ``[T, B, ...]`` (before any
reset) and the cell's output ``h`` of every step.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


def _steps(x, kernel, bias=None):
    """``x [T, B, E] @ kernel [E, H] (+ bias)`` for every step at once."""
    y = jnp.einsum("tbe,eh->tbh", x, kernel)
    return y if bias is None else y + bias


def _keep(start, x):
    """``x`` where no episode starts (``start [B]``), zeros where one does."""
    return jnp.where(start[:, None], jnp.zeros_like(x), x)


def _sum_outer(a, b):
    """``sum_t a[t]^T b[t]`` for ``a [T, B, H]``, ``b [T, B, K]``: ``[H, K]``."""
    return jnp.einsum("tbh,tbk->hk", a, b)


# --- GRU -----------------------------------------------------------------------------------


def _gru_step(w, h_in, xr, xz, xn):
    """One GRU step from the (already reset) carry: ``(h, residuals)``."""
    w_r, w_z, w_n, b_n = w
    r = jax.nn.sigmoid(xr + h_in @ w_r)
    z = jax.nn.sigmoid(xz + h_in @ w_z)
    hn = h_in @ w_n + b_n
    n = jnp.tanh(xn + r * hn)
    return (1.0 - z) * n + z * h_in, (h_in, r, z, n, hn)


@jax.custom_vjp
def _gru_recurrence(w, h0, xr, xz, xn, starts, cuts):
    del cuts  # the backward pass's

    def one(h, inputs):
        xr, xz, xn, start = inputs
        h, _ = _gru_step(w, _keep(start, h), xr, xz, xn)
        return h, h

    return jax.lax.scan(one, h0, (xr, xz, xn, starts))[1]


def _gru_forward(w, h0, xr, xz, xn, starts, cuts):
    def one(h, inputs):
        xr, xz, xn, start = inputs
        h, residuals = _gru_step(w, _keep(start, h), xr, xz, xn)
        return h, (h, residuals)

    _, (hs, residuals) = jax.lax.scan(one, h0, (xr, xz, xn, starts))
    return hs, (w, starts | cuts, residuals)


def _gru_backward(saved, d_hs):
    (w_r, w_z, w_n, _), starts, (h_in, r, z, n, hn) = saved

    def one(d_next, inputs):
        d_out, start, h_in, r, z, n, hn = inputs
        dh = d_out + d_next
        dn = dh * (1.0 - z)
        dz_pre = dh * (h_in - n) * z * (1.0 - z)
        dn_pre = dn * (1.0 - n * n)
        dr_pre = dn_pre * hn * r * (1.0 - r)
        dhn = dn_pre * r
        d_in = dh * z + dr_pre @ w_r.T + dz_pre @ w_z.T + dhn @ w_n.T
        return _keep(start, d_in), (dr_pre, dz_pre, dn_pre, dhn)

    d_h0, (dxr, dxz, dxn, dhn) = jax.lax.scan(
        one, jnp.zeros_like(d_hs[0]), (d_hs, starts, h_in, r, z, n, hn), reverse=True
    )
    dw = (_sum_outer(h_in, dxr), _sum_outer(h_in, dxz), _sum_outer(h_in, dhn), dhn.sum((0, 1)))
    return dw, d_h0, dxr, dxz, dxn, None, None


_gru_recurrence.defvjp(_gru_forward, _gru_backward)


def gru_sequence(params, carry, x, starts, cuts=None):
    """``flax.linen.GRUCell`` (``params``: its ``ir``, ``iz``, ``in``, ``hr``, ``hz``, ``hn``)
    over ``x [T, B, E]`` from ``carry [B, H]``, reset to zeros where ``starts [T, B]``; returns
    ``(h [T, B, H], h [T, B, H])`` (the GRU's carry is its output). Where ``cuts [T, B]``, no
    gradient flows back through the carry into the steps before (a stop-gradient on the carry
    entering that step: R2D2's burn-in)."""
    p = params
    xr = _steps(x, p["ir"]["kernel"], p["ir"]["bias"])
    xz = _steps(x, p["iz"]["kernel"], p["iz"]["bias"])
    xn = _steps(x, p["in"]["kernel"], p["in"]["bias"])
    w = (p["hr"]["kernel"], p["hz"]["kernel"], p["hn"]["kernel"], p["hn"]["bias"])
    cuts = jnp.zeros_like(starts) if cuts is None else cuts
    hs = _gru_recurrence(w, carry, xr, xz, xn, starts, cuts)
    return hs, hs


# --- LSTM ----------------------------------------------------------------------------------

_GATES = ("i", "f", "g", "o")


def _lstm_step(w, c_in, h_in, xi, xf, xg, xo):
    """One LSTM step from the (already reset) carry: ``((c, h), residuals)``."""
    w_i, w_f, w_g, w_o = w
    i = jax.nn.sigmoid(xi + h_in @ w_i)
    f = jax.nn.sigmoid(xf + h_in @ w_f)
    g = jnp.tanh(xg + h_in @ w_g)
    o = jax.nn.sigmoid(xo + h_in @ w_o)
    c = f * c_in + i * g
    tc = jnp.tanh(c)
    return (c, o * tc), (c_in, h_in, i, f, g, o, tc)


@jax.custom_vjp
def _lstm_recurrence(w, c0, h0, xi, xf, xg, xo, starts, cuts):
    del cuts  # the backward pass's

    def one(carry, inputs):
        *x, start = inputs
        c, h = carry
        carry, _ = _lstm_step(w, _keep(start, c), _keep(start, h), *x)
        return carry, carry

    return jax.lax.scan(one, (c0, h0), (xi, xf, xg, xo, starts))[1]


def _lstm_forward(w, c0, h0, xi, xf, xg, xo, starts, cuts):
    def one(carry, inputs):
        *x, start = inputs
        c, h = carry
        carry, residuals = _lstm_step(w, _keep(start, c), _keep(start, h), *x)
        return carry, (carry, residuals)

    _, (carries, residuals) = jax.lax.scan(one, (c0, h0), (xi, xf, xg, xo, starts))
    return carries, (w, starts | cuts, residuals)


def _lstm_backward(saved, d_carries):
    (w_i, w_f, w_g, w_o), starts, (c_in, h_in, i, f, g, o, tc) = saved
    d_cs, d_hs = d_carries

    def one(d_next, inputs):
        dc_next, dh_next = d_next
        dc_out, dh_out, start, c_in, i, f, g, o, tc = inputs
        dh = dh_out + dh_next
        dc = dc_out + dc_next + dh * o * (1.0 - tc * tc)
        di = dc * g * i * (1.0 - i)
        df = dc * c_in * f * (1.0 - f)
        dg = dc * i * (1.0 - g * g)
        do = dh * tc * o * (1.0 - o)
        dh_in = di @ w_i.T + df @ w_f.T + dg @ w_g.T + do @ w_o.T
        return (_keep(start, dc * f), _keep(start, dh_in)), (di, df, dg, do)

    zeros = jnp.zeros_like(d_hs[0])
    (dc0, dh0), gates = jax.lax.scan(
        one,
        (zeros, zeros),
        (d_cs, d_hs, starts, c_in, i, f, g, o, tc),
        reverse=True,
    )
    dw = tuple(_sum_outer(h_in, d) for d in gates)
    return (dw, dc0, dh0, *gates, None, None)


_lstm_recurrence.defvjp(_lstm_forward, _lstm_backward)


def lstm_sequence(params, carry, x, starts, cuts=None):
    """``flax.linen.OptimizedLSTMCell`` (``params``: its ``ii``.. ``io`` and ``hi``.. ``ho``)
    over ``x [T, B, E]`` from ``carry = (c, h) [B, H]``, reset to zeros where
    ``starts [T, B]``, no gradient crossing the carry where ``cuts`` (as :func:`gru_sequence`);
    returns ``((c, h) [T, B, H], h [T, B, H])``."""
    p = params
    x_gates = [_steps(x, p[f"i{gate}"]["kernel"], p[f"h{gate}"]["bias"]) for gate in _GATES]
    w = tuple(p[f"h{gate}"]["kernel"] for gate in _GATES)
    c0, h0 = carry
    cuts = jnp.zeros_like(starts) if cuts is None else cuts
    cs, hs = _lstm_recurrence(w, c0, h0, *x_gates, starts, cuts)
    return (cs, hs), hs


SEQUENCES: dict[str, Any] = {"gru": gru_sequence, "lstm": lstm_sequence}
"""The sequence function of each ``memory`` kind."""
