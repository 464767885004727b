"""The replay buffers of the learner (:mod:`podracer.core.learner.replay`): the config fields an
off-policy agent inherits (:class:`ReplayFields`), flashbax's item buffer (uniform, or with
priorities kept here: :class:`PrioritisedBuffer`) and windows of consecutive steps of each
environment's stream (:func:`window_buffer`, after flashbax's trajectory buffer)."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from podracer.errors import ConfigError
from podracer.util.validation import check_positive, check_range


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
            raise ConfigError(
                f"{type(self).__name__}.batch_size={self.batch_size} is not allowed: it must be "
                f"at most buffer_size={self.buffer_size}"
            )


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
        indices, probabilities = draw_proportional(weights, key, sample_batch_size)
        experience = jax.tree.map(lambda x: x[0, indices], state.experience)
        return PrioritisedSample(experience, indices, probabilities)

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


def draw_proportional(weights: jax.Array, key: jax.Array, count: int):
    """``(indices i32 [count], probabilities f32 [count])``: ``count`` slots drawn with
    replacement in proportion to ``weights [N]`` (through their cumulative sum; never a slot of
    weight 0), and each drawn slot's probability ``w_i / sum_j w_j``."""
    cdf = jnp.cumsum(weights)
    total = cdf[-1]
    draws = jax.random.uniform(key, (count,)) * total
    indices = jnp.minimum(jnp.searchsorted(cdf, draws, side="right"), last_positive(weights))
    return indices, weights[indices] / total


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
        indices, probabilities = draw_proportional(weights, key, sample_batch_size)
        env, start = indices // starts, (indices % starts) * period
        time = (start[:, None] + jnp.arange(window)) % capacity
        experience = jax.tree.map(lambda x: x[env[:, None], time], state.steps.experience)
        return PrioritisedSample(experience, indices, probabilities)

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
