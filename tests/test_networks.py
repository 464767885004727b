import jax
import jax.numpy as jnp
import numpy as np

from podracer.networks import MLP, ActorCritic


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
