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
    """Shape and dtype of one (unbatched) observation, or of one leaf of a dict observation.

    An environment's ``observation_spec`` is one of these for an array observation, or a
    ``dict`` of them (str keys, nested dicts allowed) for a structured one (Jumanji's and pgx's
    named tuples become dicts): observations are then dicts of arrays with those keys. A
    discrete environment that has legal actions puts them in the dict under
    :data:`ACTION_MASK`, bool ``[num_actions]``: every discrete agent acts only among them, and
    the networks never see the mask as an input (:func:`split_action_mask`).
    """

    shape: tuple[int, ...]
    dtype: Any


ACTION_MASK = "action_mask"
"""The key of a dict observation's legal-action mask (bool ``[..., num_actions]``, True where
the action is legal)."""


def is_spec_leaf(x: Any) -> bool:
    """``jax.tree`` ``is_leaf`` for a pytree of :class:`ObservationSpec` s (a NamedTuple is a
    pytree node of its own)."""
    return isinstance(x, ObservationSpec)


def zero_observation(spec: Any, batch: tuple[int, ...] = (), xp: Any = None) -> Any:
    """Zeros of an observation spec (a pytree of :class:`ObservationSpec` s), with the leading
    ``batch`` shape: NumPy arrays, or ``xp``'s (``jax.numpy``)."""
    import numpy as np

    xp = np if xp is None else xp
    return jax.tree.map(
        lambda leaf: xp.zeros((*batch, *leaf.shape), leaf.dtype), spec, is_leaf=is_spec_leaf
    )


def split_action_mask(obs: Any) -> tuple[Any, Any]:
    """``(obs without its mask, mask)`` of an observation (or a batch, or a spec): the mask is
    ``obs[ACTION_MASK]`` of a dict observation, else ``None``. A dict left with one entry stays a
    dict."""
    if isinstance(obs, dict) and ACTION_MASK in obs:
        rest = {name: leaf for name, leaf in obs.items() if name != ACTION_MASK}
        return rest, obs[ACTION_MASK]
    return obs, None


class DiscreteActionSpec(NamedTuple):
    """A discrete action space ``{0, ..., num_actions - 1}``; actions are i32 ``[]``."""

    num_actions: int


class BoundedActionSpec(NamedTuple):
    """A continuous action space: f32 actions of ``shape`` within ``[low, high]`` elementwise
    (``low`` / ``high`` are floats or arrays of ``shape``)."""

    shape: tuple[int, ...]
    low: Any
    high: Any
    dtype: Any = "float32"


ActionSpec = DiscreteActionSpec | BoundedActionSpec
"""What an agent is built for: ``make_agent(config, action_spec)`` reads it."""


class EnvSpec(NamedTuple):
    """What an agent needs to know of its environment: one observation's spec and the action
    spec. Probed once per run (:mod:`podracer.loops`)."""

    observation: ObservationSpec
    action: ActionSpec


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

    @classmethod
    def first(cls, obs: Any) -> TimeStep:
        """The ``TimeStep`` of a reset: ``obs`` (also the ``final_obs``), a reward of 0 (f32),
        nothing ended."""
        import jax.numpy as jnp

        false = jnp.zeros((), bool)
        return cls(obs, jnp.zeros((), jnp.float32), false, false, obs)


class ActorOutput(NamedTuple):
    """What the behaviour policy computed when it acted, batched ``[B]`` (or ``[T, B]``).

    The three fields every loop reads, and ``extras``: a pytree (a dict by convention) of
    whatever one algorithm needs as well — ``{"logits": [B, A]}`` for the categorical policies,
    q-values, a distribution's parameters, a search policy. Loops carry ``extras`` into the
    :class:`Trajectory` untouched.
    """

    action: Array  # [B] i32 (discrete) or [B, *shape] f32 (continuous)
    log_prob: Array  # f32 [B]: log pi(action | obs) of the behaviour policy
    value: Array  # f32 [B]: the actor's value estimate v(obs) (max_a q(obs, a) for Q agents)
    extras: Any = ()  # the algorithm's own outputs, [B, ...] leaves


class Trajectory(NamedTuple):
    """THE contract between acting and learning: time-major ``[T, B, ...]``.

    ``obs[t]`` is the observation the action ``behaviour.action[t]`` was taken in;
    ``reward[t]``, ``terminated[t]``, ``truncated[t]`` are what that step returned, and
    ``bootstrap_obs[t]`` is the observation that followed it *before* any auto-reset (the
    ``final_obs`` of the step). The value of ``bootstrap_obs[t]`` is therefore the bootstrap target
    both inside the rollout (``bootstrap_obs[t] == obs[t+1]`` when the episode goes on), at a
    truncation, and at ``t = T - 1``; at a termination it is discarded.

    ``actor_state[t]`` is the actor state ``act`` was given at step ``t`` (already reset where an
    episode started), so a learner can replay a recurrent policy from ``actor_state[0]``; ``()``
    for stateless agents.
    """

    obs: Array  # [T, B, ...]
    reward: Array  # f32 [T, B]
    terminated: Array  # bool [T, B]
    truncated: Array  # bool [T, B]
    bootstrap_obs: Array  # [T, B, ...]
    behaviour: ActorOutput  # [T, B] (extras [T, B, ...])
    actor_state: Any = ()  # [T, B, ...]: the actor state act was called with at each step

    @property
    def action(self) -> Array:
        """The actions the environment was given (those of the behaviour policy): i32
        ``[T, B]``, or f32 ``[T, B, *shape]`` for continuous actions."""
        return self.behaviour.action


