"""PQN: parallelised Q-learning with LayerNorm, no replay buffer and no target network.

Gallici et al., 2024, "Simplifying deep temporal difference learning",
https://arxiv.org/abs/2407.04811. Many environments act epsilon-greedily with a Q-network whose
dense layers are each followed by a LayerNorm; once per update the lambda-returns of the rollout
are computed with the params before the update,

.. math::
    G_t = r_t + \\gamma_t [(1 - \\lambda_t) \\max_a Q(s'_t, a) + \\lambda_t G_{t+1}],
    \\qquad G_{T-1} = r_{T-1} + \\gamma_{T-1} \\max_a Q(s'_{T-1}, a),

with ``s'_t`` the trajectory's ``bootstrap_obs[t]`` (the observation after step ``t``, before
any auto-reset), ``gamma_t = gamma (1 - terminated_t)`` and ``lambda_t = lambda (1 - done_t)``
(the trace is cut at every episode end; a truncation bootstraps from its final observation), as
``rlax.lambda_returns`` computes them (Peng's Q(lambda) targets). Then epochs of minibatches of
transitions regress ``Q(s_t, a_t)`` on ``G_t``: ``0.5 (Q(s_t, a_t) - G_t)^2``.

The exploration rate decays linearly from ``epsilon_start`` to ``epsilon_finish`` over the first
``epsilon_decay`` of the run's updates; it lives in the agent's slot (the updates done) and
reaches the actors with the params (``actor_params``), so Anakin, Sebulba and a resumed run all
act with the rate of their update. Evaluation is greedy.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
import rlax

from podracer.agents.optim import clipped_adam
from podracer.agents.policy import (
    EpsilonGreedy,
    QNetworkFields,
    SequenceFields,
    epsilon_at,
    epsilon_greedy_act,
    init_params,
    learning_rate,
    recurrent_net,
    select,
)
from podracer.agents.spec import AgentSpec, Space, num_actions
from podracer.core import memory
from podracer.types import ActionSpec, Agent, Trajectory, no_actor_state
from podracer.util.validation import check_fraction, check_non_negative, check_positive


@dataclasses.dataclass(frozen=True)
class PQNConfig(QNetworkFields, SequenceFields):
    """PQN hyper-parameters (defaults: CleanRL's ``pqn.py`` for CartPole, after the paper:
    32 environments x 64 steps, 4 epochs x 16 minibatches, lr 2.5e-4 annealed, lambda 0.65,
    epsilon 1 -> 0.05 over the first half of the run)."""

    lr: float = 2.5e-4
    """Adam learning rate (initial value when annealed)."""
    anneal_lr: bool = True
    """Anneal the learning rate linearly to 0 over the run."""
    gamma: float = 0.99
    """Discount factor."""
    q_lambda: float = 0.65
    """Trace parameter of the lambda-returns."""
    epsilon_start: float = 1.0
    """Exploration rate at the start of the run."""
    epsilon_finish: float = 0.05
    """Exploration rate after the decay."""
    epsilon_decay: float = 0.5
    """Fraction of the run's updates over which the exploration rate decays linearly."""
    num_epochs: int = 4
    """SGD passes over each batch."""
    num_minibatches: int = 16
    """Minibatches (of transitions) per pass; must divide the transitions per device."""
    max_grad_norm: float = 10.0
    """Global gradient norm clip (0 disables it)."""
    layer_norm: bool = True
    """A LayerNorm before each activation of the torso (what lets PQN do without a target
    network)."""

    def __post_init__(self):
        check_positive(self, "lr", "num_epochs", "num_minibatches")
        check_fraction(
            self, "gamma", "q_lambda", "epsilon_start", "epsilon_finish", "epsilon_decay"
        )
        check_non_negative(self, "max_grad_norm")
        self.check_network()
        self.check_sequences()


class PQNBatch(NamedTuple):
    """One sample per transition, ``[N]`` with ``N = T * B`` (with memory: one per window of
    one environment's steps, ``[N, W]``, with the windows' first carries and starts)."""

    obs: jax.Array
    action: jax.Array  # i32
    target: jax.Array  # f32: the lambda-return G_t
    sequences: memory.Sequences | tuple = ()


def lambda_returns(reward, terminated, truncated, q_next_max, gamma, q_lambda):
    """``G [T, B]`` from time-major ``[T, B]`` inputs (``q_next_max[t] = max_a Q(s'_t, a)``)."""
    discount = gamma * (1.0 - terminated.astype(jnp.float32))
    trace = q_lambda * (1.0 - (terminated | truncated).astype(jnp.float32))
    returns = jax.vmap(rlax.lambda_returns, in_axes=1, out_axes=1)
    return returns(reward, discount, q_next_max, trace)


