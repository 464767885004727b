"""Sebulba measurements shared by ``sebulba_throughput.py`` and ``suite.py``: envpool alone, one
actor alone, and a training run's JSON record.

Importing this module sets no device count: ``sebulba_throughput.py`` asks for two virtual CPU
devices itself, before JAX starts; ``suite.py`` uses the devices it finds.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Sequence
from typing import NamedTuple

import jax
import numpy as np

from podracer import agents, loops
from podracer.core import RolloutState
from podracer.envs import host as host_envs
from podracer.loops import sebulba
from podracer.loops.sebulba import (
    AsyncCollector,
    SebulbaConfig,
    Timers,
    env_factory,
    host_act,
    host_rollout,
    rollout_keys,
)
from podracer.util import ops


class Speed(NamedTuple):
    """A timed stretch of a benchmark: ``sps`` (environment steps per wall-clock second) and
    ``cpu_cores`` (the process's CPU seconds, every thread's, per wall-clock second: envpool's
    workers, XLA's, the actor's and the learner's). ``cpu_cores`` below the machine's cores is
    idle time that overlapping acting with stepping (async mode) could fill; CPU per step does
    not depend on what else runs on the machine as much as ``sps`` does."""

    sps: float
    cpu_cores: float

    @property
    def cpu_us_per_step(self) -> float:
        return self.cpu_cores / self.sps * 1e6


class Clock:
    """Wall-clock and process CPU time since ``start()``: ``speed(steps)``."""

    def start(self) -> None:
        self.wall, self.cpu = time.perf_counter(), _cpu_seconds()

    def speed(self, steps: float) -> Speed:
        wall = max(time.perf_counter() - self.wall, 1e-9)
        return Speed(steps / wall, (_cpu_seconds() - self.cpu) / wall)


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


class TrainingClock(Clock, loops.RunHooks):
    """Run hooks (:class:`podracer.loops.RunHooks`) that time a Sebulba run from its first
    update's end to its last (compiling and the first rollouts left out): ``speed`` over those
    ``updates - 1`` updates."""

    def __init__(self, steps_per_update: int):
        self.steps_per_update = steps_per_update  # every member's together
        self.first = self.last = None

    def after_metrics(self, metrics, first_update: int) -> None:
        pass

    def after_call(self, state, updates: int, last: bool) -> None:
        if self.first is None:
            self.first = updates
            self.start()
        elif last:
            self.last = updates
            self.measured = self.speed((updates - self.first) * self.steps_per_update)


def env_only_sps(env_id: str, config: SebulbaConfig, steps: int) -> float:
    """envpool alone with uniformly random actions."""
    return env_only(env_id, config, steps).sps


def env_only(env_id: str, config: SebulbaConfig, steps: int, make_env=None) -> Speed:
    """envpool alone (or ``make_env(0)``'s host environment) with uniformly random actions: its
    :class:`Speed`."""
    if make_env is not None:
        env = make_env(0)
    else:
        env = host_envs.make(
            env_id,
            num_envs=config.envs_per_actor,
            num_threads=config.env_threads,
            batch_size=config.async_batch_size or None,
        )
    rng = np.random.default_rng(0)
    n = env.action_spec.num_actions
    clock = Clock()
    if env.batch_size < env.num_envs:
        env.async_reset()
        clock.start()
        for _ in range(steps // env.batch_size):
            _, ids = env.recv()
            env.send(rng.integers(0, n, len(ids)), ids)
        done = steps // env.batch_size * env.batch_size
    else:
        env.reset()
        clock.start()
        for _ in range(steps // env.num_envs):
            env.step(rng.integers(0, n, env.num_envs))
        done = steps // env.num_envs * env.num_envs
    speed = clock.speed(done)
    env.close()
    return speed


def actor_only_sps(
    env_id: str, agent_config, config: SebulbaConfig, rollouts: int, device=None
) -> float:
    """One actor acting and stepping with frozen params on ``device`` (default: JAX's first),
    no learner; async mode (``config.async_batch_size``) through the training run's
    ``AsyncCollector``."""
    return actor_only(env_id, agent_config, config, rollouts, device).sps


def actor_only(
    env_id: str, agent_config, config: SebulbaConfig, rollouts: int, device=None, make_env=None
) -> Speed:
    """:func:`actor_only_sps`'s :class:`Speed` (on ``make_env(0)``'s host environment if
    given)."""
    make_env = make_env or env_factory(env_id, config, seed=0)
    env = make_env(0)
    agent, _ = agents.build(agent_config, env.action_spec.num_actions, 1)
    device = device or jax.devices()[0]
    obs = np.zeros(env.observation_spec.shape, env.observation_spec.dtype)
    params = jax.device_put(agent.init(jax.random.key(0), obs), device)
    act = host_act(agent)
    if env.is_async:
        collector = AsyncCollector(env, config.rollout_len, agent.initial_actor_state(env.num_envs))
        key = jax.device_put(jax.random.key(1), device)

        def rollout():
            collector.rollout(act, params, key, Timers())

    else:
        initial = jax.device_put(agent.initial_actor_state(env.num_envs), device)
        carry = RolloutState((), env.reset(), initial)
        keys = jax.device_put(rollout_keys(jax.random.key(1), config.rollout_len), device)

        def rollout():
            nonlocal carry
            carry, _, _ = host_rollout(env, act, params, carry, keys)

    with ops.unrolled_threefry():  # compiles the step as the training run does
        rollout()
    clock = Clock()
    clock.start()
    for _ in range(rollouts):
        rollout()
    speed = clock.speed(rollouts * config.rollout_len * config.envs_per_actor)
    env.close()
    return speed


def bench(
    name: str,
    env_id: str,
    agent_config,
    config: SebulbaConfig,
    total_steps: int,
    devices: Sequence[jax.Device] | None = None,
    env_only_steps: int = 200_000,
    actor_rollouts: int = 20,
    make_env=None,
    env_label: str | None = None,
) -> dict:
    """Trains on ``devices`` (default: JAX's first two) and measures envpool alone and one actor
    alone in the same process; ``learner_layout`` is the layout the run's recipe chose.

    ``cpu_cores`` and ``cpu_us_per_step`` (:class:`Speed`) are those of training (from the end
    of the first update to the last: ``steady_sps``), of the actor alone and of envpool alone."""
    devices = list(devices) if devices is not None else jax.devices()[:2]
    system = loops.build(
        sebulba.LOOP,
        env_id,
        agent_config,
        config,
        total_timesteps=total_steps,
        devices=devices,
    )
    clock = TrainingClock(system.recipe.steps_per_update * config.num_seeds)
    if make_env is None:
        s = system.run(seed=0, hooks=clock).summary
    else:
        s = sebulba.run(
            system.recipe, config, make_env, seed=0, devices=system.devices, hooks=clock
        ).summary
    training = getattr(clock, "measured", None)  # None: a run of fewer than 2 updates
    actor_device = devices[config.actor_device_ids[0]]
    env_alone = env_only(env_id, config, min(total_steps, env_only_steps), make_env)
    actor_alone = actor_only(env_id, agent_config, config, actor_rollouts, actor_device, make_env)
    speeds = {"training": training, "actor_only": actor_alone, "env_only": env_alone}
    speeds = {k: v for k, v in speeds.items() if v is not None}
    return {
        "config": name,
        "env": env_label or env_id,
        "envs_per_actor": config.envs_per_actor,
        "rollout_len": config.rollout_len,
        "async_batch_size": config.async_batch_size,
        "env_threads": config.env_threads,
        "members": config.num_seeds,
        "total_steps": s["total_steps"],
        "sps": s["sps"],
        "steady_sps": None if training is None else training.sps,
        "compile_s": s["compile_s"],
        "actor_time_s": s["actor_time_s"],
        "learner_time_s": s["learner_time_s"],
        "policy_lag_mean": s["policy_lag_mean"],
        "queue_size_mean": s["queue_size_mean"],
        "env_only_sps": env_alone.sps,
        "actor_only_sps": actor_alone.sps,
        "cpu_cores": {k: v.cpu_cores for k, v in speeds.items()},
        "cpu_us_per_step": {k: v.cpu_us_per_step for k, v in speeds.items()},
        "final_return": s["final_return"],
        "learner_layout": system.recipe.layout._asdict(),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
