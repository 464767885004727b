"""Replay in the one learner core: the off-policy learner.

An off-policy agent is an ordinary :class:`~podracer.types.Agent` whose config inherits
:class:`ReplayFields` and whose spec's ``make_learner`` is :func:`replay_learner`:

- ``prepare(params, agent_state, traj, mean_fn) -> items``: what to store, one item per
  transition along a leading axis (for DQN: ``obs``, the action, the n-step return, its
  discount and the observation it bootstraps from, computed inside the trajectory so that no
  target crosses an episode's end and a truncation bootstraps from its ``final_obs``);
- ``loss(params, batch: ReplayBatch, key) -> (loss, metrics)``: ``batch.items`` the sampled
  items ``[b, ...]``, ``batch.weights [b]`` their importance weights (1 without
  prioritisation; weigh each sample's loss by them), ``batch.agent_state`` the agent's own
  slot (a target network). ``metrics["priority"] [b]``, when the loss gives it, becomes the
  sampled items' new priorities (``|TD error|``); it is not logged.

``update(state, traj)`` adds the trajectory's items to this device's buffer, then takes
``round(replay_ratio * steps)`` gradient steps (``steps``: the environment steps of the update
on every device together), each on a batch of ``batch_size / D`` items sampled by every one of
the ``D`` learner devices from its own buffer, the gradients averaged over devices as for PPO;
no step changes anything until every buffer holds ``learning_starts`` items. Then the agent's
``update_state`` (once per update, as for every agent). The buffers are ``flashbax`` item
buffers, sampled uniformly or in proportion to priorities (:class:`PrioritisedBuffer`; Schaul
et al., 2016, https://arxiv.org/abs/1511.05952), held in the agent's slot of the learner state,
one per learner device (``Agent.state_per_device``), so they are checkpointed with the rest.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from podracer.config import ConfigValueError, check_positive, check_range
from podracer.core.learner import (
    AGENT_STATE_STREAM,
    mark_varying,
    one_device,
    optimizer_step,
)
from podracer.types import Agent, Learner, LearnerState, ObservationSpec, Trajectory


@dataclasses.dataclass(frozen=True)
class ReplayFields:
    """The replay fields of an off-policy agent's config."""

    buffer_size: int = 50_000
    """Transitions each learner device keeps (its own environments'): the memory is about
    buffer_size x learner devices x (2 observations + 4 numbers) x 4 bytes (CartPole: 40 bytes
    a transition, 2 MB for 50,000)."""
    batch_size: int = 128
    """Transitions per gradient step, over all learner devices (a multiple of their count)."""
    learning_starts: int = 1_000
    """Transitions in each device's buffer before the first gradient step."""
    replay_ratio: float = 0.25
    """Gradient steps per environment step (every device's steps together)."""
    prioritised: bool = False
    """Prioritised replay (proportional, with importance weights) instead of uniform."""
    priority_exponent: float = 0.6
    """Prioritisation's alpha: sampling probability proportional to priority ** alpha."""
    importance_exponent: float = 0.4
    """Importance weights' beta: weight (N P(i)) ** -beta, divided by the batch's largest."""

    def check_replay(self) -> None:
        """Validates the replay fields (call it from ``__post_init__``)."""
        check_positive(self, "buffer_size", "batch_size", "learning_starts")
        check_range(self, "replay_ratio", 0.0, None, low_open=True)
        check_range(self, "priority_exponent", 0.0, None)
        check_range(self, "importance_exponent", 0.0, None)
        if self.batch_size > self.buffer_size:
            from podracer.config import ConfigError

            raise ConfigError(
                f"{type(self).__name__}.batch_size={self.batch_size} is not allowed: it must be "
                f"at most buffer_size={self.buffer_size}"
            )


class ReplayState(NamedTuple):
    """The slot of a :func:`replayed` agent, per learner device: its buffer and the agent's
    own state."""

    buffer: Any  # a flashbax item buffer's state (capacity buffer_size)
    agent: Any


class ReplayBatch(NamedTuple):
    """What an off-policy agent's ``loss`` receives."""

    items: Any  # [b, ...]: sampled items (what prepare returned, one per transition)
    weights: jax.Array  # f32 [b]: importance weights (ones without prioritisation)
    agent_state: Any  # the agent's own slot


class PrioritisedState(NamedTuple):
    """A prioritised buffer: a flashbax item buffer's state and a priority per slot."""

    experience: Any  # [1, capacity, ...] (flashbax's layout)
    current_index: jax.Array  # i32 []: the next slot written
    is_full: jax.Array  # bool []
    priorities: jax.Array  # f32 [capacity]: each slot's priority (0 where empty)
    max_priority: jax.Array  # f32 []: new items get the largest priority seen so far


