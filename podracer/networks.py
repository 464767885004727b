"""flax.linen torsos and heads.

Observations of any shape and dtype are flattened and cast to ``f32`` by the MLP torso, so the same
network takes CartPole vectors, Catch boards and MinAtar images.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu}


def _orthogonal(scale: float):
    return nn.initializers.orthogonal(scale)


class MLP(nn.Module):
    """Flatten ``[B, ...] -> [B, D]``, then dense layers with an activation after each."""

    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"

    @nn.compact
    def __call__(self, obs):
        x = obs.reshape(obs.shape[0], -1).astype(jnp.float32)
        for size in self.hidden_sizes:
            x = nn.Dense(size, kernel_init=_orthogonal(np.sqrt(2)))(x)
            x = ACTIVATIONS[self.activation](x)
        return x


class ActorCritic(nn.Module):
    """Discrete actor-critic: ``obs [B, ...] -> (logits [B, A], value [B])``.

    With ``shared_torso`` one MLP feeds both heads; otherwise actor and critic have MLPs of their
    own (as in the PPO implementation details of Huang et al., 2022). Heads use orthogonal
    initialisation with gain 0.01 (policy) and 1 (value).
    """

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    shared_torso: bool = False

    def setup(self):
        self.actor_torso = MLP(self.hidden_sizes, self.activation)
        self.critic_torso = (
            self.actor_torso if self.shared_torso else MLP(self.hidden_sizes, self.activation)
        )
        self.policy_head = nn.Dense(self.num_actions, kernel_init=_orthogonal(0.01))
        self.value_head = nn.Dense(1, kernel_init=_orthogonal(1.0))

    def __call__(self, obs):
        return self.policy(obs), self.value(obs)

    def policy(self, obs):
        return self.policy_head(self.actor_torso(obs))

    def value(self, obs):
        return self.value_head(self.critic_torso(obs))[..., 0]


class QNetwork(nn.Module):
    """``obs [B, ...] -> q-values [B, A]`` through an MLP torso."""

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs):
        x = MLP(self.hidden_sizes, self.activation)(obs)
        return nn.Dense(self.num_actions)(x)
