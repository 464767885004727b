"""Array operations the networks use, where a backend needs them written differently.

:func:`conv_general_dilated` is ``lax.conv_general_dilated`` with, on XLA:CPU, a gradient made of
operations that run as fast inside a loop as outside one. XLA:CPU computes the gradients of a
convolution as convolutions with unusual dimension numbers (batch and feature axes swapped for
the kernel's gradient); outside a loop it picks layouts that send them to its fast (Eigen)
kernels, but inside a ``while`` loop — every ``lax.scan``, so every learner that scans over epochs
and minibatches — it cannot, and runs them through a generic emitter tens of times slower
(jax-ml/jax#12868; the figures are in ``benchmarks/README.md``).

Here, for stride-1 convolutions of ``NHWC`` images with ``HWIO`` kernels (every convolution of
the IMPALA ResNet), the backward pass on CPU is

- ``dx``: a forward ``NHWC`` convolution of ``dy`` with the kernel flipped in space and its input
  and output channels swapped, padded by ``k - 1 - pad``;
- ``dw[i, j] = sum_{n, h, w} x_pad[n, h + i, w + j, :]^T dy[n, h, w, :]``: one matrix product per
  kernel offset, ``[C, N*H*W] @ [N*H*W, O]``.

Both are ordinary forward convolutions and dots, which XLA:CPU runs at full speed in loops.
Processes whose default backend is not the CPU (GPU, TPU), and other convolutions (strides,
dilations, negative padding, groups, other layouts), use ``lax.conv_general_dilated`` itself,
unchanged; a CPU program traced there but run elsewhere still takes JAX's gradient
(``lax.platform_dependent``).

One limit: the CPU path is a ``jax.custom_vjp``, so forward-mode differentiation (``jax.jvp``,
``jax.jacfwd``, ``jax.hessian``) through it raises; reverse mode, including gradients of
gradients, works. Set ``podracer.util.ops.conv_general_dilated = jax.lax.conv_general_dilated``
before building a network to use JAX's convolution everywhere.

:func:`unrolled_threefry` compiles programs with JAX's threefry hash unrolled on the CPU too (see
there): the same random bits, fewer XLA:CPU thunks per call for the small per-step programs of a
host actor.
"""

from __future__ import annotations

import contextlib
import functools
import threading

import jax
import jax.numpy as jnp
from jax import lax

_NHWC = ("NHWC", "HWIO", "NHWC")


def varying_axes(x) -> frozenset:
    """The ``shard_map`` mesh axes along which ``x`` varies (empty outside ``shard_map``)."""
    aval = jax.typeof(x)
    if hasattr(aval, "vma"):  # the attribute's name in earlier JAX releases
        return frozenset(aval.vma)
    manual = getattr(aval, "manual_axis_type", None)
    return frozenset(getattr(manual, "varying", ()))


def _vary_over(x, axes: frozenset):
    """``x`` marked as varying over ``axes`` too (inside ``shard_map``); the transpose of the
    mark sums the cotangent over those axes, as JAX's own gradient of a replicated input does."""
    missing = tuple(sorted(axes - varying_axes(x)))
    return lax.pcast(x, missing, to="varying") if missing else x


def vary_as(tree, x):
    """Each leaf of ``tree`` marked as varying over every ``shard_map`` axis ``x`` varies over
    (nothing outside ``shard_map``)."""
    axes = varying_axes(x)
    return jax.tree.map(lambda leaf: _vary_over(leaf, axes), tree)


def vary_like(new, old):
    """Each leaf of ``new`` marked as varying over the ``shard_map`` axes its leaf in ``old``
    varies over: a loop carry keeps its type when a step returns a value that depends on no
    input (an environment whose ``terminated`` is always False)."""
    return jax.tree.map(lambda n, o: _vary_over(n, varying_axes(o)), new, old)


def _forward(x, w, padding):
    return lax.conv_general_dilated(x, w, (1, 1), padding, dimension_numbers=_NHWC)


def _cpu_gradients(x, w, dy, padding):
    """``(dx, dw)`` of a stride-1 ``NHWC`` / ``HWIO`` convolution from forward convs and dots."""
    kh, kw = w.shape[:2]
    (top, bottom), (left, right) = padding
    flipped = jnp.flip(w, (0, 1)).transpose(0, 1, 3, 2)  # [kh, kw, O, C]
    dx_padding = ((kh - 1 - top, kh - 1 - bottom), (kw - 1 - left, kw - 1 - right))
    dx = _forward(dy, flipped, dx_padding)
    x_pad = jnp.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    out_h, out_w = dy.shape[1:3]
    dw = jnp.stack(
        [
            jnp.einsum("nhwc,nhwo->co", x_pad[:, i : i + out_h, j : j + out_w, :], dy)
            for i in range(kh)
            for j in range(kw)
        ]
    ).reshape(w.shape)
    return dx, dw


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _stride1_conv(x, w, padding):
    return _forward(x, w, padding)


def _stride1_conv_fwd(x, w, padding):
    return _forward(x, w, padding), (x, w)


