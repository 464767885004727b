"""The open contracts, each exercised: action specs, ``ActorOutput.extras``, the actor state
carried through rollouts, the agent's own slot in ``LearnerState`` and the host-environment
protocol (its other half, Anakin rollout == Sebulba actor for a stateful agent, is in
``test_sebulba.py``)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from podracer import agents, envs
from podracer.core import make_learner, make_rollout, reset_envs
from podracer.envs import host as host_envs
from podracer.errors import ConfigError
from podracer.runs.checkpoint import Checkpointer
from podracer.types import (
    ActorOutput,
    Agent,
    BoundedActionSpec,
    DiscreteActionSpec,
    LearnerState,
    ObservationSpec,
    TimeStep,
)


def counting_agent(num_actions: int = 3) -> Agent:
    """A stateful toy agent: its actor state counts the steps since the episode started, its
    action is ``(count + argmax(obs @ w)) % num_actions`` (it reads the state), and its own slot
    in LearnerState counts updates and keeps the batch's mean reward."""

    def init(key, example_obs):
        return {"w": 0.01 * jax.random.normal(key, (example_obs.size, num_actions))}

    def act(params, count, obs, key):
        del key
        logits = obs.reshape(obs.shape[0], -1) @ params["w"]
        action = (count + jnp.argmax(logits, axis=-1)) % num_actions
        zeros = jnp.zeros(obs.shape[0])
        extras = {"logits": logits, "count": count}
        return count + 1, ActorOutput(action.astype(jnp.int32), zeros, zeros, extras)

    def prepare(params, agent_state, traj, mean_fn):
        del params, mean_fn
        batch = {"obs": traj.obs, "reward": traj.reward, "updates": agent_state["updates"]}
        batch["obs"] = jnp.swapaxes(traj.obs, 0, 1)
        batch["reward"] = jnp.swapaxes(traj.reward, 0, 1)
        batch["updates"] = jnp.broadcast_to(agent_state["updates"], traj.reward.shape[1:])
        return batch

    def loss(params, batch, key):
        del key
        obs = batch["obs"].reshape(-1, params["w"].shape[0])
        total = jnp.mean(jnp.square(obs @ params["w"])) * jnp.mean(batch["reward"] + 1.0)
        return total, {"loss": total}

    def init_state(key, params):
        del key, params
        return {"updates": jnp.zeros((), jnp.int32), "reward_mean": jnp.zeros(())}

    def update_state(state, params, traj, mean_fn):
        del params
        return {"updates": state["updates"] + 1, "reward_mean": mean_fn(traj.reward)}

    return Agent(
        init=init,
        act=act,
        prepare=prepare,
        loss=loss,
        initial_actor_state=lambda n: jnp.zeros(n, jnp.int32),
        init_state=init_state,
        update_state=update_state,
    )


def steps_since_start(done: np.ndarray) -> np.ndarray:
    """``[T, B]``: steps since the episode started at each step, from the done flags of the
    steps (0 at the first step of the rollout, which follows a reset)."""
    count = np.zeros(done.shape, np.int64)
    for t in range(1, done.shape[0]):
        count[t] = np.where(done[t - 1], 0, count[t - 1] + 1)
    return count


def test_actor_state_is_reset_where_episodes_start_and_recorded():
    env = envs.make("catch")
    agent = counting_agent()
    params = agent.init(jax.random.key(0), jnp.zeros(env.observation_spec.shape))
    rollout = jax.jit(make_rollout(env, agent, 30))
    state = reset_envs(
        env, jax.random.split(jax.random.key(1), 5), env.default_params, agent.initial_actor_state
    )
    state, traj, _ = rollout(params, state, env.default_params, jax.random.key(2))
    done = np.asarray(traj.terminated | traj.truncated)
    assert done.sum() >= 5  # catch ends every 9 steps: several episode starts in 30 steps
    expected = steps_since_start(done)
    np.testing.assert_array_equal(traj.actor_state, expected)
    # extras travel into the Trajectory untouched: the state act was given
    np.testing.assert_array_equal(traj.behaviour.extras["count"], expected)
    # the carry holds the state after the last act; the next rollout resets it where needed
    np.testing.assert_array_equal(state.actor_state, expected[-1] + 1)
    _, again, _ = rollout(params, state, env.default_params, jax.random.key(3))
    np.testing.assert_array_equal(again.actor_state[0], np.where(done[-1], 0, expected[-1] + 1))


def learner_and_traj(agent):
    env = envs.make("catch")
    example = jnp.zeros(env.observation_spec.shape)
    rollout = jax.jit(make_rollout(env, agent, 12))
    state = reset_envs(
        env, jax.random.split(jax.random.key(1), 8), env.default_params, agent.initial_actor_state
    )
    params = agent.init(jax.random.key(0), example)
    _, traj, _ = rollout(params, state, env.default_params, jax.random.key(2))
    return example, traj


