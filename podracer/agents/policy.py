"""Pieces shared by the agents: the networks' config fields (actor-critic and Q), the policy heads
(categorical for discrete actions, diagonal Gaussian for continuous ones), ``act``, and the
learning-rate schedule."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from podracer.agents.spec import num_actions
from podracer.core import memory as memory_lib
from podracer.errors import ConfigError
from podracer.networks import (
    ACTIVATIONS,
    ILLEGAL,
    MEMORIES,
    TORSOS,
    ActorCritic,
    QNetwork,
    RecurrentActorCritic,
    RecurrentQNetwork,
    legal_actions,
)
from podracer.types import (
    ActionSpec,
    ActorOutput,
    BoundedActionSpec,
    DiscreteActionSpec,
    split_action_mask,
)
from podracer.util.validation import check_choice, check_layer_sizes, check_positive


@dataclasses.dataclass(frozen=True)
class TorsoFields:
    """The torso fields every agent's network reads (:func:`podracer.networks.make_torso`);
    :class:`ActorCriticFields` and :class:`QNetworkFields` add their own and their defaults."""

    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of the MLP torso(s) (unused by the convolutional torsos)."""
    activation: str = "tanh"
    """Activation of the MLP torso: one of tanh, relu, gelu, silu."""
    torso: str = "mlp"
    """Torso of the network: one of mlp, minatar_cnn, nature_cnn, impala_resnet."""
    channels_first: bool = True
    """Image observations are [C, H, W] (envpool's Atari layout) rather than [H, W, C]
    (gymnax's MinAtar layout)."""
    memory: str = "none"
    """A recurrent cell after the torso: one of none, gru, lstm (docs/memory.md). Its carry is
    the actors' actor state, reset where an episode starts; the learner re-runs each sequence
    from the carry recorded at its start."""
    memory_size: int = 128
    """Features of the recurrent cell (with memory)."""
    leaf_torsos: tuple[str, ...] = ()
    """For dict observations: a torso per entry, as KEY=TORSO (grid=minatar_cnn); the entries
    not named are flattened, concatenated and go through the MLP. Empty (the default): every
    entry is flattened into the MLP."""

    def check_network(self) -> None:
        """Validates the network fields (call it from ``__post_init__``)."""
        check_layer_sizes(self, "hidden_sizes")
        check_choice(self, "activation", tuple(ACTIVATIONS))
        check_choice(self, "torso", TORSOS)
        self.leaf_torso_pairs()
        check_choice(self, "memory", MEMORIES)
        check_positive(self, "memory_size")
        if getattr(self, "layer_norm", False) and self.torso == "impala_resnet":
            raise ConfigError(
                f"{type(self).__name__}.layer_norm=True is not allowed with "
                "torso='impala_resnet', which has no LayerNorm: turn layer_norm off or choose "
                "one of mlp, minatar_cnn, nature_cnn"
            )

    def leaf_torso_pairs(self) -> tuple[tuple[str, str], ...]:
        """``leaf_torsos`` as (key, torso) pairs; a :class:`ConfigError` names an entry that is
        not KEY=TORSO with a known torso, or a key given twice."""
        pairs = []
        for entry in self.leaf_torsos:
            key, sep, torso = str(entry).partition("=")
            if not sep or not key or torso not in TORSOS:
                raise ConfigError(
                    f"{type(self).__name__}.leaf_torsos entry {entry!r} is not allowed: give "
                    f"KEY=TORSO, a dict observation's key and one of {', '.join(TORSOS)}"
                )
            pairs.append((key, torso))
        keys = [key for key, _ in pairs]
        if len(set(keys)) < len(keys):
            raise ConfigError(
                f"{type(self).__name__}.leaf_torsos={self.leaf_torsos} names a key twice"
            )
        return tuple(pairs)


