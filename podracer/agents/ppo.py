"""PPO: clipped surrogate objective, (clipped) value loss, entropy bonus.

Schulman et al., 2017, https://arxiv.org/abs/1707.06347; defaults and details follow
Huang et al., 2022, "The 37 implementation details of PPO" (CartPole configuration).
Advantages are GAE over the whole trajectory (:func:`podracer.core.gae`), with the values of
``obs`` and of ``bootstrap_obs`` (:func:`podracer.core.returns.bootstrap_values`) both from the
params being learnt (the actors' params may lag them: Sebulba; where they do not, in Anakin, and
the torso is shared, the actors' values of ``obs`` are those values and are reused:
``Agent.prepare_no_lag``),
normalised with the statistics of the *whole* batch across devices, so an update does not
depend on how the batch is split over devices or minibatches.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
import rlax

from podracer.agents.optim import clipped_adam
from podracer.agents.policy import (
    ActorCriticFields,
    SequenceFields,
    learning_rate,
    make_act,
    policy_head,
    recurrent_net,
)
from podracer.agents.spec import AgentSpec, Space
from podracer.core import memory
from podracer.core.normalisation import NormalisationFields
from podracer.core.returns import bootstrap_values, gae
from podracer.networks import ActorCritic
from podracer.types import ActionSpec, Agent, Trajectory
from podracer.util.validation import check_fraction, check_non_negative, check_positive, check_range


@dataclasses.dataclass(frozen=True)
class PPOConfig(ActorCriticFields, NormalisationFields, SequenceFields):
    """PPO hyper-parameters (and the actor-critic's network fields)."""

    lr: float = 2.5e-4
    """Adam learning rate (initial value when annealed)."""
    anneal_lr: bool = True
    """Anneal the learning rate linearly to 0 over the run."""
    num_epochs: int = 4
    """SGD passes over each batch."""
    num_minibatches: int = 4
    """Minibatches per pass; must divide the number of transitions per device."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE trace parameter."""
    clip_eps: float = 0.2
    """Clipping range of the probability ratio (and of the value change)."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Global gradient norm clip (0 disables it)."""
    clip_value: bool = True
    """Clip the value loss as in the reference PPO implementations."""
    normalize_advantages: bool = True
    """Normalise advantages by the whole batch's mean and standard deviation."""

    def __post_init__(self):
        check_positive(self, "lr", "num_epochs", "num_minibatches")
        check_fraction(self, "gamma", "gae_lambda")
        check_range(self, "clip_eps", 0.0, None, low_open=True)
        check_non_negative(self, "ent_coef", "vf_coef", "max_grad_norm")
        self.check_network()
        self.check_normalisation()
        self.check_sequences()


class PPOBatch(NamedTuple):
    """One sample per transition, ``[N]`` with ``N = T * B`` (``obs [N, ...]``)."""

    obs: jax.Array
    action: jax.Array  # what the log-probability is of (PolicyHead.taken): i32, or f32 [N, ...]
    log_prob: jax.Array  # behaviour log-probability
    value: jax.Array  # v(obs) of the params before this update (the value clipping's centre)
    advantage: jax.Array  # normalised when asked
    target: jax.Array  # lambda-return, the value target


class SequenceBatch(NamedTuple):
    """With memory: one sample per window of one environment's steps, ``[N, W]``."""

    steps: PPOBatch  # [N, W, ...]
    sequences: memory.Sequences  # each window's first carry [N, ...] and episode starts [N, W]


def make_agent(config: PPOConfig, action_spec: ActionSpec | int, num_updates: int = 1) -> Agent:
    """PPO as an :class:`~podracer.types.Agent` for a discrete ``action_spec`` (a categorical
    policy) or a bounded continuous one (a diagonal Gaussian, clipped to the bounds:
    :func:`podracer.agents.policy.gaussian_head`); with ``config.memory``, a recurrent one
    (:func:`make_recurrent`)."""
    del num_updates  # no schedule over the run
    network = config.network(action_spec, "ppo")
    head = policy_head(action_spec, "ppo")
    if config.memory != "none":
        return make_recurrent(config, network, head)
    init = config.init_network(network)
    act = make_act(network, head)

    def values(params, obs):
        """``v(obs) [T, B]`` of ``obs [T, B, ...]`` in one pass over ``T * B``."""
        num_steps, num_envs = jax.tree.leaves(obs)[0].shape[:2]
        flat = jax.tree.map(lambda x: x.reshape(num_steps * num_envs, *x.shape[2:]), obs)
        return network.apply(params, flat, method=ActorCritic.value).reshape(num_steps, num_envs)

    def prepare(params, agent_state, traj: Trajectory, mean_fn):
        # Both values from the params being learnt: with the actors' values for v_tm1, GAE
        # would add sum_k (gamma lambda)^k (V_new - V_old) wherever the actors lag.
        return batch_of(params, traj, values(params, traj.obs), mean_fn)

    def prepare_no_lag(params, agent_state, traj: Trajectory, mean_fn):
        # The actors acted with these very params: their values are v(obs) already, and the
        # pass over the [T, B] trajectory is not made again.
        return batch_of(params, traj, traj.behaviour.value, mean_fn)

    # Reused only where the actors' value costs them nothing but the value head: with one
    # torso for both. With a critic torso of its own, the actors would run it at every step
    # (XLA drops it from the rollout when nothing reads their value), T small passes where
    # prepare makes one; on a CPU that is slower (4 CartPole envs: 9.24 ms an update against
    # 8.91), while with a shared torso it saves a pass of the torso (MinAtar Breakout, shared
    # MinAtar CNN, 16 envs: 700 ms against 733): benchmarks/README.md, "Against PureJaxRL".

    def batch_of(params, traj: Trajectory, v_tm1, mean_fn):
        num_steps, num_envs = traj.reward.shape
        # The bootstrap values reuse v_tm1 inside episodes (one pass over the batch, not two).
        v_t = bootstrap_values(
            functools.partial(network.apply, method=ActorCritic.value),
            params,
            v_tm1,
            traj.bootstrap_obs,
            traj.truncated,
        )
        batch = targets(config, head, traj, v_tm1, v_t, mean_fn)
        return jax.tree.map(lambda x: x.reshape(num_steps * num_envs, *x.shape[2:]), batch)

    def loss(params, batch: PPOBatch, key):
        del key
        policy, value = network.apply(params, batch.obs)
        return objective(config, head, policy, value, batch)

    return Agent(
        init=init,
        act=act,
        prepare=prepare,
        loss=loss,
        greedy=head.greedy,
        prepare_no_lag=prepare_no_lag if config.shared_torso else None,
    )


def targets(config: PPOConfig, head, traj: Trajectory, v_tm1, v_t, mean_fn) -> PPOBatch:
    """The samples of a trajectory ``[T, B]``: GAE of its rewards with ``v_tm1``, the values of
    its ``obs``, and ``v_t``, those of its ``bootstrap_obs``; the advantages normalised over the
    whole batch when asked."""
    advantage = gae(
        traj.reward, v_tm1, v_t, traj.terminated, traj.truncated, config.gamma, config.gae_lambda
    )
    target = advantage + v_tm1
    if config.normalize_advantages:
        mean = mean_fn(advantage)
        std = jnp.sqrt(mean_fn(jnp.square(advantage - mean)))
        advantage = (advantage - mean) / (std + 1e-8)
    return PPOBatch(
        obs=traj.obs,
        action=head.taken(traj.behaviour),
        log_prob=traj.behaviour.log_prob,
        value=v_tm1,
        advantage=advantage,
        target=target,
    )


def objective(config: PPOConfig, head, policy, value, batch: PPOBatch):
    """The clipped surrogate objective, the (clipped) value loss and the entropy bonus of the
    network's outputs ``policy``, ``value [N]`` on the samples of ``batch [N]``."""
    log_prob, entropy = head.log_prob_and_entropy(policy, batch.action)
    log_ratio = log_prob - batch.log_prob
    ratio = jnp.exp(log_ratio)
    pg_loss = rlax.clipped_surrogate_pg_loss(ratio, batch.advantage, config.clip_eps)

    value_error = jnp.square(value - batch.target)
    if config.clip_value:
        clipped = batch.value + jnp.clip(value - batch.value, -config.clip_eps, config.clip_eps)
        value_error = jnp.maximum(value_error, jnp.square(clipped - batch.target))
    value_loss = 0.5 * jnp.mean(value_error)

    entropy = jnp.mean(entropy)
    total = pg_loss + config.vf_coef * value_loss - config.ent_coef * entropy
    metrics = {
        "loss": total,
        "pg_loss": pg_loss,
        "value_loss": value_loss,
        "entropy": entropy,
        "approx_kl": jnp.mean((ratio - 1.0) - log_ratio),
        "clip_fraction": jnp.mean(jnp.abs(ratio - 1.0) > config.clip_eps),
    }
    return total, metrics


def make_recurrent(config: PPOConfig, network, head) -> Agent:
    """PPO with memory: the actors carry the cell's state (reset where an episode starts); the
    learner re-runs every environment's rollout from the carry recorded at its first step, with
    the params being learnt, for the values of GAE (the truncated and last steps bootstrap from
    the carry before the reset: :func:`podracer.core.memory.bootstrap_outputs`), then cuts it
    into windows of ``sequence_window`` steps, each with the carry recorded at its first step;
    minibatches are whole windows, and the loss re-runs each one."""
    net = recurrent_net(config, network)
    init = config.init_network(network)

    def prepare(params, agent_state, traj: Trajectory, mean_fn):
        del agent_state
        starts = memory.episode_starts(traj.terminated, traj.truncated)
        first = jax.tree.map(lambda x: x[0], traj.actor_state)
        carries, outputs = memory.unroll(net, params, first, traj.obs, starts)
        _, v_t = memory.bootstrap_outputs(
            net, params, carries, traj.bootstrap_obs, outputs, traj.truncated
        )
        v_tm1 = outputs[1]
        steps = targets(config, head, traj, v_tm1, v_t, mean_fn)
        window = config.window(*traj.reward.shape)
        return SequenceBatch(memory.windows(steps, window), memory.sequences(traj, window))

    def loss(params, batch: SequenceBatch, key):
        del key
        _, (policy, value) = memory.unroll_batch(net, params, batch.sequences, batch.steps.obs)

        def flat(tree):
            return jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), tree)

        return objective(config, head, flat(policy), flat(value), flat(batch.steps))

    return Agent(
        init=init,
        act=make_act(network, head, net),
        prepare=prepare,
        loss=loss,
        greedy=head.greedy,
        initial_actor_state=net.initial,
    )


