"""Pieces shared by the actor-critic agents: the network's config fields, the categorical
policy's ``act``, and the learning-rate schedule."""

from __future__ import annotations

import dataclasses

import jax
import optax

from podracer.agents.spec import num_actions
from podracer.config import check_choice, check_layer_sizes
from podracer.networks import ACTIVATIONS, TORSOS, ActorCritic
from podracer.types import ActionSpec, ActorOutput


@dataclasses.dataclass(frozen=True)
class ActorCriticFields:
    """The network fields of the actor-critic agents (PPO, IMPALA): a config inherits them."""

    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of the MLP torso(s) (unused by the convolutional torsos)."""
    activation: str = "tanh"
    """Activation of the MLP torso: one of tanh, relu, gelu, silu."""
    shared_torso: bool = False
    """One torso for actor and critic instead of one each (use it with the image torsos)."""
    torso: str = "mlp"
    """Torso of the network: one of mlp, nature_cnn, impala_resnet."""
    channels_first: bool = True
    """Image observations are [C, H, W] (envpool's Atari layout) rather than [H, W, C]."""

    def check_network(self) -> None:
        """Validates the network fields (call it from ``__post_init__``)."""
        check_layer_sizes(self, "hidden_sizes")
        check_choice(self, "activation", tuple(ACTIVATIONS))
        check_choice(self, "torso", TORSOS)

    def network(self, action_spec: ActionSpec | int, agent: str) -> ActorCritic:
        """The :class:`~podracer.networks.ActorCritic` these fields describe."""
        return ActorCritic(
            num_actions=num_actions(action_spec, agent),
            hidden_sizes=tuple(self.hidden_sizes),
            activation=self.activation,
            shared_torso=self.shared_torso,
            torso=self.torso,
            channels_first=self.channels_first,
        )


def learning_rate(config, num_updates: int) -> float | optax.Schedule:
    """``config.lr``, or with ``config.anneal_lr`` a linear decay to 0 over the run's optimizer
    steps (``num_updates * num_epochs * num_minibatches``)."""
    if not config.anneal_lr:
        return config.lr
    steps = max(1, num_updates) * config.num_epochs * config.num_minibatches
    return optax.linear_schedule(config.lr, 0.0, transition_steps=steps)


def select(x: jax.Array, index: jax.Array) -> jax.Array:
    """``x[..., index]`` through a one-hot product: its gradient is no scatter (slow on CPU)."""
    return jax.numpy.sum(x * jax.nn.one_hot(index, x.shape[-1], dtype=x.dtype), axis=-1)


def make_categorical_act(network):
    """``act(params, actor_state, obs, key)`` for an actor-critic ``network`` returning
    ``(logits, value)``: samples from the softmax policy and records its log-probability, value
    and logits (``extras["logits"]``); no actor state."""

    def act(params, actor_state, obs, key):
        logits, value = network.apply(params, obs)
        action = jax.random.categorical(key, logits)
        log_prob = select(jax.nn.log_softmax(logits), action)
        return actor_state, ActorOutput(action, log_prob, value, extras={"logits": logits})

    return act
