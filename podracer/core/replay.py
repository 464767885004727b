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

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from podracer.errors import ConfigError, ConfigValueError
from podracer.util.validation import check_positive, check_range
from podracer.core.learner import Fit, Parts
from podracer.types import Trajectory


@dataclasses.dataclass(frozen=True)
class ReplayFields:
    """The replay fields of an off-policy agent's config."""

    buffer_size: int = 50_000
    """Transitions each learner device keeps (its own environments'): the memory is about
    buffer_size x learner devices x (2 observations + 4 numbers) x 4 bytes (CartPole: 40 bytes
    a transition, 2 MB for 50,000); with memory each step also keeps the carry (a GRU of 128:
    512 bytes more)."""
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
        check_range(self, "importance_exponent", 0.0, 1.0)  # 1: full correction
        if self.batch_size > self.buffer_size:
            from podracer.errors import ConfigError

            raise ConfigError(
                f"{type(self).__name__}.batch_size={self.batch_size} is not allowed: it must be "
                f"at most buffer_size={self.buffer_size}"
            )


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
        weights = powered(state.priorities, alpha)
        cdf = jnp.cumsum(weights)
        total = cdf[-1]
        draws = jax.random.uniform(key, (sample_batch_size,)) * total
        indices = jnp.minimum(jnp.searchsorted(cdf, draws, side="right"), last_positive(weights))
        experience = jax.tree.map(lambda x: x[0, indices], state.experience)
        return PrioritisedSample(experience, indices, weights[indices] / total)

    def set_priorities(state: PrioritisedState, indices, priorities):
        return state._replace(
            priorities=state.priorities.at[indices].set(priorities),
            max_priority=jnp.maximum(state.max_priority, jnp.max(priorities)),
        )

    return PrioritisedBuffer(init, add, sample, set_priorities)


def powered(priorities: jax.Array, alpha: float) -> jax.Array:
    """``p ** alpha`` where ``p > 0``, and 0 where the slot holds nothing (``0 ** 0`` is 1:
    ``alpha = 0``, uniform sampling, must not sample empty slots)."""
    return jnp.where(priorities > 0, priorities**alpha, 0.0)


def last_positive(weights: jax.Array) -> jax.Array:
    """The last index whose weight is positive (a draw of ``u * total`` that rounds up to the
    total lands there, not on an empty slot after it)."""
    return jnp.max(jnp.where(weights > 0, jnp.arange(weights.shape[0]), 0))


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


class WindowState(NamedTuple):
    """A buffer of windows: one stream of steps per environment and a priority per window."""

    steps: Any  # flashbax TrajectoryBufferState: experience [E, C, ...], current_index, is_full
    priorities: jax.Array  # f32 [E, C // period]: each window start's (0 where no window)
    max_priority: jax.Array  # f32 []: new windows get the largest priority seen so far
    breaks: jax.Array  # bool [C]: the streams start afresh at this ring position (no window
    #   crosses it: the steps before it are not the ones that led to it)
    pending: jax.Array  # bool []: the next add starts the streams afresh (break_streams)


def break_streams(replay: Any, where: Any = True) -> Any:
    """``replay`` (any learner's replay state) with its streams of steps broken before the next
    add, where ``where`` (broadcast over leading axes of members or devices): the steps added
    next do not follow the ones held (a Sebulba run resumed with fresh environments; a
    population member that took another member's buffer but keeps its own environments), so no
    window may span the two. A replay of independent items is returned as it is."""
    if not isinstance(replay, WindowState):
        return replay
    where = jnp.asarray(where, bool)
    where = where.reshape(where.shape + (1,) * (replay.pending.ndim - where.ndim))
    return replay._replace(pending=replay.pending | where)


class WindowBuffer(NamedTuple):
    """Windows of ``L`` consecutive steps of one environment's stream (:func:`window_buffer`):
    ``init(step)``, ``add(state, steps [T, E, ...])``, ``sample(state, key) ->
    PrioritisedSample`` (``experience [b, L, ...]``), ``set_priorities(state, indices,
    priorities)``, ``stored(state)`` (steps held), ``windows(state)`` (windows that can be
    sampled)."""

    init: Any
    add: Any
    sample: Any
    set_priorities: Any
    stored: Any
    windows: Any