class PrioritisedSample(NamedTuple):
    experience: Any  # [b, ...]
    indices: jax.Array  # i32 [b]: the slots sampled
    probabilities: jax.Array  # f32 [b]: P(i) = p_i^alpha / sum_j p_j^alpha


class PrioritisedBuffer(NamedTuple):
    """Proportional prioritised sampling over a flashbax item buffer.

    flashbax's own prioritised buffer (its sum tree) does not trace inside ``shard_map`` with
    JAX 0.10's varying-axes check (a ``lax`` loop in the sum tree mixes a per-device and a
    replicated value), and the learner runs there in every loop; so the priorities are kept
    here, one per slot, and sampled through their cumulative sum (``O(capacity)`` per batch:
    for the buffers of this library, well under the gradient step's cost)."""

    init: Any
    add: Any
    sample: Any
    set_priorities: Any


def prioritised_buffer(config: ReplayFields, sample_batch_size: int) -> PrioritisedBuffer:
    """The :class:`PrioritisedBuffer` of ``config``."""
    import flashbax as fbx

    items = fbx.make_item_buffer(
        max_length=config.buffer_size, min_length=1, sample_batch_size=1, add_batches=True
    )
    capacity = config.buffer_size
    alpha = config.priority_exponent

    def init(item):
        state = items.init(item)
        return PrioritisedState(
            state.experience,
            state.current_index,
            state.is_full,
            jnp.zeros((capacity,), jnp.float32),
            jnp.ones((), jnp.float32),
        )

    def add(state: PrioritisedState, batch):
        size = jax.tree.leaves(batch)[0].shape[0]
        slots = (state.current_index + jnp.arange(size)) % capacity
        inner = items.add(flashbax_state(state), batch)
        priorities = state.priorities.at[slots].set(state.max_priority)
        return PrioritisedState(
            inner.experience, inner.current_index, inner.is_full, priorities, state.max_priority
        )

    def sample(state: PrioritisedState, key):
        weights = state.priorities**alpha
        cdf = jnp.cumsum(weights)
        total = cdf[-1]
        draws = jax.random.uniform(key, (sample_batch_size,)) * total
        indices = jnp.minimum(jnp.searchsorted(cdf, draws, side="right"), capacity - 1)
        experience = jax.tree.map(lambda x: x[0, indices], state.experience)
        return PrioritisedSample(experience, indices, weights[indices] / total)

    def set_priorities(state: PrioritisedState, indices, priorities):
        return state._replace(
            priorities=state.priorities.at[indices].set(priorities),
            max_priority=jnp.maximum(state.max_priority, jnp.max(priorities)),
        )

    return PrioritisedBuffer(init, add, sample, set_priorities)


def flashbax_state(state: PrioritisedState):
    """The flashbax item buffer state inside a :class:`PrioritisedState`."""
    from flashbax.buffers.trajectory_buffer import TrajectoryBufferState

    return TrajectoryBufferState(
        experience=state.experience,
        current_index=state.current_index,
        is_full=state.is_full,
    )


def make_buffer(config: ReplayFields, sample_batch_size: int):
    """The buffer of ``config``: a flashbax item buffer (uniform) or a
    :class:`PrioritisedBuffer`, sampling ``sample_batch_size`` items at a time."""
    import flashbax as fbx

    if config.prioritised:
        return prioritised_buffer(config, sample_batch_size)
    return fbx.make_item_buffer(
        max_length=config.buffer_size,
        min_length=1,
        sample_batch_size=sample_batch_size,
        add_batches=True,
    )


def stored(buffer_state) -> jax.Array:
    """The number of items a flashbax item buffer holds (i32 [])."""
    capacity = jax.tree.leaves(buffer_state.experience)[0].shape[1]
    return jnp.where(buffer_state.is_full, capacity, buffer_state.current_index)


def example_items(agent: Agent, params, agent_state, observation_spec: ObservationSpec):
    """One item of ``agent.prepare`` (shapes and dtypes), from a trajectory of one step of
    one environment acted with ``agent`` on a zero observation."""
    obs = jnp.zeros((1, 1, *observation_spec.shape), observation_spec.dtype)

    def items(params, agent_state):
        acting = agent.actor_params(params, agent_state)
        actor_state = agent.initial_actor_state(1)
        _, out = agent.act(acting, actor_state, obs[0], jax.random.key(0))
        traj = Trajectory(
            obs=obs,
            reward=jnp.zeros((1, 1)),
            terminated=jnp.zeros((1, 1), bool),
            truncated=jnp.zeros((1, 1), bool),
            bootstrap_obs=obs,
            behaviour=jax.tree.map(lambda x: x[None], out),
            actor_state=jax.tree.map(lambda x: x[None], actor_state),
        )
        return agent.prepare(params, agent_state, traj, jnp.mean)

    shapes = jax.eval_shape(items, params, agent_state)
    return jax.tree.map(lambda s: jnp.zeros(s.shape[1:], s.dtype), shapes)