@dataclasses.dataclass(frozen=True)
class ActorCriticFields(TorsoFields):
    """The network fields of the actor-critic agents (PPO, IMPALA): a config inherits them."""

    shared_torso: bool = False
    """One torso for actor and critic instead of one each (use it with the image torsos); with
    memory the torso and the cell are always shared."""
    init_log_std: float = 0.0
    """Initial log standard deviation of the Gaussian policy (continuous actions only)."""
    state_dependent_std: bool = False
    """The Gaussian's log standard deviation a head of the actor's torso instead of one free
    parameter per action dimension (continuous actions only)."""

    def network(
        self, action_spec: ActionSpec | int, agent: str
    ) -> ActorCritic | RecurrentActorCritic:
        """The :class:`~podracer.networks.ActorCritic` these fields describe, for a discrete
        or a bounded continuous ``action_spec``; with ``memory``, the
        :class:`~podracer.networks.RecurrentActorCritic` (one torso and the cell shared by
        actor and critic)."""
        continuous = isinstance(action_spec, BoundedActionSpec)
        common = dict(
            num_actions=action_size(action_spec) if continuous else num_actions(action_spec, agent),
            hidden_sizes=tuple(self.hidden_sizes),
            activation=self.activation,
            torso=self.torso,
            channels_first=self.channels_first,
            continuous=continuous,
            state_dependent_std=self.state_dependent_std,
            leaf_torsos=self.leaf_torso_pairs(),
        )
        if self.memory != "none":
            return RecurrentActorCritic(**common, memory=self.memory, memory_size=self.memory_size)
        return ActorCritic(**common, shared_torso=self.shared_torso)

    def init_network(self, network: ActorCritic) -> Callable[[jax.Array, jax.Array], Any]:
        """``init(key, example_obs) -> params`` of ``network`` with the Gaussian's free log
        standard deviation (or its head's bias) starting at ``init_log_std``, which may be a
        traced value (a population's members start at different ones)."""

        def init(key, example_obs):
            params = init_params(self, network, key, example_obs)
            if not network.continuous:
                return params
            inner = dict(params["params"])
            if network.state_dependent_std:
                head = dict(inner["log_std_head"])
                head["bias"] = head["bias"] + jnp.asarray(self.init_log_std, jnp.float32)
                inner["log_std_head"] = head
            else:
                inner["log_std"] = inner["log_std"] + jnp.asarray(self.init_log_std, jnp.float32)
            return {**params, "params": inner}

        return init


@dataclasses.dataclass(frozen=True)
class QNetworkFields(TorsoFields):
    """The network fields of the value-based agents (DQN, PQN, Q(lambda)): a config inherits
    them (and may redeclare a default)."""

    hidden_sizes: tuple[int, ...] = (128, 128)
    """Hidden layer sizes of the Q-network's MLP torso (unused by the convolutional torsos)."""
    activation: str = "relu"
    """Activation of the MLP torso: one of tanh, relu, gelu, silu."""

    def q_network(self, actions: int, *, layer_norm: bool = False, dueling: bool = False):
        """The :class:`~podracer.networks.QNetwork` these fields describe (with ``memory``,
        the :class:`~podracer.networks.RecurrentQNetwork`)."""
        common = dict(
            num_actions=actions,
            hidden_sizes=tuple(self.hidden_sizes),
            activation=self.activation,
            layer_norm=layer_norm,
            torso=self.torso,
            channels_first=self.channels_first,
            dueling=dueling,
            leaf_torsos=self.leaf_torso_pairs(),
        )
        if self.memory != "none":
            return RecurrentQNetwork(**common, memory=self.memory, memory_size=self.memory_size)
        return QNetwork(**common)


