"""SAC: soft actor-critic with twin critics, Polyak target critics, a tanh-squashed Gaussian
actor and a learned temperature, on the replay learner.

Haarnoja et al., 2018, "Soft actor-critic algorithms and applications",
https://arxiv.org/abs/1812.05905. The actor samples ``u ~ N(mu(s), sigma(s))`` and acts
``a = c + h tanh(u)`` (``c``, ``h``: the centre and half-width of the action bounds), with

.. math::
    \\log \\pi(a | s) = \\log N(u; \\mu, \\sigma) - \\sum_d \\log(h_d (1 - \\tanh^2 u_d))

(the change of variables). One optimizer step minimises the sum of three losses whose
gradients do not mix (stop-gradients):

- critics: ``0.5 (Q_i(s, a) - y)^2`` for ``i = 1, 2``, ``y = G + d (min_i Q'_i(s', a') -
  alpha log pi(a' | s'))`` with ``a' ~ pi(s')`` and the target critics ``Q'`` (the n-step
  items of :func:`podracer.core.learner.replay.n_step_items`, so terminations and truncations are
  handled as for DQN);
- actor: ``alpha log pi(a | s) - min_i Q_i(s, a)`` with ``a ~ pi(s)`` reparameterised;
- temperature: ``-log(alpha) (log pi(a | s) + target_entropy)``, the target entropy
  ``-|A|`` by default (``target_entropy_scale``).

The target critics follow the critics by ``tau`` after every update (Polyak). Evaluation
acts with ``c + h tanh(mu(s))``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from podracer.agents.policy import action_size, check_bounded
from podracer.agents.spec import AgentSpec, Space
from podracer.core.learner.buffers import ReplayFields
from podracer.core.learner.replay import NStepItem, Replay, ReplayBatch, n_step_items
from podracer.networks import ACTIVATIONS, MLP, flatten_observations
from podracer.types import ActionSpec, ActorOutput, Agent, LossOutput, Trajectory
from podracer.util.validation import (
    check_choice,
    check_fraction,
    check_layer_sizes,
    check_non_negative,
    check_positive,
    check_range,
)

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


@dataclasses.dataclass(frozen=True)
class SACConfig(ReplayFields):
    """SAC hyper-parameters and its replay's (defaults: the paper's 256-256 networks, one
    gradient step per environment step, batch 128, learning starts after 1,000 steps; the
    ``classic_continuous`` preset makes the networks 64-64 for Pendulum)."""

    lr: float = 1e-3
    """Adam learning rate (actor, critics and temperature)."""
    gamma: float = 0.99
    """Discount factor."""
    n_step: int = 1
    """Steps of the critics' n-step return."""
    tau: float = 0.005
    """Polyak step of the target critics, per gradient step (compounded over an update's)."""
    init_alpha: float = 1.0
    """Initial temperature."""
    target_entropy_scale: float = 1.0
    """The target entropy is -target_entropy_scale x (action size) (1: the usual choice)."""
    replay_ratio: float = 1.0
    """Gradient steps per environment step (every device's steps together)."""
    max_grad_norm: float = 0.0
    """Global gradient norm clip (0 disables it)."""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """Hidden layer sizes of the actor's and each critic's MLP."""
    activation: str = "relu"
    """Activation of the MLPs: one of tanh, relu, gelu, silu."""

    def __post_init__(self):
        check_positive(self, "lr", "n_step", "init_alpha")
        check_fraction(self, "gamma")
        check_range(self, "tau", 0.0, 1.0, low_open=True)
        check_non_negative(self, "max_grad_norm")
        check_layer_sizes(self, "hidden_sizes")
        check_choice(self, "activation", tuple(ACTIVATIONS))
        self.check_replay()


class Actor(nn.Module):
    """``obs [B, ...] -> (mean, log_std) [B, D]``, the log-std squashed into its range."""

    action_size: int
    hidden_sizes: tuple[int, ...]
    activation: str

    @nn.compact
    def __call__(self, obs):
        x = MLP(self.hidden_sizes, self.activation)(obs)
        mean = nn.Dense(self.action_size)(x)
        log_std = jnp.tanh(nn.Dense(self.action_size)(x))
        return mean, LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1.0)