def replayed(agent: Agent, config: ReplayFields, observation_spec: ObservationSpec) -> Agent:
    """``agent`` with a replay buffer in its slot (:class:`ReplayState`, per learner device):
    what :func:`replay_learner` trains. ``prepare`` gives the items to store; the actors and
    ``update_state`` see the agent's own state."""

    def init_state(key, params):
        inner = agent.init_state(key, params)
        item = example_items(agent, params, inner, observation_spec)
        return ReplayState(make_buffer(config, 1).init(item), inner)

    def update_state(state: ReplayState, params, traj, mean_fn):
        return state._replace(agent=agent.update_state(state.agent, params, traj, mean_fn))

    def prepare(params, state: ReplayState, traj, mean_fn):
        return agent.prepare(params, state.agent, traj, mean_fn)

    def actor_params(params, state: ReplayState):
        return agent.actor_params(params, state.agent)

    return agent._replace(
        init_state=init_state,
        update_state=update_state,
        prepare=prepare,
        actor_params=actor_params,
        state_per_device=True,
    )


def importance_weights(probabilities, size, beta: float, axis_name: str | None = None):
    """``w_i = (N P(i)) ** -beta / max_j w_j`` of samples drawn with probabilities
    ``P(i) [b]`` from ``N = size`` items; the maximum over every device's batch."""
    weights = (size.astype(jnp.float32) * probabilities) ** (-beta)
    biggest = jnp.max(weights)
    if axis_name is not None:
        biggest = jax.lax.pmax(biggest, axis_name)
    return weights / biggest


class NStepItem(NamedTuple):
    """One stored transition with its n-step target's pieces."""

    obs: jax.Array  # [...]
    action: jax.Array  # i32 []
    n_step_return: jax.Array  # f32 []: G_t
    discount: jax.Array  # f32 []: d_t (0 when the episode terminated within the k steps)
    next_obs: jax.Array  # [...]: s'_t, what the target bootstraps from


def n_step_targets(traj: Trajectory, gamma: float, n: int):
    """``(G, d, last) [T, B]``: the n-step returns, their discounts and the step whose
    ``bootstrap_obs`` each bootstraps from (see the module's docstring)."""
    num_steps, num_envs = traj.reward.shape
    t = jnp.arange(num_steps)[:, None] * jnp.ones((1, num_envs), jnp.int32)
    env = jnp.broadcast_to(jnp.arange(num_envs)[None, :], (num_steps, num_envs))
    ret = jnp.zeros((num_steps, num_envs), jnp.float32)
    scale = jnp.ones((num_steps, num_envs), jnp.float32)  # gamma ** i
    alive = jnp.ones((num_steps, num_envs), bool)
    terminal = jnp.zeros((num_steps, num_envs), bool)
    last = t
    for i in range(n):
        index = jnp.minimum(t + i, num_steps - 1)
        valid = alive & (t + i < num_steps)
        ret = ret + jnp.where(valid, scale * traj.reward[index, env], 0.0)
        last = jnp.where(valid, index, last)
        scale = jnp.where(valid, scale * gamma, scale)
        terminal = terminal | (valid & traj.terminated[index, env])
        alive = valid & ~(traj.terminated[index, env] | traj.truncated[index, env])
    return ret, jnp.where(terminal, 0.0, scale), last


def n_step_items(traj: Trajectory, gamma: float, n: int) -> NStepItem:
    """The trajectory's transitions as :class:`NStepItem` s ``[T * B]`` (time-major order)."""
    num_steps, num_envs = traj.reward.shape
    ret, discount, last = n_step_targets(traj, gamma, n)
    env = jnp.broadcast_to(jnp.arange(num_envs)[None, :], (num_steps, num_envs))
    items = NStepItem(
        obs=traj.obs,
        action=traj.action,
        n_step_return=ret,
        discount=discount,
        next_obs=traj.bootstrap_obs[last, env],
    )
    return jax.tree.map(lambda x: x.reshape(num_steps * num_envs, *x.shape[2:]), items)


def gradient_steps(config: ReplayFields, steps_per_update: int) -> int:
    """Gradient steps per update: ``replay_ratio`` times the update's environment steps, at
    least 1."""
    return max(1, round(config.replay_ratio * steps_per_update))