@dataclasses.dataclass(frozen=True)
class SequenceFields:
    """The sequence field of an on-policy agent that may have memory (a config inherits it)."""

    sequence_window: int = 0
    """With memory: steps per sequence the learner re-runs, each from the carry acting
    recorded at its first step (0: the whole rollout, or where a device holds too few
    environments for num_minibatches, the longest window that splits into them, which the
    plan prints; else a divisor of the rollout length). Minibatches are whole sequences, in
    time order."""

    def check_sequences(self) -> None:
        """Validates the field (call it from ``__post_init__``)."""
        if self.sequence_window < 0:
            raise ConfigError(
                f"{type(self).__name__}.sequence_window={self.sequence_window} is not allowed: "
                "it must be >= 0 (0: the whole rollout)"
            )
        if self.sequence_window and getattr(self, "memory", "none") == "none":
            raise ConfigError(
                f"{type(self).__name__}.sequence_window={self.sequence_window} is not allowed "
                "with memory='none': sequences are for a network with memory (set memory to "
                "gru or lstm, or sequence_window to 0)"
            )

    def window(self, rollout_len: int, num_envs: int = 1) -> int:
        """The window for a rollout of ``rollout_len`` steps of ``num_envs`` environments on one
        device (an error names a window that does not divide it).

        ``sequence_window=0`` is the longest window that gives the device a multiple of the
        config's ``num_minibatches`` sequences: the whole rollout where the device holds
        enough environments (one device, the default sizes), shorter windows where it holds
        fewer (the same run over 2 or 4 devices, whose minibatches are then taken over the
        sequences each device holds). :func:`describe_window` says which was chosen."""
        window = self.sequence_window or auto_window(
            rollout_len, num_envs, getattr(self, "num_minibatches", 1)
        )
        if rollout_len % window:
            from podracer.errors import ConfigValueError

            raise ConfigValueError(
                f"{type(self).__name__}.sequence_window={self.sequence_window} is not allowed "
                f"with rollouts of {rollout_len} steps: it must divide the rollout length"
            )
        return window


