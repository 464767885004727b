"""Anakin: environment, acting and learning compiled into one program on every device.

Hessel et al., 2021, "Podracer architectures for scalable reinforcement learning",
https://arxiv.org/abs/2104.06272, section 3.

One call of the compiled step does ``updates_per_call`` updates. Inside it, per device::

    shard_map over DATA_AXIS (1-D mesh of all devices)
      vmap over seeds (independent runs)
        lax.scan over updates
          rollout: lax.scan over time of (agent.act on [B/D] envs, vmap(env.step))
          learner.update (THE shared core; gradients pmean-ed over DATA_AXIS)

Params, optimizer state and keys are replicated; environment state is split along the
environment axis. The carried state is donated, metrics are reduced on device.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from podracer.core.learner.skeleton import one_device, per_device
from podracer.core.learner.skeleton import state_specs as learner_specs
from podracer.core.rollout import RolloutState, make_rollout, reset_envs
from podracer.envs.options import EnvOptions
from podracer.envs.wrappers import EpisodeStatistics
from podracer.errors import ConfigError, ConfigValueError
from podracer.loops import registry
from podracer.loops.base import Loop, Members, Periodic, RunHooks, RunResult
from podracer.loops.common import over_members, params_checksum, summary, train_record
from podracer.loops.layout import LearnerLayoutFields
from podracer.loops.recipe import EnvFactory, Recipe, as_factory
from podracer.parallel import (
    DATA_AXIS,
    MEMBER_AXIS,
    Watchdog,
    barrier,
    cores_per_member,
    fetch,
    member_mesh,
    member_placement,
)
from podracer.types import EnvSpec, LearnerState
from podracer.util import seeding
from podracer.util.validation import check_choice, check_positive


@dataclasses.dataclass(frozen=True)
class AnakinConfig(LearnerLayoutFields):
    """The Anakin loop's sizes. ``num_envs`` counts every device's environments together."""

    num_envs: int = 4
    """Environments per seed, over all devices (a multiple of the device count)."""
    rollout_len: int = 128
    """Steps per environment between two updates."""
    num_seeds: int = 1
    """Independent runs vmapped in one program; run i uses seed ``seed + i``."""
    updates_per_call: int = 0
    """Updates per call of the compiled step (0: about 20 calls per run, and at most 2^20
    environment steps per call, so Ctrl-C and SIGTERM, which act between calls, act within
    seconds)."""
    rollout_unroll: int = 1
    """``unroll`` of the rollout's time scan (1 is fastest on XLA:CPU: ``docs/design.md``)."""
    member_shards: int = 1
    """Devices the seed (member) axis is split over; each group of ``devices / member_shards``
    devices splits its members' environments. Must divide ``num_seeds`` and the device count."""
    member_loop: str = "vmap"
    """How a device runs its seeds (members) inside the compiled step: ``vmap`` (one batched
    program, the fast default) or ``map`` (``lax.map``, one after another: each member computes
    exactly what a run of its own computes, bit for bit, at the cost of the batching)."""

    def __post_init__(self):
        check_positive(self, "num_envs", "rollout_len", "num_seeds")
        check_choice(self, "member_loop", ("vmap", "map"))
        if self.updates_per_call < 0:
            raise ConfigError(
                f"AnakinConfig.updates_per_call={self.updates_per_call} is not allowed: "
                "it must be >= 0 (0 chooses it from the run length)"
            )
        check_positive(self, "rollout_unroll", "member_shards")
        self.check_layout()

    @property
    def steps_per_update(self) -> int:
        """Environment steps of one seed between two updates."""
        return self.num_envs * self.rollout_len


class AnakinState(NamedTuple):
    """The whole state of an Anakin run; every leaf has a leading seed (member) axis ``[S]``,
    split over the mesh's MEMBER_AXIS."""

    learner: LearnerState  # replicated over DATA_AXIS (a per-device agent state: split over it)
    rollout: RolloutState  # [S, num_envs, ...], split over DATA_AXIS along the env axis
    key: jax.Array  # [S] acting keys (each device folds in its index)
    hparams: dict[str, jax.Array]  # [S] each: the members' traced hyper-parameters
    periodic: Any = ()  # [S, ...]: the state of Periodic work (a population's lineage)