def test_agent_state_slot_updates_averages_over_devices_and_is_checkpointed(
    one_device, two_devices, tmp_path
):
    agent = counting_agent()
    example, traj = learner_and_traj(agent)
    # a reward that differs between the devices' halves of the batch
    traj = traj._replace(reward=traj.reward + jnp.arange(8.0)[None, :])
    learner = make_learner(agent, optax.sgd(0.1), num_epochs=1, num_minibatches=1)
    state = learner.init(jax.random.key(5), example)
    assert int(state.agent_state["updates"]) == 0
    state, _ = jax.jit(learner.update)(state, traj)
    state, _ = jax.jit(learner.update)(state, traj)
    assert int(state.agent_state["updates"]) == 2
    np.testing.assert_allclose(state.agent_state["reward_mean"], np.mean(traj.reward), rtol=1e-6)

    # On two devices, each with half of the environments, the statistics are the whole batch's.
    mesh = jax.make_mesh((2,), ("data",), devices=two_devices)
    split = make_learner(agent, optax.sgd(0.1), num_epochs=1, num_minibatches=1, axis_name="data")
    update = jax.jit(
        jax.shard_map(
            split.update,
            mesh=mesh,
            in_specs=(jax.P(), jax.P(None, "data")),
            out_specs=(jax.P(), jax.P()),
        )
    )
    sharding = jax.sharding.NamedSharding
    two = jax.device_put(learner.init(jax.random.key(5), example), sharding(mesh, jax.P()))
    two, _ = update(two, jax.device_put(traj, sharding(mesh, jax.P(None, "data"))))
    np.testing.assert_allclose(two.agent_state["reward_mean"], np.mean(traj.reward), rtol=1e-6)

    # Checkpointed and restored with the rest of the learner state.
    with Checkpointer(str(tmp_path), keep=1) as checkpointer:
        checkpointer.save(2, state, {"updates": 2, "step": 0})
        template = learner.init(jax.random.key(9), example)
        restored, meta = checkpointer.restore(template, 2)
    assert isinstance(restored, LearnerState) and meta["updates"] == 2
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(restored), strict=True):
        if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(a, b)


def test_action_specs_discrete_and_bounded():
    bounded = BoundedActionSpec((2,), -1.0, 1.0)
    assert bounded.dtype == "float32" and bounded.shape == (2,)
    for name in ("ppo", "impala", "qlambda"):
        spec = agents.get(name)
        agent = spec.make_agent(spec.config_cls(), DiscreteActionSpec(4))
        params = agent.init(jax.random.key(0), jnp.zeros(3))
        _, out = agent.act(params, (), jnp.zeros((5, 3)), jax.random.key(1))
        assert out.action.shape == (5,) and out.extras["logits"].shape == (5, 4)
        assert agent.greedy(out).shape == (5,)
        if name == "qlambda":
            with pytest.raises(ConfigError, match=f"{name} takes discrete actions"):
                spec.make_agent(spec.config_cls(), bounded)
            continue
        # the actor-critics act in a bounded spec with a Gaussian policy
        agent = spec.make_agent(spec.config_cls(), bounded)
        params = agent.init(jax.random.key(0), jnp.zeros(3))
        _, out = agent.act(params, (), jnp.zeros((5, 3)), jax.random.key(1))
        assert out.action.shape == (5, 2) and out.action.dtype == jnp.float32
        assert np.all(np.abs(out.action) <= 1.0) and out.extras["sample"].shape == (5, 2)
        np.testing.assert_array_equal(agent.greedy(out), np.clip(out.extras["mean"], -1, 1))


def test_host_environments_implement_one_protocol():
    made = [
        host_envs.make("envpool:CartPole-v1", num_envs=3, seed=1),
        host_envs.make("gymnasium:CartPole-v1", num_envs=3, seed=1),
        host_envs.make("gymnax:CartPole-v1", num_envs=3, seed=1),
    ]
    async_env = host_envs.make("envpool:CartPole-v1", num_envs=4, batch_size=2, seed=1)
    try:
        for env in made:
            assert (env.num_envs, env.batch_size, env.is_async) == (3, 3, False), env.id
            assert env.observation_spec == ObservationSpec((4,), np.dtype(np.float32)), env.id
            assert env.action_spec == DiscreteActionSpec(2), env.id
            ts = env.reset()
            returns = np.zeros(3)
            for _ in range(40):  # constant action: every pole falls within 40 steps
                ts = env.step(np.ones(3, np.int32))
                assert isinstance(ts, TimeStep) and ts.obs.shape == ts.final_obs.shape == (3, 4)
                assert not (ts.terminated & ts.truncated).any()
                np.testing.assert_array_equal(ts.final_obs[~ts.done], ts.obs[~ts.done])
                returns += np.where(ts.info.done, ts.info.episode_return, 0.0)
            assert (returns > 0).all(), env.id  # each env finished an episode, recorded in info
        assert async_env.is_async and async_env.batch_size == 2
        with pytest.raises(ConfigError, match="async mode"):
            host_envs.make("gymnasium:CartPole-v1", num_envs=4, batch_size=2)
    finally:
        for env in [*made, async_env]:
            env.close()


