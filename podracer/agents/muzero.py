"""MuZero: a learned model, search with mctx, and learning from windows of replay.

Schrittwieser et al., 2020, "Mastering Atari, Go, chess and shogi by planning with a learned
model" (https://arxiv.org/abs/1911.08265); Danihelka et al., 2022, "Policy improvement by
planning with Gumbel" (https://openreview.net/forum?id=bERaNdoegnO); Schrittwieser et al., 2021,
MuZero Reanalyse (https://arxiv.org/abs/2104.06294).

Three functions of one network (:class:`MuZeroNetwork`):

- representation ``s_0 = h(o_t)``: a torso (MLP, or a small convolutional one with residual
  blocks for pixels) and a dense layer, min-max scaled to ``[0, 1]`` per sample;
- dynamics ``(s_k, r_k) = g(s_{k-1}, a_{t+k-1})``: an MLP of the state and the one-hot action,
  the next state min-max scaled, the reward a categorical distribution;
- prediction ``(pi_k, v_k) = f(s_k)``: policy logits and a categorical value.

Values and rewards are categorical over ``2 S + 1`` bins on ``[-S, S]`` of the h-transformed
scalar (``h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x``, rlax's ``signed_hyperbolic``), with
two-hot targets (``rlax.transform_to_2hot``).

**Acting** is a search (:func:`make_search`): ``mctx.gumbel_muzero_policy`` (``search="gumbel"``)
or ``mctx.muzero_policy`` (``search="puct"``) with ``num_simulations`` simulations, the
environment's illegal actions (``obs[ACTION_MASK]``) removed. ``ActorOutput.extras`` holds the
search's action weights (``search_policy [B, A]``) and root value (``search_value [B]``);
the greedy action is the largest weight.

**Learning** (``loss``) on windows of ``W = K + n`` consecutive steps of one environment from
the learner's replay (:class:`podracer.core.learner.replay.Replay` with ``window=W``). From
``s_0 = h(o_t)`` the model unrolls the stored actions ``K`` steps; at each position
``k = 0..K``:

.. math::
    z_k = \\sum_{i<n'} \\gamma^i r_{t+k+i} + d_k \\, v^-(o'_{t+k+n'-1}),

the n-step return cut at the first episode end (a termination: ``d_k = 0``; a truncation
bootstraps from its ``final_obs``), ``v^-`` the target network's value. The loss is

.. math::
    \\sum_{k=0}^{K} c_k \\left[ \\mathrm{CE}(\\pi_{t+k}, p_k) m^p_k
    + w_v \\mathrm{CE}(\\phi(h(z_k)), v_k) m^v_k
    + [k>0]\\, \\mathrm{CE}(\\phi(h(r_{t+k-1})), r_k) m^r_k \\right],

``c_0 = 1`` and ``c_k = 1 / K`` after it, ``phi`` the two-hot, ``pi`` the search's weights.
Past the episode's end (a step ``t + j < t + k`` ended it): after a termination the value and
reward targets are 0 and the policy carries no loss; after a truncation nothing is known of the
states that follow, and no loss is taken there. The gradient into the dynamics is scaled by
``dynamics_gradient_scale`` (0.5) at each step, as in the paper. With prioritised replay the
loss is weighted by the importance weights and a window's new priority is
``|search value_t - z_0|``. The target network follows the params every ``target_period``
updates by ``tau`` (1: a copy; small: an exponential moving average).

**Reanalyse** (``reanalyse_fraction > 0``): the first ``fraction`` of each sampled batch gets
fresh policy targets from a search with the target params on the stored observations at the
``K + 1`` positions (MuZero Reanalyse, EfficientZero); the value targets are always fresh (the
target network's values of the stored bootstrap observations).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from podracer.agents.dqn import init_target, target_update
from podracer.agents.optim import clipped_adam
from podracer.agents.spec import AgentSpec, Space, num_actions
from podracer.core.learner.buffers import ReplayFields
from podracer.core.learner.replay import Replay, ReplayBatch, n_step_targets
from podracer.errors import ConfigError
from podracer.networks import (
    ACTIVATIONS,
    ILLEGAL,
    TORSOS,
    flatten_observations,
    legal_actions,
    make_torso,
)
from podracer.types import (
    ActionSpec,
    ActorOutput,
    Agent,
    LossOutput,
    Trajectory,
    split_action_mask,
)
from podracer.util import ops
from podracer.util.imports import import_extra
from podracer.util.ops import varying_axes
from podracer.util.validation import check_choice, check_positive, check_range

SEARCHES = ("gumbel", "puct")
MUZERO_TORSOS = ("muzero_resnet", *TORSOS)


@dataclasses.dataclass(frozen=True)
class MuZeroConfig(ReplayFields):
    """MuZero's hyper-parameters and its replay's (``batch_size`` counts windows of
    ``num_unroll_steps + n_step`` steps; defaults tuned on catch and CartPole, docs/muzero.md)."""

    search: str = "gumbel"
    """The search that acts: gumbel (mctx.gumbel_muzero_policy, Gumbel MuZero) or puct
    (mctx.muzero_policy, MuZero's PUCT with Dirichlet noise at the root)."""
    num_simulations: int = 16
    """Simulations of each search (each is one dynamics and prediction step of a batch)."""
    max_depth: int = 0
    """Largest depth of a simulation (0: num_simulations, no limit)."""
    max_num_considered_actions: int = 16
    """Gumbel: actions considered at the root by sequential halving."""
    gumbel_scale: float = 1.0
    """Gumbel: scale of the Gumbel noise at the root (0: deterministic search)."""
    dirichlet_alpha: float = 0.3
    """PUCT: the root's Dirichlet noise concentration."""
    dirichlet_fraction: float = 0.25
    """PUCT: the weight of the Dirichlet noise in the root's prior."""
    pb_c_init: float = 1.25
    """PUCT: the exploration constant c1."""
    temperature: float = 1.0
    """PUCT: acting samples the visit counts raised to 1 / temperature."""
    num_unroll_steps: int = 5
    """K: steps the dynamics unrolls from each sampled observation."""
    n_step: int = 5
    """n: steps of the n-step value targets."""
    gamma: float = 0.99
    """Discount factor (of the search and of the targets)."""
    lr: float = 1e-3
    """Adam learning rate."""
    max_grad_norm: float = 5.0
    """Global gradient norm clip (0 disables it)."""
    value_loss_weight: float = 0.25
    """Weight of the value loss (MuZero Reanalyse: 0.25)."""
    reward_loss_weight: float = 1.0
    """Weight of the reward loss."""
    policy_loss_weight: float = 1.0
    """Weight of the policy loss."""
    dynamics_gradient_scale: float = 0.5
    """Gradient scale at the entry of the dynamics, at each unrolled step (the paper: 0.5)."""
    target_period: int = 4
    """Updates between target-network updates."""
    tau: float = 1.0
    """Step of a target update (1: copy the params; small: an exponential moving average)."""
    support_size: int = 20
    """S: values are categorical over 2S + 1 bins on [-S, S] of h(value)."""
    reward_support_size: int = 5
    """Rewards are categorical over 2S + 1 bins on [-S, S] of h(reward)."""
    embedding_size: int = 64
    """Features of the hidden state."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of the representation's MLP torso."""
    model_hidden_sizes: tuple[int, ...] = (64,)
    """Hidden layer sizes of the dynamics and of the prediction MLPs."""
    activation: str = "relu"
    """Activation of the MLPs: one of tanh, relu, gelu, silu."""
    torso: str = "mlp"
    """Representation torso: mlp, muzero_resnet (a strided convolution and residual blocks, for
    pixels), or one of the shared convolutional torsos (minatar_cnn, nature_cnn,
    impala_resnet)."""
    channels_first: bool = True
    """Image observations are [C, H, W] (envpool's Atari layout) rather than [H, W, C]."""
    resnet_channels: int = 32
    """muzero_resnet: channels of the convolutions."""
    resnet_blocks: int = 2
    """muzero_resnet: residual blocks after the downsampling."""
    reanalyse_fraction: float = 0.0
    """Fraction of each sampled batch whose policy targets are recomputed by a search with the
    target params (0: none)."""
    min_max_eps: float = 1e-5
    """Floor of the range of a hidden state's min-max scaling."""

    def __post_init__(self):
        check_choice(self, "search", SEARCHES)
        check_positive(
            self,
            "num_simulations",
            "max_num_considered_actions",
            "num_unroll_steps",
            "n_step",
            "lr",
            "target_period",
            "support_size",
            "reward_support_size",
            "embedding_size",
            "resnet_channels",
            "dirichlet_alpha",
            "temperature",
            "min_max_eps",
        )
        check_range(self, "max_depth", 0, None)
        check_range(self, "resnet_blocks", 0, None)
        check_range(self, "gumbel_scale", 0.0, None)
        check_range(self, "dirichlet_fraction", 0.0, 1.0)
        check_range(self, "pb_c_init", 0.0, None)
        check_range(self, "gamma", 0.0, 1.0)
        check_range(self, "max_grad_norm", 0.0, None)
        check_range(self, "value_loss_weight", 0.0, None)
        check_range(self, "reward_loss_weight", 0.0, None)
        check_range(self, "policy_loss_weight", 0.0, None)
        check_range(self, "dynamics_gradient_scale", 0.0, 1.0)
        check_range(self, "tau", 0.0, 1.0, low_open=True)
        check_range(self, "reanalyse_fraction", 0.0, 1.0)
        check_choice(self, "activation", tuple(ACTIVATIONS))
        check_choice(self, "torso", MUZERO_TORSOS)
        for field in ("hidden_sizes", "model_hidden_sizes"):
            sizes = getattr(self, field)
            if not sizes or any(int(size) < 1 for size in sizes):
                raise ConfigError(
                    f"MuZeroConfig.{field}={sizes!r} is not allowed: give one or more positive "
                    "sizes"
                )
        self.check_replay()

    @property
    def window(self) -> int:
        """Steps of a sampled window: K unroll steps and n steps of return after the last."""
        return self.num_unroll_steps + self.n_step


# --- values on a support ----------------------------------------------------------------------


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


# --- the network ----------------------------------------------------------------------------


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
    config: MuZeroConfig

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
    config: MuZeroConfig
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
    config: MuZeroConfig
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

    config: MuZeroConfig
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


# --- the search -----------------------------------------------------------------------------


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


def make_search(config: MuZeroConfig, model: Model, actions: int):
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


# --- the targets ----------------------------------------------------------------------------


class Step(NamedTuple):
    """One step of one environment as MuZero stores it (its replay's windows are ``K + n`` of
    them)."""

    obs: Any  # [...]
    action: jax.Array  # i32 []
    reward: jax.Array  # f32 []
    terminated: jax.Array  # bool []
    truncated: jax.Array  # bool []
    bootstrap_obs: Any  # [...]: the observation after the step, before any auto-reset
    search_policy: jax.Array  # f32 [A]: the search's action weights
    search_value: jax.Array  # f32 []: the search's root value


class Targets(NamedTuple):
    """A batch of windows' targets at the unroll positions ``k = 0..K``: ``[b, K + 1]``."""

    value: jax.Array  # f32: z_k (0 after a termination)
    value_mask: jax.Array  # f32: 1 where the value loss is taken
    reward: jax.Array  # f32: r_{t+k-1} (position 0 unused; 0 after a termination)
    reward_mask: jax.Array  # f32: 1 where the reward loss is taken (0 at k = 0)
    policy_mask: jax.Array  # f32: 1 where the policy loss is taken
    bootstrap_index: jax.Array  # i32: the window step whose bootstrap_obs z_k bootstraps from
    n_step_return: jax.Array  # f32: the n-step return without the bootstrap
    discount: jax.Array  # f32: the bootstrap's discount (0 where a termination cut it)


def window_targets(reward, terminated, truncated, gamma: float, n: int, num_unroll: int) -> Targets:
    """The targets of windows ``[b, W]`` (``W = K + n``) at positions ``0..K``, without the
    bootstrap values (``value`` is the n-step return alone: add ``discount * v(bootstrap)``).

    Position ``k``'s episode ended before it when a step ``j < k`` of the window ended
    (terminated or truncated); the first such end decides: a termination gives value and reward
    targets 0 (with loss) and no policy loss, a truncation no loss at all."""
    b = reward.shape[0]
    k1 = num_unroll + 1
    ret, discount, last = n_step_targets(
        Trajectory(None, reward.T, terminated.T, truncated.T, None, None), gamma, n
    )
    ret, discount, last = ret.T[:, :k1], discount.T[:, :k1], last.T[:, :k1]
    done = terminated | truncated  # [b, W]
    ended = jnp.cumsum(done.astype(jnp.int32), axis=1) > 0  # an end at or before step j
    ended_before = jnp.concatenate([jnp.zeros((b, 1), bool), ended[:, :-1]], axis=1)[:, :k1]
    first = jnp.argmax(done, axis=1)  # the first end (where there is one)
    by_termination = terminated[jnp.arange(b), first][:, None]
    after_termination = ended_before & by_termination
    after_truncation = ended_before & ~by_termination
    value = jnp.where(after_termination, 0.0, ret)
    value_mask = ~after_truncation
    # The reward of position k is step k - 1's: known while step k - 1 is in the episode.
    step_reward = jnp.concatenate([jnp.zeros((b, 1)), reward[:, : k1 - 1]], axis=1)
    reward_before = jnp.concatenate([jnp.zeros((b, 1), bool), ended_before[:, :-1]], axis=1)
    reward_after_termination = reward_before & by_termination
    reward_target = jnp.where(reward_before, 0.0, step_reward)
    reward_mask = (~reward_before | reward_after_termination) & (jnp.arange(k1) > 0)
    return Targets(
        value=value,
        value_mask=value_mask.astype(jnp.float32),
        reward=reward_target,
        reward_mask=reward_mask.astype(jnp.float32),
        policy_mask=(~ended_before).astype(jnp.float32),
        bootstrap_index=last,
        n_step_return=ret,
        discount=jnp.where(ended_before, 0.0, discount),
    )


def unroll(model: Model, params, obs, actions, scale: float):
    """``(policy logits [b, K+1, A], value logits [b, K+1, .], reward logits [b, K+1, .])``:
    the predictions at ``s_0 = h(obs)`` and at each state the dynamics reaches taking
    ``actions [b, K]``, the gradient into the dynamics scaled by ``scale`` at each step.
    Position 0's reward logits are zeros (no reward leads to the root)."""
    state = model.represent(params, obs)
    policy, value = model.predict(params, state)
    policies, values, rewards = [policy], [value], []
    for i in range(actions.shape[1]):
        state, reward = model.dynamics(params, scale_gradient(state, scale), actions[:, i])
        policy, value = model.predict(params, state)
        policies.append(policy)
        values.append(value)
        rewards.append(reward)
    if rewards:
        rewards.insert(0, jnp.zeros_like(rewards[0]))
    return tuple(jnp.stack(x, axis=1) for x in (policies, values, rewards))


# --- the agent ------------------------------------------------------------------------------


def make_agent(config: MuZeroConfig, action_spec: ActionSpec | int) -> Agent:
    """MuZero as an :class:`~podracer.types.Agent` with a replay of windows (see the module's
    docstring)."""
    actions = num_actions(action_spec, "muzero")
    network = MuZeroNetwork(config, actions)
    model = model_of(network)
    search = make_search(config, model, actions)
    k, n = config.num_unroll_steps, config.n_step

    def init(key, example_obs):
        return network.init(key, jax.tree.map(lambda x: x[None], example_obs))

    def act(params, actor_state, obs, key):
        out = search(params, obs, key)
        log_prob = jnp.log(
            jnp.take_along_axis(out.weights, out.action[:, None], axis=-1)[:, 0] + 1e-8
        )
        extras = {"search_policy": out.weights, "search_value": out.value}
        return actor_state, ActorOutput(out.action, log_prob, out.value, extras)

    def greedy(out: ActorOutput):
        return jnp.argmax(out.extras["search_policy"], axis=-1).astype(out.action.dtype)

    def prepare(params, state, traj: Trajectory, mean_fn):
        del params, state, mean_fn
        return Step(
            traj.obs,
            traj.action.astype(jnp.int32),
            traj.reward.astype(jnp.float32),
            traj.terminated,
            traj.truncated,
            traj.bootstrap_obs,
            traj.behaviour.extras["search_policy"].astype(jnp.float32),
            traj.behaviour.extras["search_value"].astype(jnp.float32),
        )

    def flat(x):
        return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])

    def targets_of(target_params, steps: Step, key, reanalyse: int):
        targets = window_targets(
            steps.reward, steps.terminated, steps.truncated, config.gamma, n, k
        )
        b = steps.reward.shape[0]
        rows = jnp.arange(b)[:, None]
        boot_obs = jax.tree.map(lambda x: x[rows, targets.bootstrap_index], steps.bootstrap_obs)
        _, boot_value_logits = model.predict(
            target_params, model.represent(target_params, jax.tree.map(flat, boot_obs))
        )
        boot_value = logits_to_scalar(boot_value_logits, config.support_size).reshape(b, k + 1)
        value = targets.value + targets.discount * boot_value
        policy = steps.search_policy[:, : k + 1]
        if reanalyse:
            obs = jax.tree.map(lambda x: flat(x[:reanalyse, : k + 1]), steps.obs)
            fresh = search(target_params, obs, key).weights.reshape(reanalyse, k + 1, -1)
            policy = policy.at[:reanalyse].set(fresh)
        return jax.lax.stop_gradient(value), jax.lax.stop_gradient(policy), targets

    def loss(params, batch: ReplayBatch, key):
        steps: Step = batch.items  # [b, W]
        b = steps.reward.shape[0]
        reanalyse = 0
        if config.reanalyse_fraction > 0:
            reanalyse = min(b, max(1, round(config.reanalyse_fraction * b)))
        value_target, policy_target, targets = targets_of(
            batch.agent_state.target_params, steps, key, reanalyse
        )
        obs0 = jax.tree.map(lambda x: x[:, 0], steps.obs)
        policy, value, reward = unroll(
            model, params, obs0, steps.action[:, :k], config.dynamics_gradient_scale
        )
        value_ce = optax.softmax_cross_entropy(
            value, scalar_to_logits_target(value_target, config.support_size)
        )
        reward_ce = optax.softmax_cross_entropy(
            reward, scalar_to_logits_target(targets.reward, config.reward_support_size)
        )
        policy_ce = optax.softmax_cross_entropy(policy, policy_target)
        scale = jnp.concatenate([jnp.ones((1,)), jnp.full((k,), 1.0 / k)])
        per_position = (
            config.policy_loss_weight * policy_ce * targets.policy_mask
            + config.value_loss_weight * value_ce * targets.value_mask
            + config.reward_loss_weight * reward_ce * targets.reward_mask
        )
        per_window = jnp.sum(per_position * scale, axis=1)
        total = jnp.mean(batch.weights * per_window)
        priority = jnp.abs(steps.search_value[:, 0] - value_target[:, 0])

        def masked_mean(x, m):
            return jnp.sum(x * m) / jnp.maximum(jnp.sum(m), 1.0)

        metrics = {
            "loss": total,
            "value_loss": masked_mean(value_ce, targets.value_mask),
            "reward_loss": masked_mean(reward_ce, targets.reward_mask),
            "policy_loss": masked_mean(policy_ce, targets.policy_mask),
            "value_target": jnp.mean(value_target[:, 0]),
            "value": jnp.mean(logits_to_scalar(value[:, 0], config.support_size)),
        }
        return total, LossOutput(metrics, priority)

    def item(obs):
        def f32(*shape):
            return jax.ShapeDtypeStruct(shape, jnp.float32)

        flag = jax.ShapeDtypeStruct((), jnp.bool_)
        return Step(
            obs=obs,
            action=jax.ShapeDtypeStruct((), jnp.int32),
            reward=f32(),
            terminated=flag,
            truncated=flag,
            bootstrap_obs=obs,
            search_policy=f32(actions),
            search_value=f32(),
        )

    return Agent(
        init=init,
        act=act,
        prepare=prepare,
        loss=loss,
        greedy=greedy,
        init_state=init_target,
        update_state=target_update(config),
        replay=Replay(config, item, window=config.window, period=1, batch_size=config.batch_size),
    )


def make_optimizer(config: MuZeroConfig, num_updates: int) -> optax.GradientTransformation:
    """Adam at a constant learning rate after global-norm clipping."""
    del num_updates
    return clipped_adam(config.lr, config.max_grad_norm)


SPEC = AgentSpec(
    name="muzero",
    config_cls=MuZeroConfig,
    make_agent=make_agent,
    make_optimizer=make_optimizer,
    default_env="catch",
    loop_defaults={"envs": 16, "rollout_len": 8},
    search_space={
        "lr": Space(1e-5, 1e-2, log=True),
        "gamma": Space(0.8, 0.9999),
        "tau": Space(1e-3, 1.0, log=True),
        "value_loss_weight": Space(0.05, 2.0, log=True),
    },
)