class UpdateMetrics(NamedTuple):
    """Per-update metrics ``[S, K]``, already reduced over devices."""

    learner: dict[str, jax.Array]  # the loss metrics of learner.update
    episodes: jax.Array  # i32: episodes that ended during the update's rollout
    return_sum: jax.Array  # f32: sum of their returns
    length_sum: jax.Array  # i32: sum of their lengths
    events: Any = ()  # Periodic.apply's events at the end of the call, and "due": bool []


class Anakin(NamedTuple):
    """A built Anakin system (a :class:`podracer.loops.System`): ``init(seed) -> state`` and
    ``step(state) -> (state, metrics)``, :meth:`run` and :meth:`evaluator`.

    ``step`` is jitted with the state donated; ``make_step(k)`` builds the same step for ``k``
    updates per call.
    """

    init: Callable[[int], AnakinState]
    step: Callable[[AnakinState], tuple[AnakinState, UpdateMetrics]]
    make_step: Callable[[int], Callable]
    mesh: Any
    config: AnakinConfig
    compiled: dict  # executables compiled by run(), by updates per call and state shapes
    periodic: Periodic | None = None
    recipe: Recipe | None = None

    @property
    def envs_per_device(self) -> int:
        """The environments of one member on one device: its share of each update's batch."""
        return self.config.num_envs // self.mesh.shape[DATA_AXIS]

    def run(self, state=None, *, seed: int, start_update: int = 0, hooks=None, progress=None):
        """:func:`run` for the recipe's run length; the summary names the run."""
        result = run(
            self,
            seed=seed,
            total_timesteps=self.recipe.total_timesteps,
            progress=progress,
            state=state,
            start_update=start_update,
            hooks=hooks,
        )
        result.summary.update(
            env=self.recipe.env_id,
            arch="anakin",
            seed=seed,
            devices=self.mesh.devices.size,
            processes=jax.process_count(),
            process=jax.process_index(),
        )
        return result

    def evaluator(self, *, seed: int, episodes: int, greedy: bool):
        """``evaluate(state, updates) -> returns [members, episodes]``: every member's params on
        ``episodes`` fresh environments, on device."""
        from podracer.core.evaluation import eval_key, make_evaluator

        agent = self.recipe.agent
        evaluate = make_evaluator(
            self.recipe.make_env(), agent, num_episodes=episodes, greedy=greedy
        )

        def one(params, agent_state, key):
            return evaluate(agent.actor_params(params, one_device(agent, agent_state)), key)

        per_member = jax.jit(jax.vmap(one))
        num_members = self.config.num_seeds

        def run_eval(state, updates):
            keys = jax.random.split(eval_key(seed, updates), num_members)
            learner = state.learner
            return fetch(per_member(learner.params, learner.agent_state, keys))

        return run_eval


def checked_mesh(
    config: AnakinConfig, devices: Sequence[jax.Device] | None, members: Members | None
) -> jax.sharding.Mesh:
    """The ``(MEMBER_AXIS, DATA_AXIS)`` mesh of a run, after the checks that its sizes divide
    (members over member groups, environments over each group's devices, one hyper-parameter
    value and one seed offset per member)."""
    if config.num_seeds % config.member_shards:
        raise ConfigError(
            f"AnakinConfig.member_shards={config.member_shards} is not allowed with "
            f"{config.num_seeds} members (num_seeds, or the sweep or population size): it must "
            "divide the number of members"
        )
    mesh = member_mesh(devices, config.member_shards)
    num_devices = mesh.shape[DATA_AXIS]
    if config.num_envs % num_devices:
        where = (
            f"on {num_devices} devices: it must be a multiple of the device count ({num_devices})"
            if config.member_shards == 1
            else f"on {mesh.devices.size} devices with member_shards={config.member_shards}: it "
            f"must be a multiple of the devices per member group ({num_devices})"
        )
        raise ConfigError(f"AnakinConfig.num_envs={config.num_envs} is not allowed {where}")
    if members is not None:
        for name, values in members.hparams.items():
            if np.shape(values) != (config.num_seeds,):
                raise ConfigError(
                    f"Members.hparams[{name!r}] has shape {np.shape(values)}: it must be "
                    f"({config.num_seeds},), one value per member (AnakinConfig.num_seeds)"
                )
        if np.shape(members.seed_offsets) != (config.num_seeds,):
            raise ConfigError(
                f"Members.seed_offsets has shape {np.shape(members.seed_offsets)}: it must be "
                f"({config.num_seeds},)"
            )
    return mesh


