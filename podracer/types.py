"""The contracts between environments, actors and learners.

Every container is a named pytree: ``NamedTuple`` for data that flows through ``jit`` / ``vmap`` /
``scan``, ``flax.struct.dataclass`` for environment state and params. Fields are read by name only,
so adding a field never breaks a caller.

Shapes: ``T`` is time (rollout length), ``B`` the environment batch, ``...`` the observation shape.
Trajectories are time-major ``[T, B, ...]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import jax

Array = jax.Array
PRNGKey = jax.Array
Params = Any
Metrics = dict[str, Array]


class ObservationSpec(NamedTuple):
    """Shape and dtype of one (unbatched) observation."""

    shape: tuple[int, ...]
    dtype: Any


class DiscreteActionSpec(NamedTuple):
    """A discrete action space ``{0, ..., num_actions - 1}``."""

    num_actions: int


class EpisodeInfo(NamedTuple):
    """Statistics of the episode that ended at this step (valid where ``done``).

    Filled by :class:`podracer.envs.wrappers.EpisodeStatistics`; returns and lengths are 0 where
    no episode ended.
    """

    done: Array  # bool: an episode (terminated or truncated) ended at this step
    episode_return: Array  # f32: undiscounted return of that episode
    episode_length: Array  # i32: its number of steps


class TimeStep(NamedTuple):
    """What an environment returns after ``reset`` or ``step``, batched or not.

    Environments auto-reset: when an episode ends at this step, ``obs`` is already the first
    observation of the next episode and ``final_obs`` is the last observation of the one that ended.
    """

    obs: Array  # after auto-reset: first obs of the next episode
    reward: Array  # f32
    terminated: Array  # bool: the MDP reached a terminal state; do not bootstrap
    truncated: Array  # bool: cut by a time limit (never together with terminated); bootstrap
    final_obs: Array  # obs before the auto-reset (== obs when the episode goes on)
    info: EpisodeInfo | None = None  # set by the EpisodeStatistics wrapper

    @property
    def done(self) -> Array:
        """An episode ended at this step, by termination or by truncation."""
        return self.terminated | self.truncated


class ActorOutput(NamedTuple):
    """What the behaviour policy computed when it acted, batched ``[B]`` (or ``[T, B]``)."""

    action: Array  # i32 [B]
    log_prob: Array  # f32 [B]: log pi(action | obs) of the behaviour policy
    value: Array  # f32 [B]: the actor's value estimate v(obs) (max_a q(obs, a) for Q agents)
    logits: Array  # f32 [B, A]: unnormalised log-probabilities (or q-values for Q agents)


class Trajectory(NamedTuple):
    """THE contract between acting and learning: time-major ``[T, B, ...]``.

    ``obs[t]`` is the observation the action ``behaviour.action[t]`` was taken in;
    ``reward[t]``, ``terminated[t]``, ``truncated[t]`` are what that step returned, and
    ``bootstrap_obs[t]`` is the observation that followed it *before* any auto-reset (the
    ``final_obs`` of the step). The value of ``bootstrap_obs[t]`` is therefore the bootstrap target
    both inside the rollout (``bootstrap_obs[t] == obs[t+1]`` when the episode goes on), at a
    truncation, and at ``t = T - 1``; at a termination it is discarded.
    """

    obs: Array  # [T, B, ...]
    reward: Array  # f32 [T, B]
    terminated: Array  # bool [T, B]
    truncated: Array  # bool [T, B]
    bootstrap_obs: Array  # [T, B, ...]
    behaviour: ActorOutput  # [T, B] (logits [T, B, A])

    @property
    def action(self) -> Array:
        """i32 ``[T, B]``: the actions taken (those of the behaviour policy)."""
        return self.behaviour.action


class LearnerState(NamedTuple):
    """Everything the learner carries from one update to the next."""

    params: Params
    opt_state: Any  # optax state
    key: PRNGKey  # for minibatch shuffling and stochastic losses
    update_count: Array  # i32 []: updates done so far


MeanFn = Callable[[Array], Array]
"""``mean_fn(x)``: the mean of all elements of ``x`` over the whole batch, on every device."""


class Agent(NamedTuple):
    """An algorithm as pure functions; params are always explicit.

    - ``init(key, example_obs) -> params`` (``example_obs`` is one unbatched observation);
    - ``act(params, obs, key) -> ActorOutput`` on a batch ``obs [B, ...]``;
    - ``prepare(params, traj, mean_fn) -> batch``: targets computed once per update (advantages,
      returns, ...) from a ``Trajectory [T, B]``. Every leaf of ``batch`` has a leading *sample*
      axis along which the learner shuffles and cuts minibatches: ``T * B`` transitions for PPO,
      ``B`` sequences for agents that need time (Q(lambda), V-trace). ``mean_fn`` averages over the
      whole batch across devices, so batch statistics do not depend on the device count.
    - ``loss(params, minibatch, key) -> (scalar, metrics)``.
    """

    init: Callable[[PRNGKey, Array], Params]
    act: Callable[[Params, Array, PRNGKey], ActorOutput]
    prepare: Callable[[Params, Trajectory, MeanFn], Any]
    loss: Callable[[Params, Any, PRNGKey], tuple[Array, Metrics]]


class Learner(NamedTuple):
    """Built once by :func:`podracer.core.learner.make_learner`; used by every loop."""

    init: Callable[[PRNGKey, Array], LearnerState]
    update: Callable[[LearnerState, Trajectory], tuple[LearnerState, Metrics]]


class Environment(Protocol):
    """An on-device environment with gymnax's argument order.

    ``params`` stays a pytree argument, so a batch of environments can differ in their params
    (``vmap`` over them for domain randomisation or meta-RL). ``step`` auto-resets.
    """

    id: str

    @property
    def default_params(self) -> Any: ...

    @property
    def observation_spec(self) -> ObservationSpec: ...

    @property
    def action_spec(self) -> DiscreteActionSpec: ...

    def reset(self, key: PRNGKey, params: Any) -> tuple[Any, TimeStep]: ...

    def step(
        self, key: PRNGKey, state: Any, action: Array, params: Any
    ) -> tuple[Any, TimeStep]: ...
