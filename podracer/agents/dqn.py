"""DQN with double Q-learning, n-step returns, a target network and replay.

Mnih et al., 2015 (https://www.nature.com/articles/nature14236); van Hasselt et al., 2016,
double Q-learning (https://arxiv.org/abs/1509.06461); Wang et al., 2016, the dueling head
(https://arxiv.org/abs/1511.06581). Trained by the replay learner
(:mod:`podracer.core.replay`): ``prepare`` turns each transition of the
trajectory into an n-step item,

.. math::
    G_t = \\sum_{i=0}^{k-1} \\gamma^i r_{t+i}, \\qquad
    d_t = \\gamma^k \\ (0 \\text{ if the episode terminated within}), \\qquad
    s'_t = \\text{bootstrap\\_obs}[t + k - 1],

with ``k <= n`` cut at the first episode end (so no target crosses one; a truncation
bootstraps from its ``final_obs``) and at the trajectory's end (a shorter target, as GAE
bootstraps at ``T - 1``). The loss is the Huber loss of
``Q(s_t, a_t) - (G_t + d_t Q_target(s'_t, argmax_a Q(s'_t, a)))``, weighted by the
importance weights; its ``|TD error|`` are the new priorities. The target network follows the
params every ``target_period`` updates, by Polyak averaging with ``tau`` (``tau = 1``: a
copy). The exploration rate decays linearly as PQN's (:func:`podracer.agents.policy.epsilon_at`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from podracer.agents.optim import clipped_adam
from podracer.agents.policy import (
    EpsilonGreedy,
    QNetworkFields,
    epsilon_at,
    epsilon_greedy_act,
    select,
)
from podracer.agents.spec import AgentSpec, Space, num_actions
from podracer.config import check_positive, check_range
from podracer.core.replay import NStepItem, Replay, ReplayBatch, ReplayFields, n_step_items
from podracer.types import ActionSpec, Agent, LossOutput, Trajectory


@dataclasses.dataclass(frozen=True)
class DQNConfig(ReplayFields, QNetworkFields):
    """DQN hyper-parameters and its replay's (defaults: tuned here on CartPole, 1e5 steps:
    lr 1e-3, batch 128, 3-step double-Q targets, a target network copied every 4 updates,
    epsilon 1 -> 0.01 over the first 30% of the run, and a Huber loss whose linear part starts
    at 100: with delta 1, the usual Atari value, Q-learning on CartPole's returns of up to 100
    did not learn, measured)."""

    lr: float = 1e-3
    """Adam learning rate."""
    gamma: float = 0.99
    """Discount factor."""
    n_step: int = 3
    """Steps of the n-step return (1: one-step Q-learning)."""
    double_q: bool = True
    """Choose the bootstrap action with the online network, value it with the target's."""
    dueling: bool = False
    """A dueling head: q = v + a - mean(a)."""
    target_period: int = 4
    """Updates between target-network updates."""
    tau: float = 1.0
    """Polyak step of a target update (1: copy the params)."""
    huber_delta: float = 100.0
    """Where the Huber loss turns linear."""
    epsilon_start: float = 1.0
    """Exploration rate at the start of the run."""
    epsilon_finish: float = 0.01
    """Exploration rate after the decay."""
    epsilon_decay: float = 0.3
    """Fraction of the run's updates over which the exploration rate decays linearly."""
    max_grad_norm: float = 10.0
    """Global gradient norm clip (0 disables it)."""

    def __post_init__(self):
        check_positive(self, "lr", "n_step", "target_period")
        check_range(self, "gamma", 0.0, 1.0)
        check_range(self, "tau", 0.0, 1.0, low_open=True)
        check_range(self, "huber_delta", 0.0, None, low_open=True)
        check_range(self, "epsilon_start", 0.0, 1.0)
        check_range(self, "epsilon_finish", 0.0, 1.0)
        check_range(self, "epsilon_decay", 0.0, 1.0)
        check_range(self, "max_grad_norm", 0.0, None)
        self.check_network()
        self.check_replay()


class DQNState(NamedTuple):
    """DQN's own slot: the target network and the updates done."""

    target_params: Any
    updates: jax.Array  # i32 []


def make_agent(config: DQNConfig, action_spec: ActionSpec | int, *, num_updates: int = 1):
    """DQN as an :class:`~podracer.types.Agent` (with its replay added by the spec's build)."""
    actions = num_actions(action_spec, "dqn")
    network = config.q_network(actions, dueling=config.dueling)

    def init(key, example_obs):
        return network.init(key, example_obs[None])

    def init_state(key, params):
        del key
        return DQNState(params, jnp.zeros((), jnp.int32))

    def update_state(state: DQNState, params, traj, mean_fn):
        del traj, mean_fn
        updates = state.updates + 1
        due = updates % config.target_period == 0
        target = jax.tree.map(
            lambda t, p: jnp.where(due, config.tau * p + (1.0 - config.tau) * t, t),
            state.target_params,
            params,
        )
        return DQNState(target, updates)

    def actor_params(params, state: DQNState):
        return EpsilonGreedy(params, epsilon_at(config, state.updates, num_updates))

    def prepare(params, state, traj: Trajectory, mean_fn):
        del params, state, mean_fn
        return n_step_items(traj, config.gamma, config.n_step)

    def loss(params, batch: ReplayBatch, key):
        del key
        items: NStepItem = batch.items
        q = network.apply(params, items.obs)
        q_taken = select(q, items.action)
        q_next_target = network.apply(batch.agent_state.target_params, items.next_obs)
        if config.double_q:
            best = jnp.argmax(network.apply(params, items.next_obs), axis=-1)
        else:
            best = jnp.argmax(q_next_target, axis=-1)
        bootstrap = select(q_next_target, best)
        target = jax.lax.stop_gradient(items.n_step_return + items.discount * bootstrap)
        td = q_taken - target
        total = jnp.mean(batch.weights * optax.huber_loss(td, delta=config.huber_delta))
        return total, LossOutput({"loss": total, "mean_q": jnp.mean(q_taken)}, priority=td)

    def item(obs):
        scalar = jax.ShapeDtypeStruct((), jnp.float32)
        action = jax.ShapeDtypeStruct((), jnp.int32)
        return NStepItem(
            obs=obs, action=action, n_step_return=scalar, discount=scalar, next_obs=obs
        )

    return Agent(
        init=init,
        act=epsilon_greedy_act(network, actions),
        prepare=prepare,
        loss=loss,
        init_state=init_state,
        update_state=update_state,
        actor_params=actor_params,
        replay=Replay(config, item),
    )


def make_optimizer(config: DQNConfig, num_updates: int) -> optax.GradientTransformation:
    """Adam at a constant learning rate after global-norm clipping."""
    del num_updates
    return clipped_adam(config.lr, config.max_grad_norm)


SPEC = AgentSpec(
    name="dqn",
    config_cls=DQNConfig,
    make_agent=make_agent,
    make_optimizer=make_optimizer,
    default_env="gymnax:CartPole-v1",
    loop_defaults={
        "anakin": {"num_envs": 16, "rollout_len": 8},
        "sebulba": {"envs_per_actor": 16, "rollout_len": 8},
    },
    search_space={
        "lr": Space(1e-6, 1e-1, log=True),
        "gamma": Space(0.8, 0.9999),
        "tau": Space(1e-3, 1.0, log=True),
        "epsilon_finish": Space(0.0, 0.5),
        "epsilon_decay": Space(0.05, 1.0),
    },
)