def with_periodic(step: Callable, periodic: Periodic) -> Callable:
    """``step`` followed, when its last update is a multiple of ``periodic.interval``, by
    ``periodic.apply`` (inside a ``lax.cond``); the metrics get its events and ``due``."""

    def stepped(state: AnakinState):
        state, metrics = step(state)
        _, shapes = jax.eval_shape(periodic.apply, state)
        due = state.learner.update_count[0] % periodic.interval == 0
        state, events = jax.lax.cond(
            due,
            periodic.apply,
            lambda s: (s, jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shapes)),
            state,
        )
        return state, metrics._replace(events={"due": due, **events})

    return stepped


def state_layout(agent, mesh: jax.sharding.Mesh) -> tuple[AnakinState, AnakinState]:
    """The :class:`AnakinState`'s partition specs and shardings on ``mesh``: members over
    ``MEMBER_AXIS``, environments (and per-device learner state) over ``DATA_AXIS``."""
    specs = AnakinState(
        learner=learner_specs(agent, P(MEMBER_AXIS), P(MEMBER_AXIS, DATA_AXIS)),
        rollout=P(MEMBER_AXIS, DATA_AXIS),
        key=P(MEMBER_AXIS),
        hparams=P(MEMBER_AXIS),
        periodic=P(MEMBER_AXIS),
    )
    shardings = jax.tree.map(
        lambda spec: jax.sharding.NamedSharding(mesh, spec),
        specs,
        is_leaf=lambda x: isinstance(x, P),
    )
    return specs, shardings


def env_checks_vma(env) -> bool:
    """Whether the program's ``shard_map`` checks varying manual axes (``check_vma``): yes,
    unless the environment says its code cannot be traced so (``check_vma = False`` on an
    adapter whose library has a ``lax.cond`` with a constant branch and a varying one, which
    JAX 0.10 refuses inside a checked ``shard_map``). Unchecked, the program computes the same
    numbers: the learner all-reduces its gradients itself (tests/test_anakin.py)."""
    return bool(getattr(env, "check_vma", True))


def make_one_update(parts: Callable, env_params: Any) -> Callable:
    """One update of one member inside the program (a ``lax.scan`` body): ``parts(hparams)``
    gives the member's agent, learner and rollout; its environments are rolled out with the
    acting params, the learner updates on the trajectory, and the episode statistics are
    summed over the data axis."""

    def one_update(state: AnakinState, _):
        agent, learner, rollout = parts(state.hparams)
        key, rollout_key = jax.random.split(state.key)
        rollout_key = jax.random.fold_in(rollout_key, jax.lax.axis_index(DATA_AXIS))
        acting = agent.actor_params(
            state.learner.params, one_device(agent, state.learner.agent_state)
        )
        rollout_state, traj, info = rollout(acting, state.rollout, env_params, rollout_key)
        learner_state, learner_metrics = learner.update(state.learner, traj)
        metrics = UpdateMetrics(
            learner=learner_metrics,
            episodes=jax.lax.psum(jnp.sum(info.done, dtype=jnp.int32), DATA_AXIS),
            return_sum=jax.lax.psum(jnp.sum(info.episode_return), DATA_AXIS),
            length_sum=jax.lax.psum(jnp.sum(info.episode_length), DATA_AXIS),
        )
        return state._replace(learner=learner_state, rollout=rollout_state, key=key), metrics

    return one_update


