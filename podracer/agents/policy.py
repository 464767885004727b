"""Pieces shared by the actor-critic agents."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from podracer.types import ActorOutput


def select(x: jax.Array, index: jax.Array) -> jax.Array:
    """``x[..., index]`` through a one-hot product: its gradient is no scatter (slow on CPU)."""
    return jnp.sum(x * jax.nn.one_hot(index, x.shape[-1], dtype=x.dtype), axis=-1)


def make_categorical_act(network):
    """``act(params, obs, key)`` for an actor-critic ``network`` returning ``(logits, value)``:
    samples from the softmax policy and records its log-probability, value and logits."""

    def act(params, obs, key) -> ActorOutput:
        logits, value = network.apply(params, obs)
        action = jax.random.categorical(key, logits)
        log_prob = select(jax.nn.log_softmax(logits), action)
        return ActorOutput(action=action, log_prob=log_prob, value=value, logits=logits)

    return act