def make_agent(config: PQNConfig, action_spec: ActionSpec | int, num_updates: int = 1) -> Agent:
    """PQN as an :class:`~podracer.types.Agent` for a discrete ``action_spec``."""
    actions = num_actions(action_spec, "pqn")
    network = config.q_network(actions, layer_norm=config.layer_norm)
    net = recurrent_net(config, network) if config.memory != "none" else None

    def init(key, example_obs):
        return init_params(config, network, key, example_obs)

    def init_state(key, params):
        del key, params
        return jnp.zeros((), jnp.int32)  # updates done

    def update_state(updates, params, traj, mean_fn):
        del params, traj, mean_fn
        return updates + 1

    def actor_params(params, updates):
        return EpsilonGreedy(params, epsilon_at(config, updates, num_updates))

    act = epsilon_greedy_act(network, actions, net)

    def prepare(params, updates, traj: Trajectory, mean_fn):
        del updates, mean_fn
        num_steps, num_envs = traj.reward.shape
        if net is None:
            flat = jax.tree.map(
                lambda x: x.reshape(num_steps * num_envs, *x.shape[2:]), traj.bootstrap_obs
            )
            q_next = network.apply(params, flat)
        else:  # each bootstrap_obs from the carry after its own step
            starts = memory.episode_starts(traj.terminated, traj.truncated)
            first = jax.tree.map(lambda x: x[0], traj.actor_state)
            carries, q = memory.unroll(net, params, first, traj.obs, starts)
            q_next = memory.bootstrap_outputs(
                net, params, carries, traj.bootstrap_obs, q, traj.truncated
            )
        q_next_max = jnp.max(q_next, axis=-1).reshape(num_steps, num_envs)
        target = lambda_returns(
            traj.reward,
            traj.terminated,
            traj.truncated,
            jax.lax.stop_gradient(q_next_max),
            config.gamma,
            config.q_lambda,
        )
        batch = PQNBatch(traj.obs, traj.action, target)
        if net is None:
            return jax.tree.map(lambda x: x.reshape(num_steps * num_envs, *x.shape[2:]), batch)
        window = config.window(num_steps, num_envs)
        return memory.windows(batch, window)._replace(sequences=memory.sequences(traj, window))

    def loss(params, batch: PQNBatch, key):
        del key
        if net is None:
            q = network.apply(params, batch.obs)
        else:
            _, q = memory.unroll_batch(net, params, batch.sequences, batch.obs)
        q_taken = select(q, batch.action)
        total = 0.5 * jnp.mean(jnp.square(q_taken - batch.target))
        return total, {"loss": total, "mean_q": jnp.mean(q_taken)}

    return Agent(
        init=init,
        act=act,
        prepare=prepare,
        loss=loss,
        init_state=init_state,
        update_state=update_state,
        actor_params=actor_params,
        initial_actor_state=net.initial if net is not None else no_actor_state,
    )


def make_optimizer(config: PQNConfig, num_updates: int) -> optax.GradientTransformation:
    """Adam after global-norm clipping; the learning rate constant or linearly annealed to 0
    over the run's optimizer steps."""
    return clipped_adam(learning_rate(config, num_updates), config.max_grad_norm)


SPEC = AgentSpec(
    name="pqn",
    config_cls=PQNConfig,
    make_agent=make_agent,
    make_optimizer=make_optimizer,
    default_env="gymnax:CartPole-v1",
    loop_defaults={"envs": 32, "rollout_len": 64},
    search_space={
        "lr": Space(1e-6, 1e-1, log=True),
        "gamma": Space(0.8, 0.9999),
        "q_lambda": Space(0.0, 1.0),
        "epsilon_finish": Space(0.0, 0.5),
    },
    presets={
        # The paper's MinAtar network and settings (pqn_minatar.yaml of the authors' code):
        # the MinAtar CNN with LayerNorm over gymnax's [H, W, C] frames, 128 envs x 32 steps,
        # 2 epochs x 32 minibatches, lr 5e-4, epsilon decayed over the first 10% of the run.
        # Breakout-MinAtar: greedy return 65 after 5e6 steps (benchmarks/README.md).
        "minatar": {
            "agent": {
                "torso": "minatar_cnn",
                "channels_first": False,
                "lr": 5e-4,
                "num_epochs": 2,
                "num_minibatches": 32,
                "epsilon_decay": 0.1,
            },
            "anakin": {"envs": 128, "rollout_len": 32},  # measured on Anakin only
        },
    },
)