def make_anakin(
    recipe: Recipe,
    config: AnakinConfig,
    *,
    updates_per_call: int = 1,
    devices: Sequence[jax.Device] | None = None,
    env_params: Any = None,
    members: Members | None = None,
    periodic: Periodic | None = None,
) -> Anakin:
    """Builds the Anakin system of a :class:`~podracer.loops.Recipe` (its environment, built
    with its options by ``recipe.make_env()``, is an on-device
    :class:`~podracer.types.Environment`; its agent, optimizer and learner layout).

    ``env_params`` (default: the environment's ``default_params``, which carry the recipe's
    ``--env-param`` values) are the params the rollout steps with. The environment is wrapped
    in :class:`~podracer.envs.EpisodeStatistics` for the episode metrics. ``devices`` defaults
    to every device of every process. With
    ``members``, the ``num_seeds`` vmapped runs are members with hyper-parameters of their own,
    carried in the state as traced values: the agent and optimizer are built per member inside
    the program, so members differ without a recompile. With ``periodic``, every step that ends
    at a multiple of ``periodic.interval`` updates ends with ``periodic.apply``
    (:class:`Periodic`).

    The mesh is ``(MEMBER_AXIS, DATA_AXIS)`` (:func:`~podracer.parallel.member_mesh`) with
    ``config.member_shards`` groups of devices; each group splits its members' environments.

    Args:
      recipe: the run's :class:`~podracer.loops.Recipe` (environment, agent, optimizer,
        learner layout).
      config: the loop's sizes (:class:`AnakinConfig`).
      updates_per_call: updates done by one call of the compiled ``step``.
      devices: the mesh's devices (default: every device of every process).
      env_params: the params the rollout steps with (default: the environment's
        ``default_params``).
      members: the members' hyper-parameters and how to build a member's agent
        (:class:`~podracer.loops.Members`); None: ``num_seeds`` runs of the recipe's agent.
      periodic: work at the end of every step that ends at a multiple of its ``interval``.

    Returns:
      The :class:`Anakin` system: ``init(seed)``, the jitted ``step`` and :meth:`Anakin.run`.
    """
    mesh = checked_mesh(config, devices, members)
    num_devices = mesh.shape[DATA_AXIS]
    env = EpisodeStatistics(recipe.make_env())
    env_params = env.default_params if env_params is None else env_params

    def parts(hparams):
        """The agent, learner and rollout of one member (built inside the trace for members)."""
        member_agent, member_optimizer = (
            (recipe.agent, recipe.optimizer) if members is None else members.build(hparams)
        )
        learner = recipe.learner(
            member_agent,
            member_optimizer,
            axis_name=DATA_AXIS,
            envs_per_device=config.num_envs // num_devices,
            no_policy_lag=True,  # the rollout acts with the learner's params of this update
        )
        rollout = make_rollout(env, member_agent, config.rollout_len, unroll=config.rollout_unroll)
        return member_agent, learner, rollout

    example_obs = jax.tree.map(jnp.asarray, recipe.example_obs())

    def init_one(key, hparams):
        agent, learner, _ = parts(hparams)
        learner_key, env_key, act_key = jax.random.split(key, 3)
        env_keys = jax.random.split(env_key, config.num_envs)
        return AnakinState(
            learner=per_device(agent, learner.init(learner_key, example_obs), num_devices),
            rollout=reset_envs(env, env_keys, env_params, agent.initial_actor_state),
            key=act_key,
            hparams=hparams,
        )

    def init_all(keys, hparams):
        # One member after another, not vmapped: the orthogonal initialisers' QR factorisations
        # would be one batched LAPACK call, which in jaxlib 0.10 on CPU splits its batch over
        # the intra-op thread pool and waits for it from a pool thread; two such calls at once
        # on a 2-thread pool wait for each other forever (docs/design.md, "Tests").
        state = jax.lax.map(lambda args: init_one(*args), (keys, hparams))
        if periodic is None:
            return state
        # Its own keys, so that the periodic work never draws from the training keys.
        return state._replace(
            periodic=periodic.init(
                jax.vmap(lambda k: jax.random.fold_in(k, seeding.PERIODIC_STREAM))(keys)
            )
        )

    state_specs, state_shardings = state_layout(recipe.agent, mesh)

    # One program over the global mesh: with several processes, each computes (and holds) only
    # the shards of its own devices, i.e. its own slice of the environment batch.
    init_seeds = jax.jit(
        lambda seeds, hparams: init_all(jax.vmap(jax.random.key)(seeds), hparams),
        out_shardings=state_shardings,
    )
    offsets = np.arange(config.num_seeds) if members is None else members.seed_offsets
    initial_hparams = {} if members is None else dict(members.hparams)

    def init(seed: int) -> AnakinState:
        """The initial state of runs ``seed, ..., seed + num_seeds - 1`` (members: of seeds
        ``seed + seed_offsets``). The first call checks the step's shapes, so a size that does
        not divide fails here, before any compilation."""
        seeds = (seed + np.asarray(offsets)).astype(np.uint32)
        hparams = {k: np.asarray(v, np.float32) for k, v in initial_hparams.items()}
        if not checked:
            jax.eval_shape(make_step(1), jax.eval_shape(init_seeds, seeds, hparams))
            checked.append(True)
        return init_seeds(seeds, hparams)

    checked: list[bool] = []

    one_update = make_one_update(parts, env_params)
    local_members = config.num_seeds // config.member_shards

    @functools.cache
    def make_step(k: int):
        def one_seed(state):
            return jax.lax.scan(one_update, state, None, length=k)

        sharded = jax.shard_map(
            over_members(one_seed, local_members, config.member_loop),
            mesh=mesh,
            in_specs=(state_specs,),
            out_specs=(state_specs, P(MEMBER_AXIS)),
            check_vma=env_checks_vma(env),
        )
        # Metrics come back replicated: every process can read them, even when the members
        # are split over processes (an all-gather of a few numbers per member).
        out_shardings = (state_shardings, jax.sharding.NamedSharding(mesh, P()))
        step = sharded if periodic is None else with_periodic(sharded, periodic)
        return jax.jit(step, donate_argnums=0, out_shardings=out_shardings)

    return Anakin(
        init=init,
        step=make_step(updates_per_call),
        make_step=make_step,
        mesh=mesh,
        config=config,
        compiled={},
        periodic=periodic,
        recipe=recipe,
    )