class LearnerState(NamedTuple):
    """Everything the learner carries from one update to the next; checkpointed whole."""

    params: Params
    opt_state: Any  # optax state
    key: PRNGKey  # for minibatch shuffling and stochastic losses
    update_count: Array  # i32 []: updates done so far
    agent_state: Any = ()  # the agent's own slot (Agent.init_state / Agent.update_state)
    replay: Any = ()  # [D, ...]: each learner device's replay buffer (Agent.replay); () if none


class LossOutput(NamedTuple):
    """What a loss may return beside its scalar, instead of a bare metrics dict: the metrics
    and, for an agent on replay (:attr:`Agent.replay`), each sampled item's new priority."""

    metrics: Metrics  # logged (averaged over gradient steps and devices)
    priority: Any = ()  # f32 [b]: the sampled items' new priorities (e.g. |TD error|)


MeanFn = Callable[[Array], Array]
"""``mean_fn(x)``: the mean of all elements of ``x`` over the whole batch, on every device."""


def no_actor_state(num_envs: int) -> Any:
    """The actor state of a stateless agent: nothing."""
    del num_envs
    return ()


def no_agent_state(key: PRNGKey, params: Params) -> Any:
    """The learner-side state of an agent that keeps none: nothing."""
    del key, params
    return ()


def keep_agent_state(agent_state: Any, params: Params, traj: Any, mean_fn: Any) -> Any:
    """``Agent.update_state`` of an agent whose state does not change."""
    del params, traj, mean_fn
    return agent_state


def acting_params(params: Params, agent_state: Any) -> Params:
    """``Agent.actor_params`` by default: the actors act with the learner's params."""
    del agent_state
    return params


def greedy_from_logits(out: ActorOutput) -> Array:
    """``Agent.greedy`` of a categorical policy or a Q agent: the largest of
    ``out.extras["logits"]`` (the q-values for Q agents)."""
    if not isinstance(out.extras, dict) or "logits" not in out.extras:
        from podracer.errors import ConfigError

        raise ConfigError(
            "greedy evaluation needs the agent's greedy action: its ActorOutput.extras has no "
            "'logits'; give Agent.greedy, or evaluate with --eval-stochastic"
        )
    return out.extras["logits"].argmax(axis=-1).astype(out.action.dtype)