def make_optimizer(config: PPOConfig, num_updates: int) -> optax.GradientTransformation:
    """Adam (eps 1e-5) after global-norm clipping; lr linearly annealed to 0 over the run."""
    return clipped_adam(learning_rate(config, num_updates), config.max_grad_norm, eps=1e-5)


SPEC = AgentSpec(
    name="ppo",
    config_cls=PPOConfig,
    make_agent=make_agent,
    make_optimizer=make_optimizer,
    default_env="gymnax:CartPole-v1",
    presets={
        # Sebulba on discrete classic control: its actors act with params a step or two old,
        # and with the default learning rate (2.5e-4 annealed over 5e5 steps) seed 0 reached
        # 392, 235 and 270 on envpool:CartPole-v1 (seeds 1-5: 490-499). lr 1e-3 over 8e5
        # steps reached 500 on each of seeds 0-9 and twice more on seed 0
        # (tests/test_sebulba_learning.py; docs/defaults.md). Anakin's defaults pass as they are.
        "classic_control": {"sebulba": {"agent": {"lr": 1e-3}, "total_timesteps": 800_000}},
        # Tuned here on gymnax:Pendulum-v1 (about -180 after 3e5 steps, seeds 0-3).
        "classic_continuous": {
            "agent": {
                "lr": 1e-3,
                "num_epochs": 10,
                "num_minibatches": 32,
                "gamma": 0.95,
                "ent_coef": 0.0,
                "normalize_observations": True,
                "normalize_rewards": True,
            },
            "loop": {"envs": 16, "rollout_len": 128},
        },
        # CleanRL's continuous PPO (ppo_continuous_action.py): 2048 steps per update in 32
        # minibatches, 10 epochs, no entropy bonus, observations and rewards normalised.
        "mujoco": {
            "agent": {
                "lr": 3e-4,
                "num_epochs": 10,
                "num_minibatches": 32,
                "ent_coef": 0.0,
                "normalize_observations": True,
                "normalize_rewards": True,
            },
            "loop": {"envs": 8, "rollout_len": 256},
        },
        # Stock trading (podracer.trading.environment): 2048 steps per update, observations (prices,
        # positions, indicators) and rewards (changes of value) normalised. Tuned here on
        # trading:synthetic with a planted signal: test-period Sharpe 4.0 against equal
        # weight's 1.7 after 1.5e5 steps (tests/test_trading_learning.py).
        "trading": {
            "agent": {
                "num_epochs": 10,
                "num_minibatches": 32,
                "ent_coef": 0.0,
                "normalize_observations": True,
                "normalize_rewards": True,
            },
            "loop": {"envs": 32, "rollout_len": 64},
        },
        # Brax's PPO for locomotion, sized down: 4096 steps per update.
        "brax": {
            "agent": {
                "lr": 3e-4,
                "num_epochs": 4,
                "num_minibatches": 16,
                "gamma": 0.97,
                "ent_coef": 1e-3,
                "normalize_observations": True,
                "normalize_rewards": True,
            },
            "anakin": {"envs": 128, "rollout_len": 32},  # sized for Brax on Anakin
        },
        # MuJoCo Playground (its DM Control Suite and locomotion on MJX): Playground's own PPO
        # for the Control Suite (mujoco_playground/config/dm_control_suite_params.py: lr 1e-3,
        # discount 0.995, entropy 0.01, observations normalised, rewards scaled), its 2,048
        # environments and 16 epochs of 32 minibatches cut to 64 environments x 32 steps and 4
        # epochs of 8 for a CPU. Seed 0 on 2 cores: playground:CartpoleBalance returns 996 (of
        # 1,000) after 1e6 steps, trained in 20 s after 20 s of compiling.
        "playground": {
            "agent": {
                "lr": 1e-3,
                "gamma": 0.995,
                "ent_coef": 0.01,
                "num_epochs": 4,
                "num_minibatches": 8,
                "normalize_observations": True,
                "normalize_rewards": True,
            },
            "loop": {"envs": 64, "rollout_len": 32},
        },
        # The Craftax paper's PPO baseline (Matthews et al., 2024: lr 2e-4, GAE lambda 0.8,
        # 4 epochs of 8 minibatches, entropy 0.01, gradients clipped at 1, 64-step rollouts),
        # its 1,024 environments cut to 64 so that a CPU run of 1e6 steps makes 244 updates
        # (give --arch.num-envs 1024 on an accelerator), its three layers of 512 to two of 256.
        "craftax": {
            "agent": {
                "lr": 2e-4,
                "gae_lambda": 0.8,
                "num_epochs": 4,
                "num_minibatches": 8,
                "ent_coef": 0.01,
                "max_grad_norm": 1.0,
                "hidden_sizes": (256, 256),
            },
            "loop": {"envs": 64, "rollout_len": 64},
        },
        # Jumanji's Snake (jumanji:Snake-v1): the family "snake", jumanji:Snake-*, which comes
        # before "jumanji" in the jumanji: row of podracer/envs/registry.py. Not the jumanji
        # family's: the "grid" entry is Snake's, and the family's other games fail with this
        # network. The grid [12, 12, 5] goes through the MinAtar CNN ([H, W, C]), as Jumanji's
        # own Snake network is a small CNN over
        # the grid (jumanji/training/networks/snake/actor_critic.py); the step count (0 to 4,000,
        # unscaled: normalize_observations takes no dicts) goes through the 64-64 tanh MLP, where it
        # saturates. A flat MLP over both learnt nothing: 6.1 fruits an episode against the random
        # legal policy's 6.0 at 5e5 steps (relu 256-256; the default tanh 64-64 at 2e5: 1.1). lr
        # 1e-3 and gamma 0.99 instead of Jumanji's A2C rates (3e-4, 0.997;
        # jumanji/training/configs/env/snake.yaml): on a 6x6 Snake with a 200-step limit they gave
        # 11.2 fruits after 6e4 steps against 5.1 (random: 3.6). 16 envs x 64 steps, 8 minibatches.
        # At 5e5 steps its stochastic policy eats 16.2 against the random legal policy's 6.1
        # (benchmarks/README.md, "JAX suites: learning"); its greedy one circles (with the mask it
        # cannot die) and eats 2.5.
        "snake": {
            "agent": {
                "lr": 1e-3,
                "gamma": 0.99,
                "num_minibatches": 8,
                "leaf_torsos": ("grid=minatar_cnn",),
                "channels_first": False,
            },
            "loop": {"envs": 16, "rollout_len": 64},
        },
    },
    search_space={
        "lr": Space(1e-6, 1e-1, log=True),
        "gamma": Space(0.8, 0.9999),
        "gae_lambda": Space(0.5, 1.0),
        "clip_eps": Space(0.02, 0.5),
        "ent_coef": Space(0.0, 0.2),
        "vf_coef": Space(0.05, 2.0, log=True),
        "init_log_std": Space(-3.0, 1.0),
    },
)
