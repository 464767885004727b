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

from podracer.agents.policy import (
    EpsilonGreedy,
    QNetworkFields,
    epsilon_at,
    epsilon_greedy_act,
    init_params,
    recurrent_net,
    select,
)
from podracer.agents.spec import AgentSpec, Space, num_actions
from podracer.core import memory
from podracer.core.learner.buffers import ReplayFields
from podracer.core.learner.replay import (
    NStepItem,
    Replay,
    ReplayBatch,
    n_step_items,
    n_step_targets,
)
from podracer.errors import ConfigError
from podracer.types import ActionSpec, Agent, LossOutput, Trajectory
from podracer.util.validation import check_fraction, check_non_negative, check_positive, check_range


@dataclasses.dataclass(frozen=True)
class DQNConfig(ReplayFields, QNetworkFields):
    """DQN hyper-parameters and its replay's (defaults: tuned here on CartPole, 1e5 steps:
    lr 1e-3, batch 128, 3-step double-Q targets, a target network copied every 4 updates,
    epsilon 1 -> 0.01 over the first 30% of the run, and a Huber loss whose linear part starts
    at 100: with delta 1, the usual Atari value, Q-learning on CartPole's returns of up to 100
    did not learn, measured; they reach 500 within 1e5 steps but end 5e5 at 317-423, so the
    command line applies the ``classic_control`` preset on CartPole, Acrobot and MountainCar:
    PureJaxRL's rates and a 100,000-transition buffer, 485-500 at 5e5, docs/agents.md)."""

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
    burn_in: int = 8
    """With memory: steps at the start of each sampled sequence that only warm up the carry
    (no gradient), for the online and the target network alike (R2D2)."""
    sequence_length: int = 16
    """With memory: steps of each sampled sequence the loss trains on, after the burn-in; a
    gradient step takes batch_size // sequence_length sequences (batch_size still counts
    transitions)."""
    sequence_period: int = 0
    """With memory: sampled sequences start every this many steps of an environment's stream
    (0: half of burn_in + sequence_length, R2D2's overlap)."""
    priority_eta: float = 0.9
    """With memory and prioritised replay: a sequence's priority is eta times the largest
    absolute TD error over its trained steps plus (1 - eta) times their mean (R2D2)."""

    def __post_init__(self):
        check_positive(self, "lr", "n_step", "target_period", "sequence_length")
        check_fraction(self, "gamma")
        check_range(self, "tau", 0.0, 1.0, low_open=True)
        check_range(self, "huber_delta", 0.0, None, low_open=True)
        check_fraction(self, "epsilon_start", "epsilon_finish", "epsilon_decay")
        check_non_negative(self, "max_grad_norm")
        check_range(self, "burn_in", 0, None)
        check_range(self, "sequence_period", 0, None)
        check_fraction(self, "priority_eta")
        self.check_network()
        self.check_replay()
        if self.memory != "none" and self.batch_size < self.sequence_length:
            raise ConfigError(
                f"DQNConfig.batch_size={self.batch_size} is not allowed with memory and "
                f"sequence_length={self.sequence_length}: a gradient step takes "
                "batch_size // sequence_length sequences, so it must be >= sequence_length"
            )

    @property
    def window(self) -> int:
        """Steps of a sampled sequence (with memory): the burn-in and the trained steps."""
        return self.burn_in + self.sequence_length

    @property
    def period(self) -> int:
        """Steps between the starts of two sampled sequences of one environment."""
        return self.sequence_period or max(1, self.window // 2)


class DQNState(NamedTuple):
    """DQN's own slot: the target network and the updates done."""

    target_params: Any
    updates: jax.Array  # i32 []


class SequenceStep(NamedTuple):
    """One step of one environment as DQN with memory stores it (its replay's windows are
    ``burn_in + sequence_length`` of them)."""

    obs: jax.Array  # [...]
    action: jax.Array  # i32 []
    reward: jax.Array  # f32 []
    terminated: jax.Array  # bool []
    truncated: jax.Array  # bool []
    bootstrap_obs: jax.Array  # [...]
    actor_state: Any  # the carry act was given at this step (a window's first is its start)


def make_agent(config: DQNConfig, action_spec: ActionSpec | int, num_updates: int = 1):
    """DQN as an :class:`~podracer.types.Agent` (with its replay added by the spec's build)."""
    actions = num_actions(action_spec, "dqn")
    network = config.q_network(actions, dueling=config.dueling)
    if config.memory != "none":
        return make_recurrent(config, network, actions, num_updates)

    def init(key, example_obs):
        return network.init(key, jax.tree.map(lambda x: x[None], example_obs))

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
        init_state=init_target,
        update_state=target_update(config),
        actor_params=exploration(config, num_updates),
        replay=Replay(config, item),
    )


def init_target(key, params) -> DQNState:
    """``init_state``: the target network starts as the params."""
    del key
    return DQNState(params, jnp.zeros((), jnp.int32))