def auto_window(rollout_len: int, num_envs: int, num_minibatches: int) -> int:
    """The longest divisor ``W`` of ``rollout_len`` for which the ``num_envs * rollout_len / W``
    sequences of one device split into ``num_minibatches`` equal minibatches (the whole rollout
    where none does: the learner then names the sizes that do not divide)."""
    for window in range(rollout_len, 0, -1):
        if (
            rollout_len % window == 0
            and (num_envs * (rollout_len // window)) % num_minibatches == 0
        ):
            return window
    return rollout_len


def describe_window(config, rollout_len: int, num_envs: int) -> str | None:
    """What the plan prints for an on-policy agent with memory: the window its learner re-runs
    and the sequences each device holds (``None`` without memory)."""
    if not isinstance(config, SequenceFields) or getattr(config, "memory", "none") == "none":
        return None
    window = config.window(rollout_len, num_envs)
    chosen = (
        f"sequence_window={config.sequence_window}"
        if config.sequence_window
        else "sequence_window=0: the longest that splits into num_minibatches"
    )
    return f"sequences of {window} steps ({chosen}), {num_envs * rollout_len // window} per device"


def init_params(fields: TorsoFields, network, key, example_obs):
    """``network.init`` on one observation (with memory: and the initial carry)."""
    if fields.memory == "none":
        return network.init(key, jax.tree.map(lambda x: x[None], example_obs))
    carry = memory_lib.recurrent(network, fields.memory, fields.memory_size).initial(1)
    return network.init(key, carry, jax.tree.map(lambda x: x[None], example_obs))


def recurrent_net(fields: TorsoFields, network) -> memory_lib.Recurrent:
    """The :class:`~podracer.core.memory.Recurrent` of a network with memory."""
    return memory_lib.recurrent(network, fields.memory, fields.memory_size)


def action_size(action_spec: BoundedActionSpec) -> int:
    """The number of numbers in one action of a continuous spec."""
    return int(np.prod(action_spec.shape, dtype=np.int64))


def learning_rate(config, num_updates: int) -> float | optax.Schedule:
    """``config.lr``, or with ``config.anneal_lr`` a linear decay to 0 over the run's optimizer
    steps (``num_updates * num_epochs * num_minibatches``).

    Args:
      config: an agent config with ``lr``, ``anneal_lr``, ``num_epochs`` and
        ``num_minibatches``.
      num_updates: the run's updates.

    Returns:
      The learning rate (a float) or an optax schedule of the optimizer step.
    """
    if not config.anneal_lr:
        return config.lr
    steps = max(1, num_updates) * config.num_epochs * config.num_minibatches
    if steps > np.iinfo(np.int32).max:  # optax counts steps in int32
        raise ConfigError(
            f"--total-timesteps is too large for {type(config).__name__}.anneal_lr=True: "
            f"{num_updates} updates x {config.num_epochs} epochs x {config.num_minibatches} "
            f"minibatches = {steps} optimizer steps, more than the {np.iinfo(np.int32).max} a "
            "schedule counts; give fewer steps, or --agent.anneal-lr False"
        )
    return optax.linear_schedule(config.lr, 0.0, transition_steps=steps)


def select(x: jax.Array, index: jax.Array) -> jax.Array:
    """``x[..., index]`` through a one-hot product: its gradient is no scatter (slow on CPU)."""
    return jax.numpy.sum(x * jax.nn.one_hot(index, x.shape[-1], dtype=x.dtype), axis=-1)


class PolicyHead(NamedTuple):
    """How a network's policy output becomes actions, and what a loss needs of it.

    ``out`` is the network's policy output for a batch ``[N]`` (the logits, or a Gaussian's mean
    and log standard deviation); ``taken [N, ...]`` is what the log-probability is evaluated at:
    the action for a categorical policy, the Gaussian's sample before clipping for a continuous
    one (:attr:`ActorOutput.extras` ``["sample"]``).

    - ``sample(key, out) -> (action, log_prob, extras)``: the action the environment gets,
      ``log pi(taken)`` and what goes into ``ActorOutput.extras``;
    - ``taken(behaviour: ActorOutput) -> taken``;
    - ``log_prob_and_entropy(out, taken) -> (log_prob [N], entropy [N])``;
    - ``kl(out_p, out_q) -> KL(p || q) [N]``;
    - ``greedy(behaviour: ActorOutput) -> action``: the most likely action (evaluation).
    """

    sample: Callable[[jax.Array, Any], tuple[jax.Array, jax.Array, dict]]
    taken: Callable[[ActorOutput], jax.Array]
    log_prob_and_entropy: Callable[[Any, jax.Array], tuple[jax.Array, jax.Array]]
    kl: Callable[[Any, Any], jax.Array]
    greedy: Callable[[ActorOutput], jax.Array]


def categorical_head() -> PolicyHead:
    """The softmax policy over ``logits [N, A]``; ``extras = {"logits": logits}``."""

    def sample(key, logits):
        action = jax.random.categorical(key, logits)
        return action, select(jax.nn.log_softmax(logits), action), {"logits": logits}

    def log_prob_and_entropy(logits, action):
        log_probs = jax.nn.log_softmax(logits)
        return select(log_probs, action), -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)

    def kl(logits_p, logits_q):
        log_p, log_q = jax.nn.log_softmax(logits_p), jax.nn.log_softmax(logits_q)
        return jnp.sum(jnp.exp(log_p) * (log_p - log_q), axis=-1)

    def greedy(out: ActorOutput):
        return out.extras["logits"].argmax(axis=-1).astype(out.action.dtype)

    return PolicyHead(sample, lambda out: out.action, log_prob_and_entropy, kl, greedy)


_LOG_2PI = math.log(2.0 * math.pi)


def check_bounded(action_spec: Any, agent: str) -> BoundedActionSpec:
    """``action_spec`` if a Gaussian policy can act in it: a :class:`BoundedActionSpec` of a
    float dtype with finite bounds ``low < high``; otherwise a :class:`ConfigError` naming the
    agent, the spec and what is wrong."""
    if not isinstance(action_spec, BoundedActionSpec):
        raise ConfigError(
            f"{agent}: a Gaussian policy needs a BoundedActionSpec, not {action_spec}"
        )
    if not np.issubdtype(np.dtype(action_spec.dtype), np.floating):
        raise ConfigError(
            f"{agent}: continuous actions of dtype {action_spec.dtype} are not allowed: a "
            "Gaussian policy acts in a float dtype"
        )
    low = np.broadcast_to(np.asarray(action_spec.low, np.float64), action_spec.shape)
    high = np.broadcast_to(np.asarray(action_spec.high, np.float64), action_spec.shape)
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        raise ConfigError(
            f"{agent}: the action bounds low={action_spec.low}, high={action_spec.high} are not "
            "allowed: a Gaussian policy clips its actions to finite bounds"
        )
    if not np.all(low < high):
        raise ConfigError(
            f"{agent}: the action bounds low={action_spec.low}, high={action_spec.high} are not "
            "allowed: each low must be below its high"
        )
    if action_size(action_spec) < 1:
        raise ConfigError(f"{agent}: an action of shape {action_spec.shape} holds no number")
    return action_spec


def gaussian_head(action_spec: BoundedActionSpec, agent: str = "agent") -> PolicyHead:
    """A diagonal Gaussian over ``mean, log_std [N, D]`` (``D`` the action's size), whose
    samples are **clipped** to the spec's bounds before the environment gets them.

    The log-probability is that of the *unclipped* sample ``u`` (kept in
    ``extras["sample"]``), as in CleanRL's and Stable-Baselines3's PPO:

    .. math::
        \\log \\pi(u) = \\sum_d -\\tfrac12 ((u_d - \\mu_d) / \\sigma_d)^2 - \\log\\sigma_d
            - \\tfrac12 \\log 2\\pi,
        \\qquad H = \\sum_d \\log\\sigma_d + \\tfrac12 (1 + \\log 2\\pi),

    and ``KL(p || q) = sum_d log(sigma_q / sigma_p) + (sigma_p^2 + (mu_p - mu_q)^2) /
    (2 sigma_q^2) - 1/2``. ``extras = {"sample": u, "mean": mu}``; the greedy action is the mean,
    clipped. Actions have the spec's shape (``[N, *shape]``).
    """
    spec = check_bounded(action_spec, agent)
    shape = tuple(spec.shape)
    low = jnp.asarray(np.broadcast_to(np.asarray(spec.low, np.float32), shape))
    high = jnp.asarray(np.broadcast_to(np.asarray(spec.high, np.float32), shape))
    size = action_size(spec)

    def as_actions(x):
        return x.reshape(*x.shape[:-1], *shape)

    def flat(x):
        return x.reshape(*x.shape[: x.ndim - len(shape)], size)

    def log_prob(mean, log_std, u):  # u [N, D]
        z = (u - mean) * jnp.exp(-log_std)
        return jnp.sum(-0.5 * jnp.square(z) - log_std - 0.5 * _LOG_2PI, axis=-1)

    def sample(key, out):
        mean, log_std = out
        u = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape, mean.dtype)
        action = jnp.clip(as_actions(u), low, high)
        return (
            action,
            log_prob(mean, log_std, u),
            {"sample": as_actions(u), "mean": as_actions(mean)},
        )

    def log_prob_and_entropy(out, u):
        mean, log_std = out
        entropy = jnp.sum(log_std + 0.5 * (1.0 + _LOG_2PI), axis=-1)
        return log_prob(mean, log_std, flat(u)), entropy

    def kl(out_p, out_q):
        (mean_p, log_std_p), (mean_q, log_std_q) = out_p, out_q
        var_ratio = jnp.exp(2.0 * (log_std_p - log_std_q))
        mahalanobis = jnp.square((mean_p - mean_q) * jnp.exp(-log_std_q))
        return jnp.sum(log_std_q - log_std_p + 0.5 * (var_ratio + mahalanobis) - 0.5, axis=-1)

    def greedy(out: ActorOutput):
        return jnp.clip(out.extras["mean"], low, high)

    return PolicyHead(sample, lambda out: out.extras["sample"], log_prob_and_entropy, kl, greedy)