def _stride1_conv_bwd(padding, residuals, dy):
    x, w = residuals

    def default(x, w, dy):
        _, vjp = jax.vjp(lambda x, w: _forward(x, w, padding), x, w)
        return vjp(dy)

    return lax.platform_dependent(
        x, w, dy, cpu=lambda x, w, dy: _cpu_gradients(x, w, dy, padding), default=default
    )


_stride1_conv.defvjp(_stride1_conv_fwd, _stride1_conv_bwd)


def conv_general_dilated(
    lhs,
    rhs,
    window_strides,
    padding,
    lhs_dilation=None,
    rhs_dilation=None,
    dimension_numbers=None,
    feature_group_count=1,
    batch_group_count=1,
    precision=None,
    preferred_element_type=None,
):
    """``lax.conv_general_dilated`` (same arguments, same values); stride-1 ``NHWC`` / ``HWIO``
    convolutions get the loop-friendly CPU gradient described in the module docstring. Pass it
    as ``flax.linen.Conv(..., conv_general_dilated=conv_general_dilated)``."""
    ndim = lhs.ndim
    plain = (
        jax.default_backend() == "cpu"
        and ndim == 4
        and tuple(window_strides) == (1, 1)
        and all(d == 1 for d in (lhs_dilation or (1, 1)))
        and all(d == 1 for d in (rhs_dilation or (1, 1)))
        and feature_group_count == 1
        and batch_group_count == 1
        and precision is None
        and preferred_element_type is None
        and lax.conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
        == lax.conv_dimension_numbers(lhs.shape, rhs.shape, _NHWC)
    )
    if not plain:
        return lax.conv_general_dilated(
            lhs,
            rhs,
            window_strides,
            padding,
            lhs_dilation=lhs_dilation,
            rhs_dilation=rhs_dilation,
            dimension_numbers=dimension_numbers,
            feature_group_count=feature_group_count,
            batch_group_count=batch_group_count,
            precision=precision,
            preferred_element_type=preferred_element_type,
        )
    if isinstance(padding, str):
        padding = lax.padtype_to_pads(lhs.shape[1:3], rhs.shape[:2], (1, 1), padding)
    padding = tuple((int(lo), int(hi)) for lo, hi in padding)
    if min(min(pair) for pair in padding) < 0:  # cropping: JAX's own convolution
        return lax.conv_general_dilated(lhs, rhs, (1, 1), padding, dimension_numbers=_NHWC)
    # Both operands of the custom gradient vary over the same shard_map axes, so that its CPU
    # and default branches have one output type (a replicated kernel and a split batch: the
    # kernel's gradient is summed over the split, as with lax's convolution).
    axes = varying_axes(lhs) | varying_axes(rhs)
    return _stride1_conv(_vary_over(lhs, axes), _vary_over(rhs, axes), padding)


_threefry_lock = threading.Lock()
_threefry_users = 0  # contexts open; JAX's CPU rule is swapped out while there are any
_threefry_saved = None  # JAX's CPU rule, while swapped out


def _cpu_threefry_rules():
    """``(rules, primitive, unrolled rule)`` from JAX's internals, or None where this JAX
    release lays them out differently (then :func:`unrolled_threefry` changes nothing)."""
    try:
        from jax._src.interpreters import mlir
        from jax._src.random import threefry2x32

        rules = mlir._platform_specific_lowerings["cpu"]
        primitive = threefry2x32.threefry2x32_p
        unrolled = mlir._lowerings[primitive]  # JAX's rule where no platform has its own
    except (ImportError, AttributeError, KeyError):
        return None
    if primitive not in rules or not isinstance(unrolled, mlir.LoweringRuleEntry):
        return None
    return rules, primitive, unrolled


@contextlib.contextmanager
def unrolled_threefry():
    """Programs lowered inside this context hash random bits with JAX's threefry unrolled on
    the CPU, as JAX lowers it for GPUs and TPUs: the same bits, other XLA code.

    On the CPU JAX lowers the threefry hash as a rolled loop of 5 iterations (smaller programs,
    faster compiles), and XLA:CPU runs each iteration as several thunks. A host actor's step
    (a few small matmuls and one categorical sample, dispatched at every environment step) then
    spends more time in that loop than in the network: Sebulba's PPO step for 32 CartPole envs
    takes ~160 us rolled and ~90 us unrolled on a 2-core CPU (``benchmarks/README.md``). Whole
    training programs are not lowered this way: an Anakin PPO update got slower unrolled.

    Only lowering reads the rule: enter the context where a program compiles (its first call,
    or ``.lower().compile()``); calls from the compile cache run what was compiled. The
    context is thread-safe and re-entrant; another thread compiling meanwhile also gets the
    unrolled hash (the same bits). Where JAX's internals are laid out differently the context
    does nothing.
    """
    global _threefry_users, _threefry_saved
    found = _cpu_threefry_rules()
    if found is None:
        yield
        return
    rules, primitive, unrolled = found
    with _threefry_lock:
        if _threefry_users == 0:
            _threefry_saved, rules[primitive] = rules[primitive], unrolled
        _threefry_users += 1
    try:
        yield
    finally:
        with _threefry_lock:
            _threefry_users -= 1
            if _threefry_users == 0:
                rules[primitive], _threefry_saved = _threefry_saved, None