def exploration(config: DQNConfig, num_updates: int):
    """``actor_params``: the params and the exploration rate of the updates done."""

    def actor_params(params, state: DQNState):
        return EpsilonGreedy(params, epsilon_at(config, state.updates, num_updates))

    return actor_params


def target_update(config: DQNConfig):
    """``update_state``: the target network follows the params every ``target_period``
    updates, by ``tau``."""

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

    return update_state


def make_sequence_loss(config: DQNConfig, net):
    """R2D2's ``loss(params, batch: ReplayBatch, key) -> (loss, LossOutput)`` on sampled windows
    of :class:`SequenceStep` s (see :func:`make_recurrent`): each window re-run from its stored
    first carry by the online and the target network, the n-step double-Q Huber loss on the
    ``sequence_length`` steps after the burn-in, the priority
    ``eta max_t |delta_t| + (1 - eta) mean_t |delta_t|``."""
    burn_in = config.burn_in

    def q_values(params, steps: SequenceStep, seqs: memory.Sequences):
        """``(q [b, K, A], q of every bootstrap_obs [b, K, A])`` on the trained steps: one
        re-run of the whole window, no gradient crossing the carry into the burn-in."""
        cuts = jnp.zeros_like(seqs.starts).at[:, burn_in].set(burn_in > 0)
        carries, q = memory.unroll_batch(net, params, seqs, steps.obs, cuts)
        trained = jax.tree.map(
            lambda x: x[:, burn_in:], (carries, q, steps.bootstrap_obs, steps.truncated)
        )
        carries, q, bootstrap_obs, truncated = trained
        boot = memory.bootstrap_outputs(
            net, params, carries, bootstrap_obs, q, truncated, time_axis=1
        )
        return q, boot

    def loss(params, batch: ReplayBatch, key):
        del key
        steps: SequenceStep = batch.items  # [b, burn_in + K]
        starts = memory.episode_starts(steps.terminated.T, steps.truncated.T).T
        seqs = memory.Sequences(
            jax.tree.map(lambda x: x[:, 0], steps.actor_state), starts.at[:, 0].set(False)
        )
        q, q_boot = q_values(params, steps, seqs)
        _, q_boot_target = q_values(batch.agent_state.target_params, steps, seqs)
        q_boot_target = jax.lax.stop_gradient(q_boot_target)
        trained = jax.tree.map(lambda x: x[:, burn_in:], steps)
        ret, discount, last = n_step_targets(
            Trajectory(
                obs=None,
                reward=trained.reward.T,
                terminated=trained.terminated.T,
                truncated=trained.truncated.T,
                bootstrap_obs=None,
                behaviour=None,
            ),
            config.gamma,
            config.n_step,
        )
        ret, discount, last = ret.T, discount.T, last.T  # [b, K]
        rows = jnp.arange(last.shape[0])[:, None]
        chooser = q_boot if config.double_q else q_boot_target
        best = jnp.argmax(jax.lax.stop_gradient(chooser[rows, last]), axis=-1)
        bootstrap = select(q_boot_target[rows, last], best)
        target = jax.lax.stop_gradient(ret + discount * bootstrap)
        q_taken = select(q, trained.action)
        td = q_taken - target  # [b, K]
        per_sequence = jnp.mean(optax.huber_loss(td, delta=config.huber_delta), axis=1)
        total = jnp.mean(batch.weights * per_sequence)
        eta = config.priority_eta
        priority = eta * jnp.max(jnp.abs(td), axis=1) + (1.0 - eta) * jnp.mean(jnp.abs(td), 1)
        return total, LossOutput({"loss": total, "mean_q": jnp.mean(q_taken)}, priority)

    return loss


