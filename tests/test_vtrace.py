import jax
import jax.numpy as jnp
import numpy as np
import rlax

from podracer.core.returns import gae, vtrace


def numpy_vtrace(v_tm1, v_t, r, term, trunc, rho, gamma, lam, clip_rho, clip_pg_rho):
    """A plain loop from the paper's definitions, one environment column at a time."""
    T, B = r.shape
    errors, pg_adv, q = (np.zeros((T, B)) for _ in range(3))
    for b in range(B):
        next_error = 0.0  # v_{s+1} - v(x_{s+1})
        for s in reversed(range(T)):
            discount = 0.0 if term[s, b] else gamma
            cut = term[s, b] or trunc[s, b]
            c = 0.0 if cut else lam * min(1.0, rho[s, b])
            delta = min(clip_rho, rho[s, b]) * (r[s, b] + discount * v_t[s, b] - v_tm1[s, b])
            errors[s, b] = delta + discount * c * next_error
            # The bootstrap of q: the next V-trace target inside an episode (mixed with the next
            # value by lambda), the final observation's value where an episode ends or at T.
            if cut or s == T - 1:
                bootstrap = v_t[s, b]
            else:
                bootstrap = lam * (next_error + v_tm1[s + 1, b]) + (1 - lam) * v_t[s, b]
            q[s, b] = r[s, b] + discount * bootstrap
            pg_adv[s, b] = min(clip_pg_rho, rho[s, b]) * (q[s, b] - v_tm1[s, b])
            next_error = errors[s, b]
    return errors, pg_adv, q


def random_inputs(seed, T, B, p_term=0.15, p_trunc=0.0):
    rng = np.random.default_rng(seed)
    f32 = np.float32
    return dict(
        v_tm1=rng.normal(size=(T, B)).astype(f32),
        v_t=rng.normal(size=(T, B)).astype(f32),
        r_t=rng.normal(size=(T, B)).astype(f32),
        terminated_t=rng.uniform(size=(T, B)) < p_term,
        truncated_t=np.zeros((T, B), bool) if not p_trunc else rng.uniform(size=(T, B)) < p_trunc,
        rho_tm1=np.exp(rng.normal(scale=0.7, size=(T, B))).astype(f32),
    )


def test_vtrace_hand_computed():
    # One stream of 3 steps, gamma = 0.5, lambda = 1; step 1 is truncated.
    out = vtrace(
        v_tm1=jnp.array([[0.5], [1.0], [1.5]]),
        v_t=jnp.array([[4.0], [6.0], [8.0]]),  # v_t[1]: the final obs's value at the truncation
        r_t=jnp.array([[1.0], [2.0], [3.0]]),
        terminated_t=jnp.array([[False], [False], [False]]),
        truncated_t=jnp.array([[False], [True], [False]]),
        rho_tm1=jnp.array([[2.0], [0.5], [1.0]]),
        gamma=0.5,
    )
    e2 = 1.0 * (3.0 + 0.5 * 8.0 - 1.5)  # 5.5
    e1 = 0.5 * (2.0 + 0.5 * 6.0 - 1.0)  # 2.0; the trace is cut after a truncation
    e0 = 1.0 * (1.0 + 0.5 * 4.0 - 0.5) + 0.5 * 1.0 * e1  # rho 2 clipped to 1: 2.5 + 1.0
    np.testing.assert_allclose(out.errors[:, 0], [e0, e1, e2], rtol=1e-6)
    q2 = 3.0 + 0.5 * 8.0  # 7
    q1 = 2.0 + 0.5 * 6.0  # 5: bootstraps from the final obs, not the next episode's target
    q0 = 1.0 + 0.5 * (e1 + 1.0)  # 2.5: the next V-trace target
    np.testing.assert_allclose(out.q_estimate[:, 0], [q0, q1, q2], rtol=1e-6)
    np.testing.assert_allclose(
        out.pg_advantage[:, 0], [q0 - 0.5, 0.5 * (q1 - 1.0), q2 - 1.5], rtol=1e-6
    )


