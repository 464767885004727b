"""The built Anakin system (:class:`Anakin`) and its host loop (:func:`run`): the schedule of
calls of the compiled step, the reports of each call's metrics while the next one runs, the hooks
between calls, and the run's summary."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

from podracer.core.learner.skeleton import one_device
from podracer.errors import ConfigValueError
from podracer.loops.anakin.config import AnakinConfig
from podracer.loops.anakin.state import AnakinState, UpdateMetrics
from podracer.loops.base import Periodic, RunHooks, RunResult
from podracer.loops.common import summary, train_record
from podracer.loops.recipe import Recipe
from podracer.parallel import (
    DATA_AXIS,
    Watchdog,
    barrier,
    fetch,
)


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

    @property
    def num_members(self) -> int:
        return self.config.num_seeds

    def policy(self, state, member: int):
        """``(agent, actor_params)`` of member ``member`` (:meth:`podracer.loops.System.policy`);
        the members act with the recipe's agent, as in :meth:`evaluator`."""
        agent = self.recipe.agent
        learner = state.learner
        params, agent_state = jax.tree.map(
            lambda x: x[member], fetch((learner.params, learner.agent_state))
        )
        return agent, agent.actor_params(params, one_device(agent, agent_state))

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
    schedule = call_schedule(start_update, num_updates, *call_sizes(system, num_updates, hooks))
    if state is None:
        state = system.init(seed)
    t0 = time.perf_counter()
    steps = {n: _compiled(system, n, state) for n in sorted(set(schedule))}
    compile_s = time.perf_counter() - t0
    barrier("the Anakin step compiled")  # the first step's collectives start together

    reports = CallReports(system, num_updates, start_update, hooks, progress)
    state = call_steps(steps, schedule, state, start_update, num_updates, hooks, reports)
    elapsed = time.perf_counter() - reports.start
    history = reports.history()
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
    return RunResult(numbers, state, history, tuple(reports.events))


def call_sizes(system: Anakin, num_updates: int, hooks: RunHooks | None) -> tuple[int, int]:
    """``(k, interval)``: the updates of one call (the config's, or :func:`choose_updates_per_call`
    of the run's length) and the interval the calls must also end at (the gcd of the hooks' and
    the periodic work's; ``k`` then divides it, so the calls are of one length where it allows)."""
    config = system.config
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
    return k, interval


class CallReports:
    """The host side of a run's calls: each call's metrics fetched and reported (a ``"train"``
    record to ``progress``, the learner's metrics to the hooks, the periodic work's records),
    kept for the history; ``start`` is when the calls began."""

    def __init__(self, system: Anakin, num_updates, start_update, hooks, progress):
        self.system, self.num_updates, self.start_update = system, num_updates, start_update
        self.hooks, self.progress = hooks, progress
        self.chunks: list[UpdateMetrics] = []
        self.events: list[dict[str, Any]] = []
        self.start = time.perf_counter()

    def __call__(self, metrics, updates: int) -> None:
        """Reports the metrics of the call that ended with ``updates`` updates done."""
        config, periodic, hooks = self.system.config, self.system.periodic, self.hooks
        metrics = _report(
            metrics, updates, self.num_updates, self.start, self.start_update, config, self.progress
        )
        if hooks is not None:
            done = next(iter(metrics.learner.values())).shape[-1] if metrics.learner else 0
            hooks.after_metrics(metrics.learner, updates - done)
        if periodic is not None and bool(metrics.events["due"]):
            for record in periodic.describe(metrics.events, updates):
                record = {"step": updates * config.steps_per_update, **record}
                self.events.append(record)
                if self.progress is not None:
                    self.progress(record)
        self.chunks.append(metrics)

    def history(self) -> dict[str, np.ndarray]:
        """The per-update metrics ``[members, updates]`` of every call reported."""
        chunks = self.chunks
        history = {
            "episodes": np.concatenate([c.episodes for c in chunks], axis=1),
            "return_sum": np.concatenate([c.return_sum for c in chunks], axis=1),
            "length_sum": np.concatenate([c.length_sum for c in chunks], axis=1),
        }
        for name in chunks[0].learner:
            history[name] = np.concatenate([c.learner[name] for c in chunks], axis=1)
        return history


def call_steps(steps, schedule, state, start_update, num_updates, hooks, report) -> AnakinState:
    """Calls the compiled steps of ``schedule`` from ``state`` (which holds ``start_update``
    updates) and returns the last state. A call's metrics are reported while the next call runs,
    except where the hooks may save its state (their metrics first: the divergence check).
    Ctrl-C gives the last whole state to ``hooks.interrupted`` before it goes on."""
    pending = None  # (metrics, updates done after them) of the last call, not yet reported
    # (state, the updates it holds): one name, assigned in one store with no call in between,
    # so a Ctrl-C anywhere finds the two consistent and its checkpoint resumes exactly.
    at = (state, start_update)
    with Watchdog("the Anakin step") as watchdog:  # armed only with several processes
        watchdog.beat()
        try:
            for n in schedule:
                new_state, metrics = steps[n](at[0])  # donates the buffers of at[0]
                at = (new_state, at[1] + n)
                if pending is not None:
                    report(*pending)
                    watchdog.beat()
                pending = (metrics, at[1])
                if hooks is not None:
                    last = at[1] == num_updates
                    if last or (hooks.interval and at[1] % hooks.interval == 0):
                        # A call whose state the hooks may save: its metrics first (the
                        # divergence check), at no cost in overlap (saving waits for the state).
                        report(*pending)
                        pending = None
                    hooks.after_call(*at, last)
        except KeyboardInterrupt:
            # Interrupted as the step returned, the donated state is gone: nothing to save.
            if hooks is not None and not _deleted(at[0]):
                hooks.interrupted(*at)
            raise
        if pending is not None:
            report(*pending)
        state = at[0]
        jax.block_until_ready(state)
    return state


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
