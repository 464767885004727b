"""podracer.util.ops: the loop-friendly CPU gradient of stride-1 convolutions equals JAX's own; the
unrolled threefry hash gives the same bits as the rolled one."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from podracer import networks
from podracer.util import ops

NHWC = ("NHWC", "HWIO", "NHWC")


def _loss(conv, x, w, padding, strides=(1, 1)):
    y = conv(x, w, strides, padding, dimension_numbers=NHWC)
    return jnp.sum(jnp.sin(y) * jnp.arange(y.size, dtype=y.dtype).reshape(y.shape) / y.size)


@pytest.mark.parametrize("kernel", [(3, 3), (1, 1), (4, 2)])
@pytest.mark.parametrize("padding", ["SAME", "VALID", ((2, 0), (1, 1))])
def test_values_and_gradients_equal_jax_conv(kernel, padding):
    x = jax.random.normal(jax.random.key(0), (2, 9, 8, 3))
    w = jax.random.normal(jax.random.key(1), (*kernel, 3, 5))
    y = ops.conv_general_dilated(x, w, (1, 1), padding, dimension_numbers=NHWC)
    y_ref = lax.conv_general_dilated(x, w, (1, 1), padding, dimension_numbers=NHWC)
    np.testing.assert_array_equal(y, y_ref)
    grads = jax.grad(_loss, (1, 2))(ops.conv_general_dilated, x, w, padding)
    reference = jax.grad(_loss, (1, 2))(lax.conv_general_dilated, x, w, padding)
    for g, r in zip(grads, reference, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)


def test_gradient_inside_scan_and_vmap_equals_jax_conv():
    """The learner's situation: gradients inside a lax.scan, and a vmap over members."""
    xs = jax.random.normal(jax.random.key(2), (3, 2, 2, 7, 7, 4))  # [steps, members, N, H, W, C]
    w = jax.random.normal(jax.random.key(3), (2, 3, 3, 4, 4))  # [members, ...]

    def train(conv):
        def step(w, x):
            g = jax.vmap(jax.grad(lambda w, x: _loss(conv, x, w, "SAME")))(w, x)
            return w - 0.1 * g, None

        return jax.jit(lambda w, xs: jax.lax.scan(step, w, xs)[0])(w, xs)

    np.testing.assert_allclose(
        train(ops.conv_general_dilated), train(lax.conv_general_dilated), rtol=1e-5, atol=1e-5
    )


def test_the_cpu_gradient_is_the_one_taken_and_other_convs_fall_back():
    x = jnp.ones((1, 6, 6, 2))
    w = jnp.ones((3, 3, 2, 2))
    taken = jax.make_jaxpr(_loss, static_argnums=(0, 3))(ops.conv_general_dilated, x, w, "SAME")
    assert "custom_vjp_call" in str(taken)

    def lowered_ops(conv):  # the gradient as compiled for this (CPU) backend
        grad = jax.jit(jax.grad(lambda x, w: _loss(conv, x, w, "SAME"), (0, 1)))
        text = grad.lower(x, w).as_text()
        return text.count("stablehlo.convolution"), text.count("stablehlo.dot_general")

    # The CPU branch: the forward conv, dx as one more conv, dw as one dot per kernel offset;
    # JAX's gradient: three convolutions (the one for dw is what XLA:CPU runs slowly in loops).
    assert lowered_ops(ops.conv_general_dilated) == (2, 9)
    assert lowered_ops(lax.conv_general_dilated) == (3, 0)
    strided = jax.make_jaxpr(lambda w: _loss(ops.conv_general_dilated, x, w, "SAME", (2, 2)))
    assert "custom_vjp_call" not in str(strided(w))
    np.testing.assert_allclose(
        jax.grad(lambda w: _loss(ops.conv_general_dilated, x, w, "SAME", (2, 2)))(w),
        jax.grad(lambda w: _loss(lax.conv_general_dilated, x, w, "SAME", (2, 2)))(w),
    )