def policy_head(action_spec: ActionSpec | int, agent: str) -> PolicyHead:
    """The head for ``action_spec``: categorical for discrete actions (or an int, the number of
    actions), Gaussian for bounded continuous ones."""
    if isinstance(action_spec, int | DiscreteActionSpec):
        return categorical_head()
    return gaussian_head(action_spec, agent)


def make_act(network, head: PolicyHead, net: memory_lib.Recurrent | None = None):
    """``act(params, actor_state, obs, key)`` for an actor-critic ``network`` returning
    ``(policy, value)``: samples from ``head``'s policy and records its log-probability, value
    and extras; no actor state. With ``net`` (a network with memory), one step of it from the
    carry in the actor state."""

    def act(params, actor_state, obs, key):
        if net is None:
            out, value = network.apply(params, obs)
        else:
            actor_state, (out, value) = memory_lib.step(net, params, actor_state, obs)
        action, log_prob, extras = head.sample(key, out)
        return actor_state, ActorOutput(action, log_prob, value, extras=extras)

    return act


def make_categorical_act(network):
    """``act`` of the categorical policy (:func:`make_act` with :func:`categorical_head`)."""
    return make_act(network, categorical_head())


class EpsilonGreedy(NamedTuple):
    """What an epsilon-greedy agent's actors receive: the params and this update's exploration
    rate (``Agent.actor_params`` computes it from the agent's slot)."""

    params: Any
    epsilon: jax.Array  # f32 []


