import jax
import jax.numpy as jnp
import numpy as np

from podracer import envs
from podracer.agents import PPOConfig, build
from podracer.core import make_rollout, reset_envs


def test_trajectory_layout_and_bootstrap_obs():
    env = envs.EpisodeStatistics(envs.make("catch"))
    agent, _ = build(PPOConfig(), 3, num_updates=1)
    params = agent.init(jax.random.key(0), jnp.zeros((10, 5)))
    rollout = make_rollout(env, agent, 20)
    state = reset_envs(env, jax.random.split(jax.random.key(1), 6), env.default_params)
    first_obs = state.timestep.obs
    state, traj, info = jax.jit(rollout)(params, state, env.default_params, jax.random.key(2))
    assert traj.obs.shape == (20, 6, 10, 5) and traj.action.shape == (20, 6)
    assert traj.behaviour.extras["logits"].shape == (20, 6, 3)
    np.testing.assert_array_equal(traj.obs[0], first_obs)
    done = np.asarray(traj.terminated | traj.truncated)
    # Within an episode, the bootstrap obs is the next obs; at an episode end it is not.
    for t in range(19):
        for b in range(6):
            same = np.array_equal(traj.bootstrap_obs[t, b], traj.obs[t + 1, b])
            assert same == (not done[t, b])
    # The carried TimeStep is the last step's: its final obs is the last bootstrap obs.
    np.testing.assert_array_equal(state.timestep.final_obs, traj.bootstrap_obs[-1])
    # Catch episodes last 9 steps: the 20 steps of each env hold 2 ends, at t = 8 and 17.
    assert done.sum() == 12 and done[8].all() and done[17].all()
    np.testing.assert_array_equal(info.done, done)
    np.testing.assert_array_equal(np.abs(info.episode_return[done]), 1.0)
    # The behaviour log-probabilities are those of the logits at the taken actions.
    log_probs = jax.nn.log_softmax(traj.behaviour.extras["logits"])
    taken = jnp.take_along_axis(log_probs, traj.action[..., None], -1)[..., 0]
    np.testing.assert_allclose(taken, traj.behaviour.log_prob, rtol=1e-5, atol=1e-6)