def test_a_checkpoint_saved_before_the_agent_slot_restores(tmp_path):
    """Run directories of the first release hold LearnerStates without ``agent_state``."""
    spec = agents.get("ppo")
    agent, optimizer = spec.build(spec.config_cls(), 2, 10)
    learner = make_learner(agent, optimizer, num_epochs=1, num_minibatches=1)
    state = learner.init(jax.random.key(3), jnp.zeros(4))
    old = {  # what the first release saved: the four fields, by name
        "params": state.params,
        "opt_state": state.opt_state,
        "key": jax.random.key_data(state.key),
        "update_count": state.update_count,
    }
    with Checkpointer(str(tmp_path), keep=1) as checkpointer:
        checkpointer.save(7, old, {"updates": 7, "step": 0})
        restored, meta = checkpointer.restore(learner.init(jax.random.key(4), jnp.zeros(4)))
    assert meta["updates"] == 7 and restored.agent_state == ()
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(restored.params), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(jax.random.key_data(restored.key), old["key"])


def test_agent_state_kept_per_device(two_devices):
    """``state_per_device``: each device keeps its own slot (a replay buffer's shard): here the
    samples it has seen and the sum of the rewards of its last batch."""
    from podracer import loops
    from podracer.loops.anakin import LOOP, AnakinConfig, build_system

    base = counting_agent()

    def init_state(key, params):
        del key, params
        return {"seen": jnp.zeros((), jnp.int32), "reward_sum": jnp.zeros(())}

    def update_state(state, params, traj, mean_fn):
        del params, mean_fn  # nothing combined over devices
        return {"seen": state["seen"] + traj.reward.size, "reward_sum": jnp.sum(traj.reward)}

    agent = base._replace(
        init_state=init_state,
        update_state=update_state,
        prepare=lambda params, agent_state, traj, mean_fn: base.prepare(
            params, {"updates": agent_state["seen"]}, traj, mean_fn
        ),
        state_per_device=True,
    )

    # The learner core under shard_map: each device's own batch.
    example, traj = learner_and_traj(agent)
    traj = traj._replace(reward=jnp.broadcast_to(jnp.arange(8.0), traj.reward.shape))
    mesh = jax.make_mesh((2,), ("data",), devices=two_devices)
    split = make_learner(agent, optax.sgd(0.1), num_epochs=1, num_minibatches=1, axis_name="data")
    from podracer.core.learner.skeleton import per_device, state_specs

    specs = state_specs(agent, jax.P(), jax.P("data"))
    update = jax.jit(
        jax.shard_map(
            split.update,
            mesh=mesh,
            in_specs=(specs, jax.P(None, "data")),
            out_specs=(specs, jax.P()),
        )
    )
    state = per_device(agent, split.init(jax.random.key(5), example), 2)
    assert state.agent_state["seen"].shape == (2,)
    shardings = jax.tree.map(
        lambda spec: jax.sharding.NamedSharding(mesh, spec),
        specs,
        is_leaf=lambda x: isinstance(x, jax.P),
    )
    state = jax.device_put(state, shardings)
    traj = jax.device_put(traj, jax.sharding.NamedSharding(mesh, jax.P(None, "data")))
    state, _ = update(state, traj)
    state, _ = update(state, traj)
    np.testing.assert_array_equal(state.agent_state["seen"], [2 * 12 * 4, 2 * 12 * 4])
    np.testing.assert_allclose(state.agent_state["reward_sum"], [12 * 6.0, 12 * 22.0])

    # Anakin on two devices keeps it per device, per member.
    config = AnakinConfig(num_envs=8, rollout_len=4, num_seeds=2)
    recipe = loops.make_recipe(
        LOOP,
        "catch",
        agents.get("ppo"),
        agents.PPOConfig(num_epochs=1, num_minibatches=1),
        config,
        total_timesteps=3 * 32,
        devices=two_devices,
    )
    system = build_system(recipe._replace(agent=agent), config, devices=two_devices)
    result = system.run(None, seed=0)
    seen = np.asarray(result.state.learner.agent_state["seen"])
    np.testing.assert_array_equal(seen, [[48, 48], [48, 48]])  # [members, devices]