def test_vtrace_equals_rlax_without_truncation():
    T, B, gamma = 20, 5, 0.97
    x = random_inputs(0, T, B)
    discount = gamma * (1.0 - x["terminated_t"].astype(np.float32))
    rlax_fn = jax.vmap(
        rlax.vtrace_td_error_and_advantage, in_axes=(1, 1, 1, 1, 1, None, None, None), out_axes=1
    )
    ours = vtrace(**x, gamma=gamma, clip_rho=1.2, clip_pg_rho=0.8)
    ref = rlax_fn(x["v_tm1"], x["v_t"], x["r_t"], discount, x["rho_tm1"], 1.0, 1.2, 0.8)
    for name in ("errors", "pg_advantage", "q_estimate"):
        np.testing.assert_allclose(getattr(ours, name), getattr(ref, name), rtol=1e-5, atol=1e-5)

    # lambda < 1: rlax bootstraps q from v_tm1[t + 1], ours from v_t[t]; equal when the values
    # come from one sequence, as they do inside episodes.
    values = np.random.default_rng(1).normal(size=(T + 1, B)).astype(np.float32)
    x.update(v_tm1=values[:-1], v_t=values[1:])
    ours = vtrace(**x, gamma=gamma, lambda_=0.9)
    ref = rlax_fn(x["v_tm1"], x["v_t"], x["r_t"], discount, x["rho_tm1"], 0.9, 1.0, 1.0)
    for name in ("errors", "pg_advantage", "q_estimate"):
        np.testing.assert_allclose(getattr(ours, name), getattr(ref, name), rtol=1e-5, atol=1e-5)


def test_vtrace_equals_numpy_with_truncation_and_termination():
    T, B, gamma = 16, 3, 0.99
    x = random_inputs(2, T, B, p_term=0.0)
    x["terminated_t"][[4, 11], [0, 2]] = True
    x["truncated_t"][[7, 2], [0, 1]] = True
    x["truncated_t"][T - 1, 2] = True  # a truncation at the very end
    for lam, clip_rho, clip_pg_rho in [(1.0, 1.0, 1.0), (0.8, 2.0, 0.5)]:
        out = vtrace(**x, gamma=gamma, lambda_=lam, clip_rho=clip_rho, clip_pg_rho=clip_pg_rho)
        ref = numpy_vtrace(*x.values(), gamma, lam, clip_rho, clip_pg_rho)
        for got, want in zip(out, ref, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_on_policy_vtrace_errors_are_gae():
    # With rho = 1 the V-trace errors are the GAE advantages, terminations and truncations too.
    x = random_inputs(3, 24, 4, p_term=0.1, p_trunc=0.1)
    x["rho_tm1"] = np.ones_like(x["rho_tm1"])
    for lam in (1.0, 0.9):
        out = vtrace(**x, gamma=0.95, lambda_=lam)
        adv = gae(x["r_t"], x["v_tm1"], x["v_t"], x["terminated_t"], x["truncated_t"], 0.95, lam)
        np.testing.assert_allclose(out.errors, adv, rtol=1e-5, atol=1e-5)


def test_vtrace_targets_carry_no_gradient():
    x = random_inputs(4, 8, 2, p_trunc=0.1)

    def value_loss(v_tm1, v_t):
        out = vtrace(v_tm1, v_t, *list(x.values())[2:], gamma=0.9)
        return 0.5 * jnp.sum(jnp.square(out.errors))

    g_tm1, g_t = jax.grad(value_loss, argnums=(0, 1))(x["v_tm1"], x["v_t"])
    out = vtrace(**x, gamma=0.9)
    np.testing.assert_allclose(g_tm1, -out.errors, rtol=1e-6)
    np.testing.assert_array_equal(g_t, np.zeros_like(g_t))


def test_vtrace_runs_inside_shard_map(two_devices):
    # The carry of the backward scan must vary over the device axis like the inputs do.
    mesh = jax.make_mesh((2,), ("data",), devices=two_devices)
    x = random_inputs(5, 10, 4, p_trunc=0.1)
    spec = jax.P(None, "data")
    sharded = jax.jit(
        jax.shard_map(
            lambda *a: vtrace(*a, gamma=0.9, lambda_=0.95),
            mesh=mesh,
            in_specs=(spec,) * 6,
            out_specs=spec,
        )
    )
    sharding = jax.sharding.NamedSharding(mesh, spec)
    got = sharded(*(jax.device_put(v, sharding) for v in x.values()))
    want = vtrace(**x, gamma=0.9, lambda_=0.95)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