def window_capacity(config: ReplayFields, num_envs: int, window: int, period: int) -> int:
    """Steps kept per environment: ``buffer_size`` over the environments, rounded up to a
    multiple of ``period`` (so window starts keep their places as the ring turns), at least
    one window."""
    per_env = max(-(-config.buffer_size // num_envs), window)
    return -(-per_env // period) * period


def window_buffer(
    config: ReplayFields, window: int, period: int, num_envs: int, sample_batch_size: int
) -> WindowBuffer:
    """The buffer of ``window``-step windows for ``num_envs`` environment streams per device.

    Each environment's steps go into a ring of ``C`` (:func:`window_capacity`) steps, in time
    order (flashbax's trajectory buffer). A window starts at a ring position that is a
    multiple of ``period``; it can be sampled when its ``L`` steps are written and the newest
    step is not inside it (so it never spans the ring's seam, where the newest step meets the
    oldest, and never mixes environments). A window gets the largest priority seen so far when
    it becomes whole, keeps its priority while its steps stay in the ring, and loses it when
    they are overwritten. Uniform replay samples every whole window alike. Where the streams
    were broken (:func:`break_streams`), no window crosses the break."""
    import flashbax as fbx

    capacity = window_capacity(config, num_envs, window, period)
    starts = capacity // period
    streams = fbx.make_trajectory_buffer(
        add_batch_size=num_envs,
        sample_batch_size=1,
        sample_sequence_length=window,
        period=period,
        min_length_time_axis=window,
        max_length_time_axis=capacity,
    )
    position = jnp.arange(starts) * period  # each window's first ring position

    inside = (position[:, None] + jnp.arange(1, window)) % capacity  # [starts, L - 1]

    def whole(steps, breaks) -> jax.Array:
        """bool [starts]: the windows that can be sampled."""
        written = steps.is_full | (position < steps.current_index)
        to_newest = (steps.current_index - 1 - position) % capacity
        return written & (to_newest >= window - 1) & ~jnp.any(breaks[inside], axis=1)

    def init(step):
        return WindowState(
            streams.init(step),
            jnp.zeros((num_envs, starts), jnp.float32),
            jnp.ones((), jnp.float32),
            jnp.zeros((capacity,), bool),
            jnp.zeros((), bool),
        )

    def add(state: WindowState, steps):
        length = jax.tree.leaves(steps)[0].shape[0]
        if length > capacity:
            raise ConfigError(
                f"replay: a trajectory of {length} steps does not fit the {capacity} steps per "
                f"environment that buffer_size={config.buffer_size} gives {num_envs} "
                "environments per device; raise buffer_size"
            )
        before = whole(state.steps, state.breaks)
        overwritten = (position - state.steps.current_index) % capacity < length
        new = streams.add(state.steps, jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), steps))
        written = (state.steps.current_index + jnp.arange(length)) % capacity
        breaks = state.breaks.at[written].set(False).at[written[0]].set(state.pending)
        after = whole(new, breaks)
        fresh = after & (overwritten | ~before)
        priorities = jnp.where(
            fresh[None], state.max_priority, jnp.where(after[None], state.priorities, 0.0)
        )
        # (pending & False, not a new False: the flag keeps its shard_map type)
        return WindowState(new, priorities, state.max_priority, breaks, state.pending & False)

    def sample(state: WindowState, key):
        weights = state.priorities.reshape(-1)
        if config.prioritised:
            weights = powered(weights, config.priority_exponent)
        else:
            weights = (weights > 0).astype(jnp.float32)
        cdf = jnp.cumsum(weights)
        draws = jax.random.uniform(key, (sample_batch_size,)) * cdf[-1]
        indices = jnp.minimum(jnp.searchsorted(cdf, draws, side="right"), last_positive(weights))
        env, start = indices // starts, (indices % starts) * period
        time = (start[:, None] + jnp.arange(window)) % capacity
        experience = jax.tree.map(lambda x: x[env[:, None], time], state.steps.experience)
        return PrioritisedSample(experience, indices, weights[indices] / cdf[-1])

    def set_priorities(state: WindowState, indices, priorities):
        flat = state.priorities.reshape(-1).at[indices].set(priorities)
        return state._replace(
            priorities=flat.reshape(state.priorities.shape),
            max_priority=jnp.maximum(state.max_priority, jnp.max(priorities)),
        )

    def stored(state: WindowState):
        steps = jnp.where(state.steps.is_full, capacity, state.steps.current_index)
        return steps * num_envs

    def windows(state: WindowState):
        return jnp.sum(whole(state.steps, state.breaks)) * num_envs

    return WindowBuffer(init, add, sample, set_priorities, stored, windows)


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
    declared item (what :func:`podracer.core.learner.learner_skeleton` keeps in
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


def replay_body(replay: Replay, envs_per_device: int = 0):
    """The replay learner's body (:data:`podracer.core.learner.Body`): ``prepare``'s items into
    this device's buffer, then ``round(replay_ratio * steps)`` gradient steps on sampled
    batches (see the module's docstring)."""
    config = replay.config

    def body(parts: Parts, fit: Fit, items, traj: Trajectory, key):
        axis_name = parts.axis_name
        num_devices = 1 if axis_name is None else jax.lax.axis_size(axis_name)
        samples = replay.batch_size or config.batch_size
        if samples % num_devices:
            what = "sequences" if replay.window else "items"
            raise ConfigValueError(
                f"batch_size={config.batch_size} ({samples} {what} a gradient step) is not "
                f"allowed on {num_devices} learner devices: the {what} must be a multiple of "
                f"{num_devices}"
            )
        per_device = samples // num_devices
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
            buffer_state = buffer.add(fit.replay, items)
            held = buffer.stored(buffer_state)
            ready = (held >= config.learning_starts) & (buffer.windows(buffer_state) > 0)
            size = buffer.windows(buffer_state)
        else:
            check_items(replay, items, example_obs, jax.tree.leaves(items)[0].shape[:1])
            buffer = item_buffer_of(replay, per_device)
            buffer_state = buffer.add(fit.replay, items)
            held = size = stored(buffer_state)
            ready = jnp.all(held >= config.learning_starts)
        if axis_name is not None:
            ready = jax.lax.pmin(ready.astype(jnp.int32), axis_name) > 0
        num_steps = gradient_steps(config, traj.reward.size * num_devices)
        device = 0 if axis_name is None else jax.lax.axis_index(axis_name)

        def as_batch(sample):
            experience, weights = sample
            return ReplayBatch(experience, weights, fit.agent_state)

        def step(carry, key):
            params, opt_state, buffer_state = carry
            sample_key, loss_key = jax.random.split(jax.random.fold_in(key, device))
            sample = buffer.sample(buffer_state, sample_key)
            if config.prioritised:
                weights = importance_weights(
                    sample.probabilities, size, config.importance_exponent, axis_name
                )
            else:
                weights = jnp.ones((per_device,), jnp.float32)
            new_params, new_opt_state, out = parts.sgd_step(
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
            params, opt_state = jax.tree.map(
                lambda new, old: jnp.where(ready, new, old),
                (new_params, new_opt_state),
                (params, opt_state),
            )
            if config.prioritised:
                if isinstance(out.priority, tuple):
                    raise ConfigError(
                        "prioritised replay needs the agent's loss to return "
                        "(loss, LossOutput(metrics, priority)) with a priority per sample"
                    )
                new_priorities = jnp.abs(out.priority) + 1e-6
                updated = buffer.set_priorities(buffer_state, sample.indices, new_priorities)
                buffer_state = jax.tree.map(
                    lambda new, old: jnp.where(ready, new, old), updated, buffer_state
                )
            return (params, opt_state, buffer_state), metrics

        # A lax loop whatever the layout: the number of steps follows replay_ratio, and
        # straight-line code of that many steps would take minutes to compile.
        (params, opt_state, buffer_state), metrics = jax.lax.scan(
            step,
            (fit.params, fit.opt_state, buffer_state),
            jax.random.split(key, num_steps),
        )
        metrics = {
            **metrics,
            "replay_ready": ready.astype(jnp.float32),
            "buffer_items": held.astype(jnp.float32),
        }
        return fit._replace(params=params, opt_state=opt_state, replay=buffer_state), metrics

    return body


_REMOVED = {
    "replay_learner": "an agent asks for replay with Agent.replay = Replay(config, item), and "
    "podracer.core.make_learner (every AgentSpec's default make_learner) trains it",
    "replayed": "the learner keeps the buffer in LearnerState.replay; set Agent.replay",
    "ReplayState": "the buffer is LearnerState.replay; the agent's slot is its own",
    "example_items": "declare the item's shapes: Replay(config, item=lambda obs: ...)",
    "buffer_bytes": "the buffer's arrays are in LearnerState.replay: sum their nbytes",
}


def __getattr__(name: str):
    if name in _REMOVED:
        raise AttributeError(
            f"podracer.core.replay.{name} was removed: {_REMOVED[name]} (docs/agents.md, "
            "'Off-policy agents')"
        )
    raise AttributeError(f"module 'podracer.core.replay' has no attribute {name!r}")
