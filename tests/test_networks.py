import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.networks import MLP, ActorCritic, ImpalaResNet, MinAtarCNN, NatureCNN, QNetwork


def count(params):
    return sum(x.size for x in jax.tree.leaves(params))


def test_actor_critic_separate_and_shared_torsos():
    obs = jnp.ones((5, 4))
    separate = ActorCritic(num_actions=3, hidden_sizes=(8, 8))
    shared = ActorCritic(num_actions=3, hidden_sizes=(8, 8), shared_torso=True)
    p_sep = separate.init(jax.random.key(0), obs)
    p_sh = shared.init(jax.random.key(0), obs)
    torso = (4 * 8 + 8) + (8 * 8 + 8)
    heads = (8 * 3 + 3) + (8 + 1)
    assert count(p_sep) == 2 * torso + heads
    assert count(p_sh) == torso + heads
    logits, value = separate.apply(p_sep, obs)
    assert logits.shape == (5, 3) and value.shape == (5,)
    # The value method is the value head of __call__.
    np.testing.assert_allclose(separate.apply(p_sep, obs, method=ActorCritic.value), value)


def test_mlp_flattens_and_casts_observations():
    board = jnp.ones((2, 10, 5), jnp.int32)
    mlp = MLP(hidden_sizes=(7,))
    params = mlp.init(jax.random.key(0), board)
    assert params["params"]["Dense_0"]["kernel"].shape == (50, 7)
    assert mlp.apply(params, board).dtype == jnp.float32


@pytest.mark.slow
@pytest.mark.parametrize(
    ("torso", "features", "flat"),
    [(NatureCNN, 512, 7 * 7 * 64), (ImpalaResNet, 256, 11 * 11 * 32)],
)
def test_image_torsos_take_channel_first_uint8_frames(torso, features, flat):
    frames = jax.random.randint(jax.random.key(0), (2, 4, 84, 84), 0, 256).astype(jnp.uint8)
    net = torso()
    params = jax.jit(net.init)(jax.random.key(1), frames)  # eager init compiles op by op: slow
    out = net.apply(params, frames)
    assert out.shape == (2, features) and out.dtype == jnp.float32
    dense = [k for k in params["params"] if k.startswith("Dense")]
    assert params["params"][dense[-1]]["kernel"].shape == (flat, features)
    # uint8 pixels are scaled on the device: the same as passing x / 255 as floats.
    np.testing.assert_allclose(
        net.apply(params, frames.astype(jnp.float32) / 255.0), out, rtol=1e-5, atol=1e-6
    )
    # channels_first=False takes the same frames as [B, H, W, C].
    nhwc = torso(channels_first=False).apply(params, jnp.transpose(frames, (0, 2, 3, 1)))
    np.testing.assert_allclose(nhwc, out, rtol=1e-5, atol=1e-6)


def test_actor_critic_picks_its_torso_by_name():
    frames = jnp.zeros((2, 4, 84, 84), jnp.uint8)
    net = ActorCritic(num_actions=6, torso="impala_resnet", shared_torso=True)
    params = jax.jit(net.init)(jax.random.key(0), frames)
    logits, value = net.apply(params, frames)
    assert logits.shape == (2, 6) and value.shape == (2,)
    assert set(params["params"]) == {"actor_torso", "policy_head", "value_head"}
    # The MLP stays the default and keeps its parameter tree.
    mlp = ActorCritic(num_actions=3, hidden_sizes=(8,)).init(jax.random.key(0), jnp.ones((1, 4)))
    assert set(mlp["params"]["actor_torso"]) == {"Dense_0"}
    with pytest.raises(ValueError, match="unknown torso 'resnet'"):
        ActorCritic(num_actions=3, torso="resnet").init(jax.random.key(0), frames)


def _numpy_layer_norm(x, scale, bias, eps=1e-6):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def test_minatar_cnn_with_layer_norm_equals_numpy():
    """The MinAtar torso recomputed by hand: a 3x3 valid convolution over [H, W, C] boolean
    frames, LayerNorm over the channels of each pixel, ReLU, flatten (row-major over H, W, C),
    dense, LayerNorm, ReLU."""
    rng = np.random.default_rng(0)
    frames = rng.random((2, 10, 10, 4)) < 0.3  # gymnax's MinAtar layout, bool
    net = MinAtarCNN(channels_first=False, layer_norm=True)
    params = net.init(jax.random.key(0), jnp.asarray(frames))["params"]
    # Non-trivial LayerNorm affine parameters, so that scale and bias are checked too.
    params = jax.tree.map(lambda p: p + 0.1 * rng.standard_normal(p.shape), params)
    out = np.asarray(net.apply({"params": params}, jnp.asarray(frames)))

    p = jax.tree.map(np.asarray, params)
    x = frames.astype(np.float64)
    kernel, bias = p["Conv_0"]["kernel"], p["Conv_0"]["bias"]  # [3, 3, 4, 16]
    conv = np.zeros((2, 8, 8, 16))
    for i in range(8):
        for j in range(8):
            patch = x[:, i : i + 3, j : j + 3, :]
            conv[:, i, j, :] = np.einsum("bhwc,hwcf->bf", patch, kernel) + bias
    h = np.maximum(_numpy_layer_norm(conv, p["LayerNorm_0"]["scale"], p["LayerNorm_0"]["bias"]), 0)
    h = h.reshape(2, -1) @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"]
    h = np.maximum(_numpy_layer_norm(h, p["LayerNorm_1"]["scale"], p["LayerNorm_1"]["bias"]), 0)
    assert out.shape == (2, 128)
    np.testing.assert_allclose(out, h, rtol=1e-4, atol=1e-5)
    # channels_first takes the same frames as [C, H, W].
    chw = MinAtarCNN(layer_norm=True).apply({"params": params}, np.transpose(frames, (0, 3, 1, 2)))
    np.testing.assert_allclose(chw, out, rtol=1e-5, atol=1e-6)


def test_q_network_dueling_head_and_torso_by_name():
    obs = jnp.asarray(np.random.default_rng(1).random((3, 10, 10, 4)) < 0.5)
    net = QNetwork(5, torso="minatar_cnn", channels_first=False, dueling=True)
    params = net.init(jax.random.key(0), obs)
    assert set(params["params"]) == {"MinAtarCNN_0", "Dense_0", "Dense_1"}
    p = params["params"]
    features = MinAtarCNN(channels_first=False).apply({"params": p["MinAtarCNN_0"]}, obs)
    value = features @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"]
    advantage = features @ p["Dense_1"]["kernel"] + p["Dense_1"]["bias"]
    expected = value + advantage - advantage.mean(-1, keepdims=True)
    np.testing.assert_allclose(net.apply(params, obs), expected, rtol=1e-5, atol=1e-6)
    # The MLP stays the default, with its LayerNorms where asked.
    mlp = QNetwork(2, hidden_sizes=(8,), layer_norm=True).init(jax.random.key(0), jnp.ones((1, 4)))
    assert set(mlp["params"]["MLP_0"]) == {"Dense_0", "LayerNorm_0"}


def test_q_network_config_fields_are_checked():
    from podracer.agents import DQNConfig, PQNConfig, QLambdaConfig
    from podracer.errors import ConfigError

    for config_cls in (DQNConfig, PQNConfig, QLambdaConfig):
        with pytest.raises(ConfigError, match="torso"):
            config_cls(torso="resnet")
    with pytest.raises(ConfigError, match=r"layer_norm=True .*impala_resnet"):
        PQNConfig(torso="impala_resnet")
    assert PQNConfig(torso="impala_resnet", layer_norm=False).torso == "impala_resnet"