class Agent(NamedTuple):
    """An algorithm as pure functions; params are always explicit.

    - ``init(key, example_obs) -> params`` (``example_obs`` is one unbatched observation);
    - ``act(params, actor_state, obs, key) -> (actor_state, ActorOutput)`` on a batch
      ``obs [B, ...]``; ``actor_state [B, ...]`` is what the agent carries from one step to the
      next (a recurrent cell); loops reset it to ``initial_actor_state`` where an episode starts
      and record it in the :class:`Trajectory`;
    - ``prepare(params, agent_state, traj, mean_fn) -> batch``: targets computed once per
      update (advantages, returns, ...) from a ``Trajectory [T, B]``. Every leaf of ``batch``
      has a leading *sample* axis along which the learner shuffles and cuts minibatches:
      ``T * B`` transitions for PPO, ``B`` sequences for agents that need time (Q(lambda),
      V-trace). ``mean_fn`` averages over the whole batch across devices, so batch statistics
      do not depend on the device count.
    - ``loss(params, minibatch, key) -> (scalar, metrics)`` (or ``(scalar, LossOutput)``).

    Optional, with defaults for agents that need none of them:

    - ``initial_actor_state(num_envs) -> actor_state [num_envs, ...]`` (default ``()``);
    - ``greedy(out: ActorOutput) -> action``: the action evaluation takes when greedy
      (default: the largest ``out.extras["logits"]``);
    - ``init_state(key, params) -> agent_state`` and
      ``update_state(agent_state, params, traj, mean_fn) -> agent_state``: the agent's own slot
      in :class:`LearnerState` (a target network, normaliser statistics), updated once per update
      after the gradient steps; checkpointed with the rest. It stays the same on every device
      when ``update_state`` combines what each device saw with ``mean_fn``, as params do;
      ``prepare`` reads it (``()`` when the agent keeps none). With ``state_per_device`` the
      slot is kept per device instead (a replay buffer's shard): its leaves carry a leading
      device axis ``[D, ...]`` split over the data axis, and ``update_state`` and ``prepare``
      see their own device's ``[...]``;
    - ``actor_params(params, agent_state) -> what act receives as params`` (default: params);
      with ``state_per_device`` it sees one device's slot (in Anakin the actor's own device's,
      in Sebulba and evaluation the first learner device's);
    - ``replay``: a :class:`podracer.core.replay.Replay` for an off-policy agent: the learner
      keeps a buffer of the items it declares (in :attr:`LearnerState.replay`, one per learner
      device), ``prepare`` returns what to add to it, and ``loss`` gets sampled batches
      (:class:`podracer.core.replay.ReplayBatch`) and returns a :class:`LossOutput` with their
      new priorities; ``None`` (the default): the learner takes epochs of minibatches of
      ``prepare``'s batch;
    - ``prepare_no_lag``: ``prepare`` for a trajectory that the params being learnt acted
      (no policy lag: the Anakin loop, where acting and learning are one program), which may
      reuse what the actors computed with those same params (PPO: their values, not recomputed
      over ``[T, B]``) and must equal ``prepare`` up to rounding; ``None`` (the default):
      ``prepare``. A loop with policy lag (Sebulba) always calls ``prepare``.
    """

    init: Callable[[PRNGKey, Array], Params]
    act: Callable[[Params, Any, Array, PRNGKey], tuple[Any, ActorOutput]]
    prepare: Callable[[Params, Any, Trajectory, MeanFn], Any]
    loss: Callable[[Params, Any, PRNGKey], tuple[Array, Metrics]]
    initial_actor_state: Callable[[int], Any] = no_actor_state
    greedy: Callable[[ActorOutput], Array] = greedy_from_logits
    init_state: Callable[[PRNGKey, Params], Any] = no_agent_state
    update_state: Callable[[Any, Params, Trajectory, MeanFn], Any] = keep_agent_state
    actor_params: Callable[[Params, Any], Params] = acting_params
    state_per_device: bool = False
    replay: Any = None
    prepare_no_lag: Callable[[Params, Any, Trajectory, MeanFn], Any] | None = None


class Learner(NamedTuple):
    """Built once by :func:`podracer.core.learner.make_learner`; used by every loop."""

    init: Callable[[PRNGKey, Array], LearnerState]
    update: Callable[[LearnerState, Trajectory], tuple[LearnerState, Metrics]]


class HostEnvironment(Protocol):
    """A batch of ``num_envs`` environments on the host: NumPy in, NumPy out, stepped by one
    Sebulba actor thread (:mod:`podracer.envs.host`).

    ``TimeStep`` s mean what they mean for the JAX environments: same-step auto-reset,
    ``final_obs``, terminated and truncated kept apart, ``info`` an
    :class:`EpisodeInfo` ``[num_envs]``. The mode is explicit: ``is_async`` False (sync) uses
    ``reset() -> TimeStep`` and ``step(actions [num_envs]) -> TimeStep``; ``is_async`` True
    uses ``async_reset()``, then ``recv() -> (TimeStep [batch_size], env_ids [batch_size])`` and
    ``send(actions, env_ids)`` in turn (``batch_size < num_envs``). Optional: ``render() ->
    uint8 [num_envs, H, W, 3]``, their frames (envpool and gymnasium made with ``render=True``).
    """

    id: str
    num_envs: int
    batch_size: int
    is_async: bool
    observation_spec: ObservationSpec
    action_spec: ActionSpec

    def reset(self) -> TimeStep: ...

    def step(self, actions: Any) -> TimeStep: ...

    def close(self) -> None: ...


class Environment(Protocol):
    """An on-device environment with gymnax's argument order.

    ``params`` stays a pytree argument, so a batch of environments can differ in their params
    (``vmap`` over them for domain randomisation or meta-RL). ``step`` auto-resets.

    Optional: ``step_batch(keys [B], states [B], actions [B], params)``, the same values as
    ``step`` vmapped over the batch (params shared), for an environment whose reset costs far
    more than its step and can be skipped for the environments that did not end
    (:class:`~podracer.envs.jax.craftax.CraftaxEnvironment`). The loops step a batch with
    :func:`step_batch` below, which uses it where it is defined.
    """

    id: str

    @property
    def default_params(self) -> Any: ...

    @property
    def observation_spec(self) -> ObservationSpec: ...

    @property
    def action_spec(self) -> ActionSpec: ...

    def reset(self, key: PRNGKey, params: Any) -> tuple[Any, TimeStep]: ...

    def step(
        self, key: PRNGKey, state: Any, action: Array, params: Any
    ) -> tuple[Any, TimeStep]: ...


def step_batch(env: Environment):
    """``step(keys [B], states [B], actions [B], params)`` of a batch of ``env``: its own
    ``step_batch`` where it has one, else ``env.step`` vmapped (params shared)."""
    own = getattr(env, "step_batch", None)
    return own if own is not None else jax.vmap(env.step, in_axes=(0, 0, 0, None))