@pytest.mark.slow
def test_impala_resnet_gradient_equals_the_flax_default_conv(monkeypatch):
    """The torso with podracer's convolutions has the same outputs and gradients as with
    flax's default convolution (``lax.conv_general_dilated``)."""
    obs = jax.random.randint(jax.random.key(4), (2, 4, 20, 20), 0, 255).astype(jnp.uint8)
    torso = networks.ImpalaResNet(channels=(4, 8), hidden_size=16)
    params = torso.init(jax.random.key(5), obs)

    def loss(p):
        return jnp.sum(torso.apply(p, obs) ** 2)

    out, grads = torso.apply(params, obs), jax.grad(loss)(params)
    assert "custom_vjp_call" in str(jax.make_jaxpr(loss)(params))
    monkeypatch.setattr(ops, "conv_general_dilated", lax.conv_general_dilated)

    def reference_loss(p):  # a new function: JAX caches traces by function
        return jnp.sum(torso.apply(p, obs) ** 2)

    assert "custom_vjp_call" not in str(jax.make_jaxpr(reference_loss)(params))
    np.testing.assert_array_equal(out, torso.apply(params, obs))
    leaves = jax.tree.leaves(grads)
    assert len(leaves) == 2 * 2 * 5 + 2  # 2 stages x 5 convs x (kernel, bias), the dense layer
    for g, r in zip(leaves, jax.tree.leaves(jax.grad(reference_loss)(params)), strict=True):
        np.testing.assert_allclose(g, r, rtol=2e-4, atol=1e-6)


def test_negative_padding_falls_back_to_jax_conv():
    x = jax.random.normal(jax.random.key(6), (2, 9, 8, 3))
    w = jax.random.normal(jax.random.key(7), (3, 3, 3, 2))
    padding = ((-1, 0), (1, 1))
    np.testing.assert_array_equal(
        ops.conv_general_dilated(x, w, (1, 1), padding, dimension_numbers=NHWC),
        lax.conv_general_dilated(x, w, (1, 1), padding, dimension_numbers=NHWC),
    )
    grads = jax.grad(_loss, (1, 2))(ops.conv_general_dilated, x, w, padding)
    reference = jax.grad(_loss, (1, 2))(lax.conv_general_dilated, x, w, padding)
    for g, r in zip(grads, reference, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("split", ["batch", "kernel"])
def test_gradient_inside_shard_map_equals_jax_conv(split):
    """A replicated kernel with the batch split over devices (the kernel's gradient is summed
    over them), and a split kernel with a replicated batch (the input's gradient is summed)."""
    from jax.sharding import PartitionSpec as P

    auto = (jax.sharding.AxisType.Auto,)
    mesh = jax.make_mesh((2,), ("d",), devices=jax.devices()[:2], axis_types=auto)
    x = jax.random.normal(jax.random.key(8), (4, 7, 7, 3))
    w = jax.random.normal(jax.random.key(9), (2, 3, 3, 3, 5))  # one kernel per device
    specs = (P("d"), P()) if split == "batch" else (P(), P("d"))

    def grads(conv):
        def local(x, w):
            w = w[0] if split == "kernel" else w[:1].sum(0)
            return jax.grad(lambda x, w: _loss(conv, x, w, "SAME"), (0, 1))(x, w)

        out_specs = (P("d"), P()) if split == "batch" else (P(), P("d"))
        fn = jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=out_specs)
        return jax.jit(fn)(x, w)

    for g, r in zip(grads(ops.conv_general_dilated), grads(lax.conv_general_dilated), strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)


def _random_draws(key):
    """Every way the agents draw: split, fold_in, categorical, normal, uniform, permutation."""
    a, b = jax.random.split(jax.random.fold_in(key, 7))
    logits = jnp.linspace(-2.0, 2.0, 5 * 3).reshape(5, 3)
    return (
        jax.random.categorical(a, logits),
        jax.random.normal(b, (4, 2)),
        jax.random.uniform(jax.random.fold_in(b, 3), (6,)),
        jax.random.permutation(a, 10),
        jax.random.key_data(jax.random.split(b, 3)),
    )


def _compiled(fn, key):
    return jax.jit(lambda k: fn(k)).lower(key).compile()  # a fresh jit: nothing cached


def test_unrolled_threefry_gives_the_same_bits_without_the_rolled_loop():
    key = jax.random.key(42)
    rolled = _compiled(_random_draws, key)
    with ops.unrolled_threefry():
        unrolled = _compiled(_random_draws, key)
        with ops.unrolled_threefry():  # re-entrant
            nested = _compiled(_random_draws, key)
        inside = _compiled(_random_draws, key)  # after the nested context ended
    assert ("while" in inside.as_text()) == ("while" in unrolled.as_text())
    after = _compiled(_random_draws, key)
    for k in (key, jax.random.key(0), jax.random.key(2**31 - 1)):
        expected = jax.tree.leaves(rolled(k))
        for program in (unrolled, nested, after):
            for x, y in zip(expected, jax.tree.leaves(program(k)), strict=True):
                np.testing.assert_array_equal(x, y)
    if ops._cpu_threefry_rules() is None:
        pytest.skip("this JAX lays its threefry lowering out differently: the context is a no-op")
    assert "while" in rolled.as_text() and "while" in after.as_text()  # JAX's CPU lowering
    assert "while" not in unrolled.as_text() and "while" not in nested.as_text()
