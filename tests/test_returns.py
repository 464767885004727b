import jax
import jax.numpy as jnp
import numpy as np
import rlax

from podracer.core.returns import gae


def numpy_gae(r, v_tm1, v_t, term, trunc, gamma, lam):
    """A plain loop, one environment column at a time."""
    T, B = r.shape
    adv = np.zeros((T, B))
    for b in range(B):
        next_adv = 0.0
        for t in reversed(range(T)):
            bootstrap = 0.0 if term[t, b] else gamma * v_t[t, b]
            delta = r[t, b] + bootstrap - v_tm1[t, b]
            carry = 0.0 if (term[t, b] or trunc[t, b]) else gamma * lam * next_adv
            next_adv = delta + carry
            adv[t, b] = next_adv
    return adv


def test_gae_hand_computed():
    # One stream of 3 steps, gamma = 0.5, lambda = 0.5; step 1 is truncated.
    r = jnp.array([[1.0], [2.0], [3.0]])
    v_tm1 = jnp.array([[0.5], [1.0], [1.5]])
    v_t = jnp.array([[4.0], [6.0], [8.0]])  # v_t[1] = value of the final obs at truncation
    term = jnp.array([[False], [False], [False]])
    trunc = jnp.array([[False], [True], [False]])
    adv = gae(r, v_tm1, v_t, term, trunc, 0.5, 0.5)
    a2 = 3.0 + 0.5 * 8.0 - 1.5  # 5.5
    a1 = 2.0 + 0.5 * 6.0 - 1.0  # 4.0, trace cut: the next step is another episode
    a0 = (1.0 + 0.5 * 4.0 - 0.5) + 0.25 * a1  # 2.5 + 1.0
    np.testing.assert_allclose(adv[:, 0], [a0, a1, a2], rtol=1e-6)


def test_gae_equals_rlax_without_truncation():
    key = jax.random.key(0)
    T, B, gamma, lam = 20, 5, 0.97, 0.9
    k1, k2, k3 = jax.random.split(key, 3)
    r = jax.random.normal(k1, (T, B))
    values = jax.random.normal(k2, (T + 1, B))
    term = jax.random.uniform(k3, (T, B)) < 0.15
    trunc = jnp.zeros((T, B), bool)
    ours = gae(r, values[:-1], values[1:], term, trunc, gamma, lam)
    discount = gamma * (1.0 - term.astype(jnp.float32))
    ref = jax.vmap(
        rlax.truncated_generalized_advantage_estimation, in_axes=(1, 1, None, 1), out_axes=1
    )(r, discount, lam, values)
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)


def test_gae_equals_numpy_with_truncation_and_termination():
    rng = np.random.default_rng(1)
    T, B, gamma, lam = 16, 3, 0.99, 0.95
    r = rng.normal(size=(T, B)).astype(np.float32)
    v_tm1 = rng.normal(size=(T, B)).astype(np.float32)
    v_t = rng.normal(size=(T, B)).astype(np.float32)
    term = np.zeros((T, B), bool)
    trunc = np.zeros((T, B), bool)
    term[4, 0] = term[11, 1] = True
    trunc[7, 0] = trunc[2, 2] = trunc[9, 1] = True
    ours = gae(
        jnp.array(r),
        jnp.array(v_tm1),
        jnp.array(v_t),
        jnp.array(term),
        jnp.array(trunc),
        gamma,
        lam,
    )
    ref = numpy_gae(r, v_tm1, v_t, term, trunc, gamma, lam)
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)
    # The truncation changes the result (the test is not blind to it).
    no_trunc = gae(
        jnp.array(r),
        jnp.array(v_tm1),
        jnp.array(v_t),
        jnp.array(term),
        jnp.zeros((T, B), bool),
        gamma,
        lam,
    )
    assert not np.allclose(no_trunc[:8, 0], ours[:8, 0])
