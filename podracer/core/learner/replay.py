"""Replay in the one learner core: what an off-policy agent asks for, and the learner's body
for it.

An off-policy agent is an ordinary :class:`~podracer.types.Agent` with a :class:`Replay` in
``Agent.replay`` (built from the :class:`ReplayFields` its config inherits). The learner
(:func:`podracer.core.learner.make_learner`) then keeps one buffer per learner device in
:attr:`~podracer.types.LearnerState.replay` (checkpointed with the rest), made from the item the
agent declares (``Replay.item``: shapes, never probed), and:

- ``prepare(params, agent_state, traj, mean_fn)`` returns what to add. Two kinds:

  - **items** (``Replay.window == 0``): independent items ``[N, ...]``, for DQN and SAC an
    n-step transition each (``obs``, the action, the n-step return, its discount and the
    observation it bootstraps from), computed inside the trajectory so that no target crosses
    an episode's end and a truncation bootstraps from its ``final_obs``
    (:func:`n_step_items`);
  - **windows** (``Replay.window == L``): the trajectory's steps ``[T, B, ...]``, added to one
    stream per environment; a sample is ``L`` consecutive steps of one environment, starting
    every ``Replay.period`` steps, and a window may span rollouts (R2D2's sequences, with the
    actor state at their start).

- ``loss(params, batch: ReplayBatch, key) -> (loss, LossOutput(metrics, priority))``:
  ``batch.items`` the sampled items ``[b, ...]`` (or windows ``[b, L, ...]``),
  ``batch.weights [b]`` their importance weights (1 without prioritisation; weigh each
  sample's loss by them), ``batch.agent_state`` the agent's own slot (a target network);
  ``priority [b]`` (e.g. ``|TD error|``) becomes the samples' new priorities.

``update(state, traj)`` adds ``prepare``'s items to this device's buffer, then takes
``round(replay_ratio * steps)`` gradient steps (``steps``: the environment steps of the update
on every device together), each on a batch of ``batch_size / D`` samples drawn by every one of
the ``D`` learner devices from its own buffer, the gradients averaged over devices as for PPO;
no step changes anything until every buffer holds ``learning_starts`` steps (and, for windows,
one whole window). Then the agent's ``update_state`` (once per update, as for every agent).
Samples are drawn uniformly or in proportion to priorities (Schaul et al., 2016,
https://arxiv.org/abs/1511.05952). Storage is flashbax's: its item buffer for items, its
trajectory buffer for windows; the sampling of windows and every priority are kept here
(flashbax's prioritised buffers keep a sum tree that does not trace inside ``shard_map`` with
JAX 0.10's varying-axes check, and its trajectory buffer's uniform sample returns no indices to
set priorities at).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from podracer.core.learner.buffers import (
    ReplayFields,
    importance_weights,
    make_buffer,
    stored,
    window_buffer,
)
from podracer.core.learner.skeleton import BodyState, BodyTools, LearnerBody
from podracer.errors import ConfigError, ConfigValueError
from podracer.types import Trajectory


class Replay(NamedTuple):
    """What an off-policy agent asks of the learner (``Agent.replay``): a buffer of the items
    it declares, per learner device, and batches sampled from it.

    ``item(example_obs) -> one item``: the ``jax.ShapeDtypeStruct`` s of one stored item (of
    one step of one environment, for windows), from one observation's shape and dtype (a
    ``jax.ShapeDtypeStruct``); ``prepare`` must return items of exactly these shapes, with a
    leading ``[N]`` (items) or ``[T, B]`` (windows), or the update stops with an error naming
    the difference. ``window``: 0 for independent items; ``L > 0`` for windows of ``L``
    consecutive steps of one environment, starting every ``period`` steps. ``batch_size``:
    samples per gradient step (0: the config's). ``buffer`` replaces the item buffer
    (``buffer(sample_batch_size)``, flashbax's interface; tests)."""

    config: ReplayFields
    item: Callable[[jax.ShapeDtypeStruct], Any]
    window: int = 0
    period: int = 1
    batch_size: int = 0  # samples per gradient step, over all devices (0: config.batch_size)
    buffer: Callable[[int], Any] | None = None


class ReplayBatch(NamedTuple):
    """What an off-policy agent's ``loss`` receives."""

    items: Any  # [b, ...]: sampled items (what prepare returned, one per transition)
    weights: jax.Array  # f32 [b]: importance weights (ones without prioritisation)
    agent_state: Any  # the agent's own slot


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
    if n > num_steps:
        raise ConfigError(
            f"n_step={n} is not allowed: it must be at most the {num_steps} steps its returns are "
            "computed over (a rollout's, --arch.rollout-len; with memory, a sampled sequence's "
            "trained steps, --agent.sequence-length)"
        )
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
        next_obs=jax.tree.map(lambda x: x[last, env], traj.bootstrap_obs),
    )
    return jax.tree.map(lambda x: x.reshape(num_steps * num_envs, *x.shape[2:]), items)


def gradient_steps(config: ReplayFields, steps_per_update: int) -> int:
    """Gradient steps per update: ``replay_ratio`` times the update's environment steps, at
    least 1."""
    return max(1, round(config.replay_ratio * steps_per_update))


def check_items(replay: Replay, items, example_obs, leading: tuple[int, ...]) -> None:
    """Raises a :class:`ConfigError` when ``prepare``'s ``items`` are not ``leading`` axes of
    the item the agent declared (``Replay.item``)."""
    declared = replay.item(example_obs)
    got = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), items)
    want = jax.tree.map(lambda x: jax.ShapeDtypeStruct((*leading, *x.shape), x.dtype), declared)
    if jax.tree.structure(got) != jax.tree.structure(want):
        raise ConfigError(
            f"the agent's prepare returned items of structure {jax.tree.structure(got)}, not "
            f"the declared Replay.item's {jax.tree.structure(want)}"
        )
    for (path, g), w in zip(
        jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want), strict=True
    ):
        if g.shape != w.shape or g.dtype != w.dtype:
            declared = w.shape[len(leading) :]
            raise ConfigError(
                f"the agent's prepare returned {jax.tree_util.keystr(path)} of shape "
                f"{g.shape} and dtype {g.dtype}; its Replay.item declares {declared} "
                f"{w.dtype} (with leading axes {leading})"
            )