def epsilon_at(config, updates: jax.Array, num_updates: int) -> jax.Array:
    """The exploration rate after ``updates`` of ``num_updates`` updates: linear from
    ``config.epsilon_start`` to ``config.epsilon_finish`` over the first
    ``config.epsilon_decay`` of the run, then constant."""
    decay_updates = max(1.0, config.epsilon_decay * num_updates)
    fraction = jnp.minimum(updates.astype(jnp.float32) / decay_updates, 1.0)
    return config.epsilon_start + fraction * (config.epsilon_finish - config.epsilon_start)


def epsilon_greedy(q: jax.Array, obs, epsilon, num_actions: int, key) -> ActorOutput:
    """The epsilon-greedy choice among ``q [B, A]``: the greedy action, or with probability
    ``epsilon`` a uniformly random one (among the legal actions of ``obs``'s mask, if it has
    one; the Q-network already masked ``q``); records the probability of the action taken,
    ``max_a q`` as the value and the q-values as ``extras["logits"]`` (so greedy evaluation
    takes their argmax)."""
    explore_key, random_key = jax.random.split(key)
    greedy = jnp.argmax(q, axis=-1)
    mask = split_action_mask(obs)[1]
    if mask is None:
        random = jax.random.randint(random_key, greedy.shape, 0, num_actions)
        num_legal = num_actions
    else:
        legal = legal_actions(mask)
        random = jax.random.categorical(random_key, jnp.where(legal, 0.0, ILLEGAL))
        num_legal = jnp.sum(legal, axis=-1)
    action = jnp.where(jax.random.uniform(explore_key, greedy.shape) < epsilon, random, greedy)
    prob = epsilon / num_legal + (1.0 - epsilon) * (action == greedy)
    return ActorOutput(action, jnp.log(prob), jnp.max(q, -1), extras={"logits": q})


def epsilon_greedy_act(network, num_actions: int, net: memory_lib.Recurrent | None = None):
    """``act(acting: EpsilonGreedy, actor_state, obs, key)`` for a Q-network:
    :func:`epsilon_greedy` with the acting params' exploration rate. With ``net`` (a Q-network
    with memory), one step of it from the carry in the actor state."""

    def act(acting: EpsilonGreedy, actor_state, obs, key):
        if net is None:
            q = network.apply(acting.params, obs)
        else:
            actor_state, q = memory_lib.step(net, acting.params, actor_state, obs)
        return actor_state, epsilon_greedy(q, obs, acting.epsilon, num_actions, key)

    return act