def replay_learner(
    agent: Agent,
    optimizer: optax.GradientTransformation,
    config: ReplayFields,
    *,
    axis_name: str | None = None,
    buffer=None,
    **layout: Any,
) -> Learner:
    """The off-policy learner of a :func:`replayed` agent (an ``AgentSpec.make_learner``): see
    the module's docstring. ``axis_name`` is the data-parallel axis (None on one device);
    ``buffer(sample_batch_size)`` replaces flashbax's (tests); the loop's other ``layout``
    options (unroll, microbatches) are for the epochs learner and are not used."""
    del layout
    make = buffer or (lambda size: make_buffer(config, size))

    def pmean(x):
        return jax.lax.pmean(x, axis_name) if axis_name is not None else x

    def mean_fn(x):
        return pmean(jnp.mean(x))

    def init(key, example_obs) -> LearnerState:
        params_key, state_key = jax.random.split(key)
        params = agent.init(params_key, example_obs)
        slot = agent.init_state(jax.random.fold_in(key, AGENT_STATE_STREAM), params)
        return LearnerState(
            params=params,
            opt_state=optimizer.init(params),
            key=state_key,
            update_count=jnp.zeros((), jnp.int32),
            agent_state=jax.tree.map(lambda x: x[None], slot),
        )

    def update(state: LearnerState, traj: Trajectory):
        num_devices = 1 if axis_name is None else jax.lax.axis_size(axis_name)
        if config.batch_size % num_devices:
            raise ConfigValueError(
                f"batch_size={config.batch_size} is not allowed on {num_devices} learner "
                f"devices: it must be a multiple of {num_devices}"
            )
        per_device = config.batch_size // num_devices
        buffer_fns = make(per_device)
        key, steps_key = jax.random.split(state.key)
        own: ReplayState = one_device(agent, state.agent_state)
        items = agent.prepare(state.params, own, traj, mean_fn)
        buffer_state = buffer_fns.add(own.buffer, items)
        ready = jnp.all(stored(buffer_state) >= config.learning_starts)
        if axis_name is not None:
            ready = jax.lax.pmin(ready.astype(jnp.int32), axis_name) > 0
        num_steps = gradient_steps(config, traj.reward.size * num_devices)
        device = 0 if axis_name is None else jax.lax.axis_index(axis_name)

        def step(carry, key):
            params, opt_state, buffer_state = carry
            sample_key, loss_key = jax.random.split(jax.random.fold_in(key, device))
            sample = buffer_fns.sample(buffer_state, sample_key)
            if config.prioritised:
                weights = importance_weights(
                    sample.probabilities,
                    stored(buffer_state),
                    config.importance_exponent,
                    axis_name,
                )
            else:
                weights = jnp.ones((per_device,), jnp.float32)
            batch = ReplayBatch(sample.experience, weights, own.agent)
            grads, metrics = jax.grad(agent.loss, has_aux=True)(
                mark_varying(params, batch, axis_name), batch, loss_key
            )
            metrics = dict(metrics)
            priority = metrics.pop("priority", None)
            new_params, new_opt_state, grad_norm = optimizer_step(
                optimizer, params, opt_state, grads, axis_name
            )
            # Before the buffers hold learning_starts items the step changes nothing and its
            # numbers (a loss on unfilled slots) mean nothing: they read 0.
            metrics = {
                name: jnp.where(ready, value, jnp.zeros_like(value))
                for name, value in {**metrics, "grad_norm": grad_norm}.items()
            }
            params, opt_state = jax.tree.map(
                lambda new, old: jnp.where(ready, new, old),
                (new_params, new_opt_state),
                (params, opt_state),
            )
            if config.prioritised and priority is not None:
                new_priorities = jnp.abs(priority) + 1e-6
                updated = buffer_fns.set_priorities(buffer_state, sample.indices, new_priorities)
                buffer_state = jax.tree.map(
                    lambda new, old: jnp.where(ready, new, old), updated, buffer_state
                )
            return (params, opt_state, buffer_state), metrics

        (params, opt_state, buffer_state), metrics = jax.lax.scan(
            step,
            (state.params, state.opt_state, buffer_state),
            jax.random.split(steps_key, num_steps),
        )
        metrics = jax.tree.map(lambda m: pmean(jnp.mean(m)), metrics)
        metrics["replay_ready"] = ready.astype(jnp.float32)
        metrics["buffer_items"] = pmean(stored(buffer_state).astype(jnp.float32))
        slot = agent.update_state(own._replace(buffer=buffer_state), params, traj, mean_fn)
        new_state = LearnerState(
            params,
            opt_state,
            key,
            state.update_count + 1,
            jax.tree.map(lambda x: x[None], slot),
        )
        return new_state, metrics

    return Learner(init=init, update=update)


def buffer_bytes(item, buffer_size: int) -> int:
    """Bytes of a buffer of ``buffer_size`` items like ``item``."""
    return buffer_size * sum(
        math.prod(x.shape) * jnp.dtype(x.dtype).itemsize for x in jax.tree.leaves(item)
    )