def zeros(item) -> Any:
    """Zero arrays of a declared item's shapes."""
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), item)


def check_replay(replay: Replay) -> None:
    """Raises a :class:`ConfigError` naming a ``Replay`` field that cannot work, or a config
    whose buffer never holds the ``learning_starts`` steps that learning waits for."""
    config = replay.config
    if config.learning_starts > config.buffer_size:
        raise ConfigError(
            f"{type(config).__name__}.learning_starts={config.learning_starts} is not allowed "
            f"with buffer_size={config.buffer_size}: a device's buffer never holds more than "
            "buffer_size steps, so learning would never start; lower learning_starts or raise "
            "buffer_size"
        )
    if replay.window < 0 or replay.period < 1 or replay.batch_size < 0:
        raise ConfigError(
            f"Replay(window={replay.window}, period={replay.period}, "
            f"batch_size={replay.batch_size}) is not allowed: window >= 0 (0: independent "
            "items), period >= 1 and batch_size >= 0 (0: the config's)"
        )


def replay_init(replay: Replay, envs_per_device: int):
    """``init(params, example_obs) -> buffer``: one device's empty buffer of ``replay``'s
    declared item (what :func:`podracer.core.learner.skeleton.learner_skeleton` keeps in
    ``LearnerState.replay``)."""

    check_replay(replay)

    def init(params, example_obs):
        del params
        obs = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)), example_obs
        )
        item = zeros(replay.item(obs))
        if replay.window:
            return window_buffer_of(replay, envs_per_device, 1).init(item)
        return item_buffer_of(replay, 1).init(item)

    return init