class TwinCritic(nn.Module):
    """``(obs [B, ...], action [B, D]) -> (q1, q2) [B]``: two independent MLPs."""

    hidden_sizes: tuple[int, ...]
    activation: str

    @nn.compact
    def __call__(self, obs, action):
        x = jnp.concatenate(
            [
                flatten_observations(obs),
                action.reshape(action.shape[0], -1),
            ],
            axis=-1,
        )
        q1 = nn.Dense(1)(MLP(self.hidden_sizes, self.activation)(x))[..., 0]
        q2 = nn.Dense(1)(MLP(self.hidden_sizes, self.activation)(x))[..., 0]
        return q1, q2


class SACState(NamedTuple):
    """SAC's own slot: the target critics."""

    target_critic: Any


def squashed_gaussian(low, high):
    """``(sample, log_prob, mode)`` of the tanh-squashed Gaussian on ``[low, high]``."""
    centre, half = (high + low) / 2.0, (high - low) / 2.0
    log_half = jnp.sum(jnp.log(half))

    def log_prob(mean, log_std, u):
        z = (u - mean) * jnp.exp(-log_std)
        gaussian = jnp.sum(-0.5 * jnp.square(z) - log_std - 0.5 * math.log(2 * math.pi), -1)
        # log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), stable for large |u|
        jacobian = jnp.sum(2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u)), -1)
        return gaussian - jacobian - log_half

    def sample(key, mean, log_std):
        u = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape, mean.dtype)
        return centre + half * jnp.tanh(u), log_prob(mean, log_std, u)

    def mode(mean):
        return centre + half * jnp.tanh(mean)

    return sample, log_prob, mode


def make_loss(config: SACConfig, actor: Actor, critic: TwinCritic, sample, size: int):
    """SAC's ``loss(params, batch: ReplayBatch, key) -> (loss, LossOutput)``: the twin critics'
    squared error to the soft n-step target (the target critics' smaller value less
    ``alpha * log pi``), the actor's ``alpha * log pi - min Q`` through frozen critics, and the
    temperature's loss towards the target entropy ``-target_entropy_scale * |A|``; the new
    priority is ``|Q1 - target|``. ``sample(key, mean, log_std) -> (action, log_prob)`` is the
    squashed Gaussian's."""
    target_entropy = -config.target_entropy_scale * float(size)

    def loss(params, batch: ReplayBatch, key):
        items: NStepItem = batch.items
        next_key, new_key = jax.random.split(key)
        num = items.n_step_return.shape[0]
        action = items.action.reshape(num, size)
        alpha = jnp.exp(params["log_alpha"])
        frozen_alpha = jax.lax.stop_gradient(alpha)

        # critics
        next_mean, next_log_std = actor.apply(params["actor"], items.next_obs)
        next_action, next_log_prob = sample(next_key, next_mean, next_log_std)
        q1_next, q2_next = critic.apply(
            batch.agent_state.target_critic, items.next_obs, next_action
        )
        soft_value = jnp.minimum(q1_next, q2_next) - frozen_alpha * next_log_prob
        target = jax.lax.stop_gradient(items.n_step_return + items.discount * soft_value)
        q1, q2 = critic.apply(params["critic"], items.obs, action)
        critic_loss = 0.5 * jnp.mean(
            batch.weights * (jnp.square(q1 - target) + jnp.square(q2 - target))
        )

        # actor, through frozen critics
        mean, log_std = actor.apply(params["actor"], items.obs)
        new_action, log_prob = sample(new_key, mean, log_std)
        frozen_critic = jax.lax.stop_gradient(params["critic"])
        q1_new, q2_new = critic.apply(frozen_critic, items.obs, new_action)
        actor_loss = jnp.mean(frozen_alpha * log_prob - jnp.minimum(q1_new, q2_new))

        # temperature
        alpha_loss = -jnp.mean(
            params["log_alpha"] * jax.lax.stop_gradient(log_prob + target_entropy)
        )
        total = critic_loss + actor_loss + alpha_loss
        metrics = {
            "loss": total,
            "critic_loss": critic_loss,
            "actor_loss": actor_loss,
            "alpha": alpha,
            "entropy": -jnp.mean(log_prob),
            "mean_q": jnp.mean(q1),
        }
        return total, LossOutput(metrics, priority=jnp.abs(q1 - target))

    return loss