MAX_STEPS_PER_CALL = 1 << 20
"""Environment steps (per member) a call holds at most when ``updates_per_call`` is chosen:
Ctrl-C and SIGTERM act when the call returns (the main thread waits inside XLA until then),
and progress lines come once per call; about 10 s of CartPole PPO on a 2-core CPU."""


def choose_updates_per_call(
    num_updates: int, target_calls: int = 20, max_updates: int | None = None
) -> int:
    """A number of updates per call near ``num_updates / target_calls`` that divides
    ``num_updates`` when one is close, so that a run needs one compiled program; at most
    ``max_updates`` (a long run then has calls of that many and one shorter last call)."""
    if max_updates is not None and num_updates > target_calls * max_updates:
        return max(1, max_updates)
    if num_updates <= target_calls:
        return 1
    for calls in range(target_calls, 4 * target_calls + 1):
        if num_updates % calls == 0:
            return min(num_updates // calls, max_updates or num_updates)
    return min(math.ceil(num_updates / target_calls), max_updates or num_updates)


def call_schedule(start: int, num_updates: int, k: int, interval: int = 0) -> list[int]:
    """Updates per call from update ``start`` to ``num_updates``: calls end at multiples of
    ``k`` and of ``interval`` (counted from update 0, whatever ``start``), and at the end."""
    ends = set(range(k, num_updates, k)) | {num_updates}
    if interval:
        ends |= set(range(interval, num_updates, interval))
    ends = sorted(e for e in ends if e > start)
    return [b - a for a, b in zip([start, *ends[:-1]], ends, strict=True)]


def run(
    system: Anakin,
    *,
    seed: int,
    total_timesteps: int,
    progress: Callable[[dict[str, Any]], None] | None = None,
    state: AnakinState | None = None,
    start_update: int = 0,
    hooks: RunHooks | None = None,
) -> RunResult:
    """The host loop: call the compiled step until ``total_timesteps`` steps per seed.

    The number of updates is ``total_timesteps // (num_envs * rollout_len)`` (at least one).
    Host work on the metrics of one call overlaps the next call on the devices. Ctrl-C gives
    the last state to ``hooks.interrupted`` (a checkpoint) before the ``KeyboardInterrupt``
    goes on.

    Args:
      system: the built :class:`Anakin` system.
      seed: the run seed (``system.init(seed)`` when no ``state`` is given).
      total_timesteps: environment steps per seed.
      progress: receives a ``"train"`` record (:mod:`podracer.runs.logging`) after every call.
      state: a restored state to resume from; None starts afresh.
      start_update: the updates ``state`` holds (a resumed run's).
      hooks: host work between calls (:class:`~podracer.loops.RunHooks`).

    Returns:
      The :class:`~podracer.loops.RunResult`: the summary, the final
      :class:`AnakinState`, the per-update metrics and the periodic work's events.
    """
    config = system.config
    num_updates = max(1, total_timesteps // config.steps_per_update)
    if not 0 <= start_update < num_updates:
        raise ConfigValueError(
            f"run: start_update={start_update} is not allowed: the run has {num_updates} updates "
            f"of {config.steps_per_update} steps (total_timesteps={total_timesteps})"
        )
    k = config.updates_per_call or choose_updates_per_call(
        num_updates, max_updates=max(1, MAX_STEPS_PER_CALL // config.steps_per_update)
    )
    k = min(k, num_updates)
    intervals = [hooks.interval if hooks is not None else 0]
    if system.periodic is not None:
        intervals.append(system.periodic.interval)
    interval = math.gcd(*intervals)  # calls end at multiples of every interval
    if interval:  # calls of one length where the interval allows
        k = max(d for d in range(1, min(k, interval) + 1) if interval % d == 0)
    schedule = call_schedule(start_update, num_updates, k, interval)

    if state is None:
        state = system.init(seed)
    t0 = time.perf_counter()
    steps = {n: _compiled(system, n, state) for n in sorted(set(schedule))}
    compile_s = time.perf_counter() - t0
    barrier("the Anakin step compiled")  # the first step's collectives start together

    chunks: list[UpdateMetrics] = []
    events: list[dict[str, Any]] = []
    start = time.perf_counter()
    pending = None  # (metrics, updates done after them) of the last call, not yet reported
    # (state, the updates it holds): one name, assigned in one store with no call in between,
    # so a Ctrl-C anywhere finds the two consistent and its checkpoint resumes exactly.
    at = (state, start_update)

    def report(metrics, updates):
        metrics = _report(metrics, updates, num_updates, start, start_update, config, progress)
        if hooks is not None:
            done = next(iter(metrics.learner.values())).shape[-1] if metrics.learner else 0
            hooks.after_metrics(metrics.learner, updates - done)
        if system.periodic is not None and bool(metrics.events["due"]):
            for record in system.periodic.describe(metrics.events, updates):
                record = {"step": updates * config.steps_per_update, **record}
                events.append(record)
                if progress is not None:
                    progress(record)
        return metrics

    with Watchdog("the Anakin step") as watchdog:  # armed only with several processes
        watchdog.beat()
        try:
            for n in schedule:
                new_state, metrics = steps[n](at[0])  # donates the buffers of at[0]
                at = (new_state, at[1] + n)
                if pending is not None:
                    chunks.append(report(*pending))
                    watchdog.beat()
                pending = (metrics, at[1])
                if hooks is not None:
                    last = at[1] == num_updates
                    if last or (hooks.interval and at[1] % hooks.interval == 0):
                        # A call whose state the hooks may save: its metrics first (the
                        # divergence check), at no cost in overlap (saving waits for the state).
                        chunks.append(report(*pending))
                        pending = None
                    hooks.after_call(*at, last)
        except KeyboardInterrupt:
            # Interrupted as the step returned, the donated state is gone: nothing to save.
            if hooks is not None and not _deleted(at[0]):
                hooks.interrupted(*at)
            raise
        if pending is not None:
            chunks.append(report(*pending))
        state = at[0]
        jax.block_until_ready(state)
    elapsed = time.perf_counter() - start

    history = {
        "episodes": np.concatenate([c.episodes for c in chunks], axis=1),
        "return_sum": np.concatenate([c.return_sum for c in chunks], axis=1),
        "length_sum": np.concatenate([c.length_sum for c in chunks], axis=1),
    }
    for name in chunks[0].learner:
        history[name] = np.concatenate([c.learner[name] for c in chunks], axis=1)
    numbers = summary(
        history,
        steps_per_update=config.steps_per_update,
        num_updates=num_updates,
        start_update=start_update,
        num_members=config.num_seeds,
        elapsed=elapsed,
        compile_s=compile_s,
        params=state.learner.params,
    )
    return RunResult(numbers, state, history, tuple(events))


def _deleted(state) -> bool:
    return any(x.is_deleted() for x in jax.tree.leaves(state) if isinstance(x, jax.Array))


def _compiled(system: Anakin, k: int, state: AnakinState):
    """The step for ``k`` updates compiled for ``state``'s shapes, once per system."""
    key = (
        k,
        jax.tree.structure(state),
        tuple((x.shape, x.dtype, x.sharding) for x in jax.tree.leaves(state)),
    )
    if key not in system.compiled:
        system.compiled[key] = system.make_step(k).lower(state).compile()
    return system.compiled[key]


def _report(metrics, done_updates, num_updates, start, start_update, config, progress):
    metrics = jax.device_get(metrics)
    if progress is not None:
        progress(
            train_record(
                updates=done_updates,
                num_updates=num_updates,
                start_update=start_update,
                steps_per_update=config.steps_per_update,
                num_members=config.num_seeds,
                start=start,
                returns=metrics.return_sum.sum(axis=1),
                episodes=metrics.episodes.sum(axis=1),
                metrics={k: float(np.mean(v)) for k, v in metrics.learner.items()},
            )
        )
    return metrics


def probe(
    env: str | EnvFactory,
    config: AnakinConfig,
    seed: int,
    env_options: EnvOptions | None = None,
) -> EnvSpec:
    """The specs of the run's JAX environment: the one its :class:`EnvFactory` builds (and
    keeps: the rollout, the evaluator and a population's tournament get that same object from
    ``recipe.make_env()``); an id is taken with ``env_options``. An unknown id or option fails
    here."""
    del config, seed
    built = as_factory(env, env_options).make()
    return EnvSpec(built.observation_spec, built.action_spec)


def build_system(
    recipe: Recipe,
    config: AnakinConfig,
    *,
    devices: Sequence[jax.Device] | None = None,
    members: Members | None = None,
    periodic: Periodic | None = None,
    env_params: Any = None,
) -> Anakin:
    """:attr:`Loop.build` of Anakin: :func:`make_anakin` of the recipe."""
    return make_anakin(
        recipe, config, devices=devices, members=members, periodic=periodic, env_params=env_params
    )


def place_members(
    config: AnakinConfig, recipe: Recipe | None = None
) -> tuple[AnakinConfig, list[jax.Device] | None]:
    """:attr:`Loop.place_members` of Anakin: the members on as many of the CPU's cores as divide
    them (:func:`~podracer.parallel.member_placement`), each group of cores running whole
    members with no collective between groups. Cores left over (fewer members than cores)
    split each member's environments between them, data parallel, where every core gets at
    least :data:`~podracer.parallel.MIN_STEPS_PER_CORE` steps an update
    (:func:`~podracer.parallel.cores_per_member`; below that the all-reduces cost more than
    they save) and the agent's learner keeps nothing per device (no replay buffer). A config
    that sets ``member_shards`` keeps its own placement."""
    if config.member_shards != 1:
        return config, None
    devices, shards = member_placement(config.num_seeds)
    per_device_state = recipe is not None and (
        recipe.agent.replay is not None or recipe.agent.state_per_device
    )
    if not per_device_state:
        cores = jax.local_devices()
        split = cores_per_member(config.num_envs, config.steps_per_update, len(cores) // shards)
        devices = cores[: shards * split]
    return dataclasses.replace(config, member_shards=shards), devices


LOOP = Loop(
    name="anakin",
    config_cls=AnakinConfig,
    default_env=lambda agent_spec: agent_spec.default_env,
    probe=probe,
    steps_per_update=lambda config: config.steps_per_update,
    build=build_system,
    members_in_one_program=True,
    with_members=lambda config, n: dataclasses.replace(config, num_seeds=n),
    place_members=place_members,
    sizes={"envs": "num_envs", "rollout_len": "rollout_len"},
    runs_in_pods=True,
)


def build(
    env_id: str,
    agent_config: Any,
    config: AnakinConfig,
    *,
    total_timesteps: int,
    devices: Sequence[jax.Device] | None = None,
    env_options: EnvOptions | dict[str, Any] | None = None,
) -> Anakin:
    """The Anakin system for an environment id (with ``env_options``) and a registered agent's
    config (:mod:`podracer.agents`).

    Args:
      env_id: a JAX environment's id (:func:`podracer.envs.make`).
      agent_config: the config of a registered agent.
      config: the loop's sizes.
      total_timesteps: environment steps per seed; sets the length of learning-rate schedules.
      devices: the mesh's devices (default: every device of every process).
      env_options: the environment's :class:`~podracer.envs.EnvOptions` (or a mapping of its
        ``params``).

    Returns:
      The :class:`Anakin` system (:func:`make_anakin`).
    """
    from podracer import agents

    return registry.build(
        LOOP,
        env_id,
        agents.spec_of(agent_config),
        agent_config,
        config,
        total_timesteps=total_timesteps,
        devices=devices,
        env_options=env_options,
    )


train = functools.partial(registry.train, LOOP)
"""``train(env_id, agent_config, config, *, seed, total_timesteps, devices, progress, state,
start_update, hooks, env_options)``: :func:`podracer.loops.train` on Anakin."""


__all__ = [
    "LOOP",
    "Anakin",
    "AnakinConfig",
    "AnakinState",
    "Members",
    "Periodic",
    "RunResult",
    "UpdateMetrics",
    "build",
    "call_schedule",
    "choose_updates_per_call",
    "make_anakin",
    "params_checksum",
    "run",
    "train",
]