def item_buffer_of(replay: Replay, sample_batch_size: int):
    if replay.buffer is not None:
        return replay.buffer(sample_batch_size)
    return make_buffer(replay.config, sample_batch_size)


def window_buffer_of(replay: Replay, envs_per_device: int, sample_batch_size: int):
    if envs_per_device < 1:
        raise ValueError(
            "make_learner: a replay of windows keeps one stream per environment and needs "
            f"envs_per_device (the environments of one device's share), not {envs_per_device}"
        )
    return window_buffer(
        replay.config, replay.window, replay.period, envs_per_device, sample_batch_size
    )


class FilledBuffer(NamedTuple):
    """One device's buffer once an update's items are in (:func:`fill_buffer`)."""

    buffer: Any
    """The buffer's functions (an item buffer, or a :class:`WindowBuffer`), sampling this
    device's share of a gradient step's batch."""
    state: Any
    """Its state, the items added."""
    held: jax.Array
    """i32 []: the steps it holds (the ``buffer_items`` metric)."""
    size: jax.Array
    """i32 []: the samples it can draw from (items, or whole windows): the ``N`` of the
    importance weights."""
    ready: jax.Array
    """bool []: every device's buffer holds ``learning_starts`` steps (and, for windows, one
    whole window): until then no gradient step changes anything."""


def samples_per_device(replay: Replay, num_devices: int) -> int:
    """A gradient step's samples drawn by each of ``num_devices`` learner devices; a batch that
    the devices cannot share equally is a :class:`ConfigValueError`."""
    config = replay.config
    samples = replay.batch_size or config.batch_size
    if samples % num_devices:
        what = "sequences" if replay.window else "items"
        raise ConfigValueError(
            f"batch_size={config.batch_size} ({samples} {what} a gradient step) is not "
            f"allowed on {num_devices} learner devices: the {what} must be a multiple of "
            f"{num_devices}"
        )
    return samples // num_devices


def fill_buffer(
    replay: Replay,
    envs_per_device: int,
    per_device: int,
    buffer_state,
    items,
    traj: Trajectory,
    axis_name: str | None,
) -> FilledBuffer:
    """``prepare``'s ``items`` (checked against the declared item) added to this device's
    ``buffer_state``: windows to each environment's stream, or independent items."""
    config = replay.config
    example_obs = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[2:], x.dtype), traj.obs)
    if replay.window:
        num_envs = traj.reward.shape[1]
        if num_envs != envs_per_device:
            raise ConfigValueError(
                f"replay: the learner keeps {envs_per_device} environment streams per "
                f"device but a trajectory brings {num_envs}: build it with "
                f"make_learner(..., envs_per_device={num_envs}) (recipe.learner passes "
                "the loop's)"
            )
        check_items(replay, items, example_obs, traj.reward.shape)
        buffer = window_buffer_of(replay, envs_per_device, per_device)
        buffer_state = buffer.add(buffer_state, items)
        held = buffer.stored(buffer_state)
        ready = (held >= config.learning_starts) & (buffer.windows(buffer_state) > 0)
        size = buffer.windows(buffer_state)
    else:
        check_items(replay, items, example_obs, jax.tree.leaves(items)[0].shape[:1])
        buffer = item_buffer_of(replay, per_device)
        buffer_state = buffer.add(buffer_state, items)
        held = size = stored(buffer_state)
        ready = jnp.all(held >= config.learning_starts)
    if axis_name is not None:
        ready = jax.lax.pmin(ready.astype(jnp.int32), axis_name) > 0
    return FilledBuffer(buffer, buffer_state, held, size, ready)


def only_when(ready: jax.Array, new, old):
    """``new`` where ``ready``, else ``old`` (leaf by leaf)."""
    return jax.tree.map(lambda n, o: jnp.where(ready, n, o), new, old)


