"""An environment and an agent that raise on the host mid-run, for ``tests/test_faults.py``:
``--env faulty:make_env`` (a JAX CartPole whose step raises) and ``--agent faulty:SPEC`` (PPO
whose loss raises). Each raises from a ``jax.debug.callback`` once its count of calls in this
process reaches ``FAULT_AT[what]``, which a test sets mid-run."""

import time

import jax

from podracer import agents
from podracer.envs import make

FAULT_AT = {"env": 10**9, "learner": 10**9}
CALLS = {"env": 0, "learner": 0}
FAILED_AT: dict[str, float] = {}  # what -> time.monotonic() of its fault


class InjectedFault(RuntimeError):
    pass


def _count(what):
    def count(*args):
        CALLS[what] += 1
        if CALLS[what] >= FAULT_AT[what]:
            FAILED_AT.setdefault(what, time.monotonic())
            raise InjectedFault(f"the {what} failed at call {CALLS[what]}")

    return count


class FaultyCartPole:
    id = "faulty:make_env"

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
        jax.debug.callback(_count("env"), action)
        return self._env.step(key, state, action, params)


def make_env():
    return FaultyCartPole()


PPO = agents.get("ppo")


def _make_agent(config, action_spec, num_updates):
    agent = PPO.make_agent(config, action_spec, num_updates)

    def loss(params, batch, key):
        jax.debug.callback(_count("learner"))
        return agent.loss(params, batch, key)

    return agent._replace(loss=loss)


SPEC = PPO._replace(name="faulty:SPEC", make_agent=_make_agent)
