import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.networks import MLP, ActorCritic, ImpalaResNet, NatureCNN


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