def make_agent(config: SACConfig, action_spec: ActionSpec, num_updates: int = 1) -> Agent:
    """SAC as an :class:`~podracer.types.Agent` for a bounded continuous ``action_spec``."""
    del num_updates  # no schedule over the run
    spec = check_bounded(action_spec, "sac")
    shape = tuple(spec.shape)
    size = action_size(spec)
    low = jnp.asarray(np.broadcast_to(np.asarray(spec.low, np.float32), shape).reshape(size))
    high = jnp.asarray(np.broadcast_to(np.asarray(spec.high, np.float32), shape).reshape(size))
    actor = Actor(size, tuple(config.hidden_sizes), config.activation)
    critic = TwinCritic(tuple(config.hidden_sizes), config.activation)
    sample, _, mode = squashed_gaussian(low, high)

    def init(key, example_obs):
        actor_key, critic_key = jax.random.split(key)
        obs = jax.tree.map(lambda x: x[None], example_obs)
        return {
            "actor": actor.init(actor_key, obs),
            "critic": critic.init(critic_key, obs, jnp.zeros((1, size))),
            "log_alpha": jnp.asarray(math.log(config.init_alpha), jnp.float32),
        }

    def init_state(key, params):
        del key
        return SACState(params["critic"])

    def update_state(state: SACState, params, traj, mean_fn):
        del mean_fn
        # tau per gradient step, compounded over the update's steps
        steps = max(1, round(config.replay_ratio * traj.reward.size))
        rate = 1.0 - (1.0 - config.tau) ** steps
        return SACState(
            jax.tree.map(lambda t, p: t + rate * (p - t), state.target_critic, params["critic"])
        )

    def act(params, actor_state, obs, key):
        mean, log_std = actor.apply(params["actor"], obs)
        action, log_prob = sample(key, mean, log_std)
        batch = mean.shape[0]
        out = ActorOutput(
            action.reshape(batch, *shape),
            log_prob,
            jnp.zeros((batch,), jnp.float32),
            extras={"mean": mode(mean).reshape(batch, *shape)},
        )
        return actor_state, out

    def greedy(out: ActorOutput):
        return out.extras["mean"]

    def prepare(params, state, traj: Trajectory, mean_fn):
        del params, state, mean_fn
        return n_step_items(traj, config.gamma, config.n_step)

    def item(obs):
        scalar = jax.ShapeDtypeStruct((), jnp.float32)
        action = jax.ShapeDtypeStruct(shape, jnp.float32)
        return NStepItem(
            obs=obs, action=action, n_step_return=scalar, discount=scalar, next_obs=obs
        )

    return Agent(
        init=init,
        act=act,
        prepare=prepare,
        loss=make_loss(config, actor, critic, sample, size),
        greedy=greedy,
        init_state=init_state,
        update_state=update_state,
        replay=Replay(config, item),
    )


SPEC = AgentSpec(
    name="sac",
    config_cls=SACConfig,
    make_agent=make_agent,
    default_env="gymnax:Pendulum-v1",
    loop_defaults={"envs": 4, "rollout_len": 4},
    search_space={
        "lr": Space(1e-5, 1e-2, log=True),
        "gamma": Space(0.8, 0.9999),
        "tau": Space(1e-4, 0.1, log=True),
        "target_entropy_scale": Space(0.0, 2.0),
    },
    presets={
        # Measured on gymnax:Pendulum-v1: -155 after 3e4 steps (seed 0). 1e5 steps by
        # default (not the command line's 5e5, five minutes of a 2-core CPU for no gain): three
        # vmapped seeds ended at -150, -160, -176 (docs/defaults.md).
        "classic_continuous": {"agent": {"hidden_sizes": (64, 64)}, "total_timesteps": 100_000},
        # Stock trading (podracer.trading.environment): 512 steps per update and 32 gradient
        # steps of 256 on 128-128 networks, so that 1e6 steps train in minutes on a CPU. Measured on
        # trading:synthetic with a planted signal: test-period Sharpe 4.6 against equal
        # weight's 1.7 after 1.5e5 steps, 3.1K steps/s on 2 CPU cores (docs/trading.md).
        "trading": {
            "agent": {"hidden_sizes": (128, 128), "replay_ratio": 0.0625, "batch_size": 256},
            "loop": {"envs": 64, "rollout_len": 8},
        },
    },
)