def make_recurrent(config: DQNConfig, network, actions: int, num_updates: int) -> Agent:
    """DQN with memory, after R2D2 (Kapturowski et al., 2019,
    https://openreview.net/forum?id=r1lyTjAqYX): the replay keeps each environment's stream of
    steps with the carry act was given (windows of ``burn_in + sequence_length`` steps starting
    every ``period``, which may span rollouts: :class:`podracer.core.learner.replay.Replay`).
    The loss (:func:`make_sequence_loss`) re-runs each sampled window from its stored first
    carry: the first ``burn_in`` steps only warm the carry up (no gradient reaches them), for
    the online and the target network alike; on the next ``sequence_length`` steps, the n-step
    double-Q loss of :func:`make_agent`, its targets cut at episode ends and at the window's
    end (:func:`podracer.core.learner.replay.n_step_targets`), each bootstrap observation
    valued from the carry after its own step. A sequence's priority is
    ``eta max_t |delta_t| + (1 - eta) mean_t |delta_t|``."""
    net = recurrent_net(config, network)
    length = config.sequence_length

    def init(key, example_obs):
        return init_params(config, network, key, example_obs)

    def prepare(params, state, traj: Trajectory, mean_fn):
        del params, state, mean_fn
        return SequenceStep(
            traj.obs,
            traj.action,
            traj.reward,
            traj.terminated,
            traj.truncated,
            traj.bootstrap_obs,
            traj.actor_state,
        )

    def item(obs):
        carry = jax.eval_shape(lambda: net.initial(1))
        return SequenceStep(
            obs=obs,
            action=jax.ShapeDtypeStruct((), jnp.int32),
            reward=jax.ShapeDtypeStruct((), jnp.float32),
            terminated=jax.ShapeDtypeStruct((), jnp.bool_),
            truncated=jax.ShapeDtypeStruct((), jnp.bool_),
            bootstrap_obs=obs,
            actor_state=jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype), carry),
        )

    replay = Replay(
        config,
        item,
        window=config.window,
        period=config.period,
        batch_size=config.batch_size // length,
    )
    return Agent(
        init=init,
        act=epsilon_greedy_act(network, actions, net),
        prepare=prepare,
        loss=make_sequence_loss(config, net),
        initial_actor_state=net.initial,
        init_state=init_target,
        update_state=target_update(config),
        actor_params=exploration(config, num_updates),
        replay=replay,
    )


SPEC = AgentSpec(
    name="dqn",
    config_cls=DQNConfig,
    make_agent=make_agent,
    default_env="gymnax:CartPole-v1",
    loop_defaults={"envs": 16, "rollout_len": 8},
    search_space={
        "lr": Space(1e-6, 1e-1, log=True),
        "gamma": Space(0.8, 0.9999),
        "tau": Space(1e-3, 1.0, log=True),
        "epsilon_finish": Space(0.0, 0.5),
        "epsilon_decay": Space(0.05, 1.0),
    },
    presets={
        # PureJaxRL's DQN on CartPole-v1 (purejaxrl/dqn.py, CleanRL's classic-control
        # settings) for the rates: lr 2.5e-4, one gradient step per 10 environment steps,
        # learning after 10,000 steps, epsilon 1 -> 0.05 over the first half of the run (its
        # target copy every 500 steps is the default's 4 updates of 16 x 8 steps, 52 gradient
        # steps here, 50 there). A buffer of 100,000 (PureJaxRL: 10,000): with 10,000 or
        # 50,000 the failures leave the buffer once every episode lasts 500 steps, and the
        # policy forgets how to avoid them. The double-Q 3-step targets stay (PureJaxRL's
        # one-step Q-learning: 384, 495, 330 here; this preset 485, 500, 485; the defaults
        # alone 373, 317, 423: gymnax:CartPole-v1, 5e5 steps, seeds 0-2, docs/agents.md).
        # The target copy every 16 updates (2,048 environment steps, 205 gradient steps) and
        # the default's final epsilon of 0.01: with a copy every 4 updates and epsilon 0.05 the
        # preset reached 490, 498 and 462 on one machine and 485, 500, 485 on another (a late
        # forgetting that the end of a run may or may not catch); two runs of three vmapped
        # seeds gave 201, 498, 495 / 488, 421, 500 that way, 500, 495, 500 / 477, 474, 500 with
        # the copy every 16 updates, and 500 for all six with epsilon 0.01 as well
        # (docs/agents.md; docs/defaults.md, three separate runs of each loop).
        "classic_control": {
            "agent": {
                "target_period": 16,
                "lr": 2.5e-4,
                "buffer_size": 100_000,
                "learning_starts": 10_000,
                "replay_ratio": 0.1,
                "epsilon_decay": 0.5,
            },
        },
        # Jumanji's Snake (jumanji:Snake-v1; the family "snake": PPO's snake preset says why it
        # is one and what podracer/loops/presets.py needs for it): the grid through the MinAtar CNN
        # ([H, W, C]) as Jumanji's Snake network does, the unscaled step count (0 to 4,000)
        # through the 128-128 MLP with tanh, where it saturates (with relu it grows with the
        # step count into every q-value: 7.5 fruits an episode against tanh's 10.4 at 3e5
        # steps, the random legal policy 5.9). One gradient step of 128 per 16 environment
        # steps (replay ratio 1/16, the default's quarter: the CNN's gradient steps cost far
        # more than Snake's steps; about 700 steps/s on 2 busy cores), learning after 10,000
        # steps, epsilon 1 -> 0.05 (the classic_control preset's floor) over the first 30%.
        # At 3e5 steps its epsilon-greedy policy (0.05) eats 10.4 against the random legal
        # policy's 5.9, its greedy one 1.6 (benchmarks/README.md, "JAX suites: learning").
        "snake": {
            "agent": {
                "leaf_torsos": ("grid=minatar_cnn",),
                "channels_first": False,
                "activation": "tanh",
                "replay_ratio": 0.0625,
                "learning_starts": 10_000,
                "epsilon_finish": 0.05,
            },
        },
    },
)