def replay_step(
    replay: Replay, tools: BodyTools, filled: FilledBuffer, per_device: int, agent_state
) -> Callable:
    """``step((params, opt_state, buffer_state), key) -> (carry, metrics)``: one gradient step
    on a batch sampled from this device's buffer, with importance weights and new priorities
    when prioritised; before the buffers are ready it changes nothing."""
    config = replay.config
    axis_name = tools.axis_name
    buffer, ready = filled.buffer, filled.ready
    device = 0 if axis_name is None else jax.lax.axis_index(axis_name)

    def as_batch(sample):
        experience, weights = sample
        return ReplayBatch(experience, weights, agent_state)

    def step(carry, key):
        params, opt_state, buffer_state = carry
        sample_key, loss_key = jax.random.split(jax.random.fold_in(key, device))
        sample = buffer.sample(buffer_state, sample_key)
        if config.prioritised:
            weights = importance_weights(
                sample.probabilities, filled.size, config.importance_exponent, axis_name
            )
        else:
            weights = jnp.ones((per_device,), jnp.float32)
        new_params, new_opt_state, out = tools.gradient_step(
            params,
            opt_state,
            (sample.experience, weights),
            loss_key,
            steps_per_sample=max(1, replay.window),
            as_batch=as_batch,
        )
        if "priority" in out.metrics:
            raise ConfigError(
                "the agent's loss returns metrics['priority']: return the samples' new "
                "priorities as (loss, LossOutput(metrics, priority)) instead"
            )
        # Before the buffers hold learning_starts items the step changes nothing and its
        # numbers (a loss on unfilled slots) mean nothing: they read 0.
        metrics = {
            name: jnp.where(ready, value, jnp.zeros_like(value))
            for name, value in out.metrics.items()
        }
        params, opt_state = only_when(ready, (new_params, new_opt_state), (params, opt_state))
        if config.prioritised:
            if isinstance(out.priority, tuple):
                raise ConfigError(
                    "prioritised replay needs the agent's loss to return "
                    "(loss, LossOutput(metrics, priority)) with a priority per sample"
                )
            new_priorities = jnp.abs(out.priority) + 1e-6
            updated = buffer.set_priorities(buffer_state, sample.indices, new_priorities)
            buffer_state = only_when(ready, updated, buffer_state)
        return (params, opt_state, buffer_state), metrics

    return step


def replay_body(replay: Replay, envs_per_device: int = 0) -> LearnerBody:
    """The replay learner's body (a :data:`~podracer.core.learner.skeleton.LearnerBody`):
    ``prepare``'s items into this device's buffer (:func:`fill_buffer`), then
    ``round(replay_ratio * steps)`` gradient steps on sampled batches (:func:`replay_step`; see
    the module's docstring)."""

    def body(tools: BodyTools, state: BodyState, items, traj: Trajectory, key):
        axis_name = tools.axis_name
        num_devices = 1 if axis_name is None else jax.lax.axis_size(axis_name)
        per_device = samples_per_device(replay, num_devices)
        filled = fill_buffer(
            replay, envs_per_device, per_device, state.replay, items, traj, axis_name
        )
        num_steps = gradient_steps(replay.config, traj.reward.size * num_devices)
        step = replay_step(replay, tools, filled, per_device, state.agent_state)
        # A lax loop whatever the layout: the number of steps follows replay_ratio, and
        # straight-line code of that many steps would take minutes to compile.
        (params, opt_state, buffer_state), metrics = jax.lax.scan(
            step,
            (state.params, state.opt_state, filled.state),
            jax.random.split(key, num_steps),
        )
        metrics = {
            **metrics,
            "replay_ready": filled.ready.astype(jnp.float32),
            "buffer_items": filled.held.astype(jnp.float32),
        }
        return state._replace(params=params, opt_state=opt_state, replay=buffer_state), metrics

    return body
