"""MuZero's learned model and the search over it (:mod:`podracer.agents.muzero` is the agent).

- values on a support: :func:`scalar_to_logits_target` and :func:`logits_to_scalar` (rlax's
  two-hot of ``h(x)``), :func:`min_max_scaled` hidden states, :func:`scale_gradient`;
- the network (:class:`MuZeroNetwork`): ``represent(obs) -> s``, ``dynamics(s, a) -> (s',
  reward logits)``, ``predict(s) -> (policy logits, value logits)``; :func:`model_of` makes
  them functions of the params (:class:`Model`);
- the search (:func:`make_search`): mctx's Gumbel MuZero or PUCT policy from the root
  ``h(obs)``, run outside ``shard_map``'s varying-axes check (:func:`unchecked`).

Each module's ``config`` is a :class:`~podracer.agents.muzero.MuZeroConfig`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from podracer.networks import (
    ACTIVATIONS,
    ILLEGAL,
    flatten_observations,
    legal_actions,
    make_torso,
)
from podracer.types import (
    split_action_mask,
)
from podracer.util import ops
from podracer.util.imports import import_extra
from podracer.util.ops import varying_axes


def scalar_to_logits_target(x: jax.Array, support_size: int) -> jax.Array:
    """Two-hot ``[..., 2S + 1]`` of ``h(x)`` on ``[-S, S]`` (``h``: rlax's
    ``signed_hyperbolic``; values beyond the support go to its ends)."""
    import rlax

    s = float(support_size)
    return rlax.transform_to_2hot(rlax.signed_hyperbolic(x), -s, s, 2 * support_size + 1)


def logits_to_scalar(logits: jax.Array, support_size: int) -> jax.Array:
    """The scalar of categorical ``logits [..., 2S + 1]``: ``h^-1`` of the expected support
    value (rlax's ``transform_from_2hot`` then ``signed_parabolic``)."""
    import rlax

    s = float(support_size)
    probs = jax.nn.softmax(logits, axis=-1)
    return rlax.signed_parabolic(rlax.transform_from_2hot(probs, -s, s, 2 * support_size + 1))


def min_max_scaled(x: jax.Array, eps: float) -> jax.Array:
    """``x [B, E]`` scaled to ``[0, 1]`` per sample: ``(x - min) / max(max - min, eps)``."""
    low = jnp.min(x, axis=-1, keepdims=True)
    high = jnp.max(x, axis=-1, keepdims=True)
    return (x - low) / jnp.maximum(high - low, eps)


def scale_gradient(x: jax.Array, scale: float) -> jax.Array:
    """``x`` in the forward pass; its gradient times ``scale`` in the backward pass."""
    return x * scale + jax.lax.stop_gradient(x) * (1.0 - scale)


class MuZeroResNet(nn.Module):
    """A small MuZero Atari-style torso: ``[B, C, H, W] -> [B, H/2 * W/2 * channels]``: a
    3x3 stride-2 convolution (the downsampling), then ``blocks`` residual blocks of two 3x3
    convolutions with LayerNorm, ReLU. Integer pixels are scaled to ``[0, 1]``."""

    channels: int = 32
    blocks: int = 2
    channels_first: bool = True

    @nn.compact
    def __call__(self, obs):
        x = obs.astype(jnp.float32)
        if jnp.issubdtype(obs.dtype, jnp.integer):
            x = x / 255.0
        if self.channels_first:
            x = jnp.transpose(x, (0, 2, 3, 1))
        x = nn.relu(nn.Conv(self.channels, (3, 3), (2, 2), padding="SAME")(x))
        for _ in range(self.blocks):
            y = nn.relu(nn.LayerNorm()(_conv3x3(self.channels)(x)))
            y = nn.LayerNorm()(_conv3x3(self.channels)(y))
            x = nn.relu(x + y)
        return x.reshape(x.shape[0], -1)


def _conv3x3(channels: int) -> nn.Conv:
    """A 3x3 stride-1 ``SAME`` convolution through :func:`podracer.util.ops.conv_general_dilated`
    (the same values; a gradient XLA:CPU runs fast inside loops)."""
    return nn.Conv(channels, (3, 3), padding="SAME", conv_general_dilated=ops.conv_general_dilated)


def _mlp(sizes, activation: str, x):
    for size in sizes:
        x = ACTIVATIONS[activation](nn.Dense(size)(x))
    return x


class Representation(nn.Module):
    config: Any

    @nn.compact
    def __call__(self, obs):
        c = self.config
        obs = split_action_mask(obs)[0]
        if c.torso == "muzero_resnet":
            x = MuZeroResNet(c.resnet_channels, c.resnet_blocks, c.channels_first)(obs)
        elif c.torso == "mlp":
            x = _mlp(c.hidden_sizes, c.activation, flatten_observations(obs))
        else:
            x = make_torso(c.torso, c.hidden_sizes, c.activation, c.channels_first)(obs)
        return min_max_scaled(nn.Dense(c.embedding_size)(x), c.min_max_eps)


class Dynamics(nn.Module):
    config: Any
    num_actions: int

    @nn.compact
    def __call__(self, state, action):
        c = self.config
        x = jnp.concatenate([state, jax.nn.one_hot(action, self.num_actions)], axis=-1)
        x = _mlp(c.model_hidden_sizes, c.activation, x)
        next_state = min_max_scaled(nn.Dense(c.embedding_size)(x), c.min_max_eps)
        reward_bins = 2 * c.reward_support_size + 1
        reward_logits = nn.Dense(reward_bins, kernel_init=nn.initializers.zeros)(x)
        return next_state, reward_logits


class Prediction(nn.Module):
    config: Any
    num_actions: int

    @nn.compact
    def __call__(self, state):
        c = self.config
        x = _mlp(c.model_hidden_sizes, c.activation, state)
        policy_logits = nn.Dense(self.num_actions, kernel_init=nn.initializers.zeros)(x)
        value_logits = nn.Dense(2 * c.support_size + 1, kernel_init=nn.initializers.zeros)(x)
        return policy_logits, value_logits


class MuZeroNetwork(nn.Module):
    """``represent(obs) -> s``, ``dynamics(s, a) -> (s', reward logits)``, ``predict(s) ->
    (policy logits, value logits)``; ``__call__`` runs all three (to initialise)."""

    config: Any
    num_actions: int

    def setup(self):
        self.representation = Representation(self.config)
        self.dynamics_net = Dynamics(self.config, self.num_actions)
        self.prediction = Prediction(self.config, self.num_actions)

    def __call__(self, obs):
        state = self.represent(obs)
        next_state, _ = self.dynamics(state, jnp.zeros(state.shape[:1], jnp.int32))
        return self.predict(next_state)

    def represent(self, obs):
        return self.representation(obs)

    def dynamics(self, state, action):
        return self.dynamics_net(state, action)

    def predict(self, state):
        return self.prediction(state)


class Model(NamedTuple):
    """MuZero's three functions of ``params`` (what the search and the loss call)."""

    represent: Any  # (params, obs [B, ...]) -> s [B, E]
    dynamics: Any  # (params, s [B, E], a [B]) -> (s' [B, E], reward logits [B, 2S' + 1])
    predict: Any  # (params, s [B, E]) -> (policy logits [B, A], value logits [B, 2S + 1])


def model_of(network: MuZeroNetwork) -> Model:
    return Model(
        represent=lambda p, obs: network.apply(p, obs, method=MuZeroNetwork.represent),
        dynamics=lambda p, s, a: network.apply(p, s, a, method=MuZeroNetwork.dynamics),
        predict=lambda p, s: network.apply(p, s, method=MuZeroNetwork.predict),
    )


class SearchOutput(NamedTuple):
    action: jax.Array  # i32 [B]: the action the search chose
    weights: jax.Array  # f32 [B, A]: the search's action weights (the policy target)
    value: jax.Array  # f32 [B]: the root's value after the search


def unchecked(fn, *args):
    """``fn(*args)`` with ``shard_map``'s varying-axes check off for ``fn`` alone, its outputs
    marked as varying over the axes its inputs vary over.

    mctx's search builds its tree from constants (``jnp.zeros``, ``jnp.full``) inside
    ``lax.while_loop`` s and ``lax.cond`` s whose carries then take per-device values, which a
    checked ``shard_map`` (JAX 0.10's default) refuses: marking the search's *inputs* as
    varying (``lax.pcast``) cannot reach those constants. So the search runs in a nested
    ``jax.shard_map`` over no new axes with ``check_vma=False``; its outputs, typed as
    replicated there, are marked as varying again, so the rest of the program (the whole
    Anakin step, the learner) keeps its check. Outside ``shard_map`` (one device, Sebulba's
    actors) or in an unchecked one, ``fn`` is called as it is."""
    axes = frozenset().union(*(varying_axes(x) for x in jax.tree.leaves(args)))
    if not axes:
        return fn(*args)
    out = jax.shard_map(
        fn, in_specs=jax.P(), out_specs=jax.P(), axis_names=frozenset(), check_vma=False
    )(*args)
    names = tuple(sorted(axes))
    return jax.tree.map(lambda x: jax.lax.pcast(x, names, to="varying"), out)


def make_search(config: Any, model: Model, actions: int):
    """``search(params, obs [B, ...], key) -> SearchOutput``: the config's mctx search from
    ``h(obs)``, the observation's illegal actions (``obs[ACTION_MASK]``) never chosen."""
    mctx = import_extra("mctx", "search", "--agent muzero (its search)")

    discount = config.gamma

    def recurrent_fn(params, key, action, state):
        del key
        next_state, reward_logits = model.dynamics(params, state, action)
        policy_logits, value_logits = model.predict(params, next_state)
        reward = logits_to_scalar(reward_logits, config.reward_support_size)
        out = mctx.RecurrentFnOutput(
            reward=reward,
            discount=jnp.full_like(reward, discount),
            prior_logits=policy_logits,
            value=logits_to_scalar(value_logits, config.support_size),
        )
        return out, next_state

    def run(params, obs, key):
        mask = split_action_mask(obs)[1]
        state = model.represent(params, obs)
        policy_logits, value_logits = model.predict(params, state)
        invalid = None
        if mask is not None:
            legal = legal_actions(mask)
            invalid = ~legal
            policy_logits = jnp.where(legal, policy_logits, ILLEGAL)
        root = mctx.RootFnOutput(
            prior_logits=policy_logits,
            value=logits_to_scalar(value_logits, config.support_size),
            embedding=state,
        )
        depth = config.max_depth or None
        common = dict(
            num_simulations=config.num_simulations, invalid_actions=invalid, max_depth=depth
        )
        if config.search == "gumbel":
            out = mctx.gumbel_muzero_policy(
                params,
                key,
                root,
                recurrent_fn,
                max_num_considered_actions=min(config.max_num_considered_actions, actions),
                gumbel_scale=config.gumbel_scale,
                **common,
            )
        else:
            out = mctx.muzero_policy(
                params,
                key,
                root,
                recurrent_fn,
                dirichlet_fraction=config.dirichlet_fraction,
                dirichlet_alpha=config.dirichlet_alpha,
                pb_c_init=config.pb_c_init,
                temperature=config.temperature,
                **common,
            )
        value = out.search_tree.summary().value
        return SearchOutput(out.action.astype(jnp.int32), out.action_weights, value)

    def search(params, obs, key):
        return unchecked(run, params, obs, key)

    return search
