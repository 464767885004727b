"""A JAX CartPole whose step raises on the host once this process has stepped it ``FAULT_AT``
times (a ``jax.debug.callback``), for ``tests/test_faults.py``: ``--env faulty_env:make_env``."""

import time

import jax

from podracer.envs import make

FAULT_AT = 200
STEPS = {"calls": 0, "failed_at": None}  # this process's step calls, the time of the fault


class EnvironmentFault(RuntimeError):
    pass


def _count(action):
    STEPS["calls"] += 1
    if STEPS["calls"] >= FAULT_AT:
        STEPS["failed_at"] = STEPS["failed_at"] or time.monotonic()
        raise EnvironmentFault(f"the environment failed at step call {STEPS['calls']}")


class FaultyCartPole:
    id = "faulty_env:make_env"

    def __init__(self):
        self._env = make("gymnax:CartPole-v1")

    @property
    def default_params(self):
        return self._env.default_params

    @property
    def observation_spec(self):
        return self._env.observation_spec

    @property
    def action_spec(self):
        return self._env.action_spec

    def reset(self, key, params):
        return self._env.reset(key, params)

    def step(self, key, state, action, params):
        jax.debug.callback(_count, action)
        return self._env.step(key, state, action, params)


def make_env():
    return FaultyCartPole()
