"""flax.linen torsos and heads.

Observations of any shape and dtype are flattened and cast to ``f32`` by the MLP torso, so the same
network takes CartPole vectors, Catch boards and MinAtar images. The convolutional torsos
(:class:`MinAtarCNN`, :class:`NatureCNN`, :class:`ImpalaResNet`) take image batches,
channel-first ``[B, C, H, W]`` by default (envpool's Atari layout: 4 stacked 84 x 84 frames; give
gymnax's ``[H, W, C]`` MinAtar frames ``channels_first=False``), and scale integer (``uint8``)
pixels to ``[0, 1]`` on the device, so observations travel to the device as bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from podracer.errors import ConfigValueError
from podracer.types import split_action_mask
from podracer.util import ops

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu}


def _orthogonal(scale: float):
    return nn.initializers.orthogonal(scale)


ILLEGAL = -1e9
"""The logit (or q-value) an illegal action gets: its probability is 0 (``exp(-1e9)``
underflows), it is never a maximum, and ``0 * ILLEGAL`` is 0 (no NaN, unlike ``-inf``, in an
entropy or a zero-discounted bootstrap)."""


def legal_actions(mask: jax.Array) -> jax.Array:
    """A legal-action mask ``[..., A]`` as the agents use it: where no action is legal (an
    environment's terminal state may say so), every action is."""
    mask = jnp.asarray(mask, bool)
    return mask | ~jnp.any(mask, axis=-1, keepdims=True)


def mask_logits(logits: jax.Array, mask: jax.Array | None) -> jax.Array:
    """``logits [..., A]`` with the illegal actions' set to :data:`ILLEGAL` (``mask`` None:
    unchanged). Their gradient is zero."""
    if mask is None:
        return logits
    return jnp.where(legal_actions(mask), logits, ILLEGAL)


def flatten_observations(obs) -> jax.Array:
    """A batch of observations ``[B, ...]`` (an array, or a dict of arrays) as f32 ``[B, D]``:
    each leaf flattened, in ``jax.tree.leaves`` order (a dict's sorted keys), and concatenated.
    An array observation is its own only leaf."""
    leaves = jax.tree.leaves(obs)
    flat = [leaf.reshape(leaf.shape[0], -1).astype(jnp.float32) for leaf in leaves]
    return flat[0] if len(flat) == 1 else jnp.concatenate(flat, axis=-1)


class MLP(nn.Module):
    """Flatten ``[B, ...] -> [B, D]`` (a dict observation: each leaf flattened, then
    concatenated, :func:`flatten_observations`), then dense layers with an activation after each
    (and, with ``layer_norm``, a LayerNorm between the dense layer and its activation)."""

    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs):
        x = flatten_observations(obs)
        for size in self.hidden_sizes:
            x = nn.Dense(size, kernel_init=_orthogonal(np.sqrt(2)))(x)
            if self.layer_norm:
                x = nn.LayerNorm()(x)
            x = ACTIVATIONS[self.activation](x)
        return x


def _normalised(x, layer_norm: bool):
    """``x`` through a LayerNorm over its last axis (features, or channels of an image) when
    ``layer_norm``; else ``x``."""
    return nn.LayerNorm()(x) if layer_norm else x


def _images(obs, channels_first: bool):
    """``[B, C, H, W]`` (or ``[B, H, W, C]``) of any dtype -> f32 ``[B, H, W, C]``; integer
    pixels are scaled by 1/255, other dtypes only cast."""
    if isinstance(obs, dict):
        raise ConfigValueError(
            f"a convolutional torso takes image observations, and these are a dict of "
            f"{', '.join(sorted(obs))}: name a torso per entry with leaf_torsos "
            "(--agent.leaf-torsos KEY=TORSO; the entries not named are flattened into the MLP)"
        )
    if obs.ndim != 4:
        raise ValueError(
            f"a convolutional torso needs image batches [B, C, H, W] or [B, H, W, C], got shape "
            f"{obs.shape}"
        )
    x = obs.astype(jnp.float32)
    if jnp.issubdtype(obs.dtype, jnp.integer):
        x = x / 255.0
    return jnp.transpose(x, (0, 2, 3, 1)) if channels_first else x


class NatureCNN(nn.Module):
    """The DQN torso: ``[B, C, H, W] -> [B, hidden_size]``.

    Conv 32 8x8 stride 4, conv 64 4x4 stride 2, conv 64 3x3 stride 1 (valid padding), dense
    ``hidden_size`` (512), ReLU after each. ``uint8`` pixels are scaled to ``[0, 1]``; with
    ``channels_first=False`` the input is ``[B, H, W, C]``.

    Mnih et al., 2015, "Human-level control through deep reinforcement learning",
    https://www.nature.com/articles/nature14236.
    """

    hidden_size: int = 512
    channels_first: bool = True
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs):
        x = _images(obs, self.channels_first)
        for features, kernel, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
            x = nn.Conv(
                features,
                (kernel, kernel),
                (stride, stride),
                padding="VALID",
                kernel_init=_orthogonal(np.sqrt(2)),
            )(x)
            x = nn.relu(_normalised(x, self.layer_norm))
        x = x.reshape(x.shape[0], -1)
        x = nn.Dense(self.hidden_size, kernel_init=_orthogonal(np.sqrt(2)))(x)
        return nn.relu(_normalised(x, self.layer_norm))


class MinAtarCNN(nn.Module):
    """The MinAtar torso: ``[B, C, H, W] -> [B, hidden_size]``.

    Conv 16 3x3 stride 1 (valid padding), dense ``hidden_size`` (128), ReLU after each; with
    ``layer_norm`` a LayerNorm before each ReLU (PQN's MinAtar network). Boolean or integer
    frames are cast (integers scaled by 1/255); gymnax's MinAtar frames are ``[H, W, C]``, so
    they take ``channels_first=False``. Its one convolution has stride 1, so its gradient takes
    :mod:`podracer.util.ops`' loop-friendly form on XLA:CPU.

    Young and Tian, 2019, "MinAtar", https://arxiv.org/abs/1903.03176.
    """

    hidden_size: int = 128
    channels_first: bool = True
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs):
        x = _images(obs, self.channels_first)
        x = nn.Conv(
            16,
            (3, 3),
            padding="VALID",
            kernel_init=_orthogonal(np.sqrt(2)),
            conv_general_dilated=ops.conv_general_dilated,
        )(x)
        x = nn.relu(_normalised(x, self.layer_norm)).reshape(x.shape[0], -1)
        x = nn.Dense(self.hidden_size, kernel_init=_orthogonal(np.sqrt(2)))(x)
        return nn.relu(_normalised(x, self.layer_norm))


def _conv3x3(channels: int) -> nn.Conv:
    """A 3x3 stride-1 ``SAME`` convolution whose gradient XLA:CPU runs fast inside loops
    (:mod:`podracer.util.ops`; the same values, and JAX's own gradient on other backends)."""
    return nn.Conv(channels, (3, 3), padding="SAME", conv_general_dilated=ops.conv_general_dilated)


class _ResidualBlock(nn.Module):
    """``x + conv(relu(conv(relu(x))))``, 3x3 convolutions keeping the channel count."""

    @nn.compact
    def __call__(self, x):
        channels = x.shape[-1]
        y = _conv3x3(channels)(nn.relu(x))
        y = _conv3x3(channels)(nn.relu(y))
        return x + y


class ImpalaResNet(nn.Module):
    """The IMPALA ("deep") torso: ``[B, C, H, W] -> [B, hidden_size]``.

    For each of ``channels`` (16, 32, 32): conv 3x3, max-pool 3x3 stride 2, two residual blocks;
    then ReLU, dense ``hidden_size`` (256), ReLU. ``uint8`` pixels are scaled to ``[0, 1]``; with
    ``channels_first=False`` the input is ``[B, H, W, C]``.

    Espeholt et al., 2018, "IMPALA", https://arxiv.org/abs/1802.01561, figure 3 (right).
    """

    channels: Sequence[int] = (16, 32, 32)
    hidden_size: int = 256
    channels_first: bool = True

    @nn.compact
    def __call__(self, obs):
        x = _images(obs, self.channels_first)
        for channels in self.channels:
            x = _conv3x3(channels)(x)
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
            x = _ResidualBlock()(x)
            x = _ResidualBlock()(x)
        x = nn.relu(x).reshape(x.shape[0], -1)
        return nn.relu(nn.Dense(self.hidden_size)(x))


TORSOS = ("mlp", "minatar_cnn", "nature_cnn", "impala_resnet")
"""The torso names :func:`make_torso` accepts."""


def make_torso(
    name: str,
    hidden_sizes: Sequence[int] = (64, 64),
    activation: str = "tanh",
    channels_first: bool = True,
    layer_norm: bool = False,
    leaf_torsos: Sequence[tuple[str, str]] = (),
    module_name: str | None = None,
) -> nn.Module:
    """A torso by name (one of :data:`TORSOS`). ``hidden_sizes`` and ``activation`` are the
    MLP's; the convolutional torsos keep their papers' sizes and ReLUs, and read
    ``channels_first``. ``layer_norm`` puts a LayerNorm before each activation (the MLP, the
    MinAtar and the Nature CNN; the IMPALA ResNet has none). With ``leaf_torsos`` (pairs of a
    dict observation's key and a torso name), :class:`LeafTorsos` for dict observations.
    ``module_name``: the flax module's name (None: flax names it)."""
    module_kwargs = {} if module_name is None else {"name": module_name}
    if leaf_torsos:
        return LeafTorsos(
            tuple(leaf_torsos), hidden_sizes, activation, channels_first, layer_norm,
            **module_kwargs,
        )  # fmt: skip
    if name == "mlp":
        return MLP(hidden_sizes, activation, layer_norm, **module_kwargs)
    if name == "minatar_cnn":
        return MinAtarCNN(channels_first=channels_first, layer_norm=layer_norm, **module_kwargs)
    if name == "nature_cnn":
        return NatureCNN(channels_first=channels_first, layer_norm=layer_norm, **module_kwargs)
    if name == "impala_resnet":
        if layer_norm:
            raise ConfigValueError(
                "torso 'impala_resnet' has no LayerNorm: turn layer_norm off, or choose one of "
                "mlp, minatar_cnn, nature_cnn"
            )
        return ImpalaResNet(channels_first=channels_first, **module_kwargs)
    raise ConfigValueError(f"unknown torso {name!r}: choose one of {', '.join(TORSOS)}")


class LeafTorsos(nn.Module):
    """A torso for dict observations with a torso per entry: each key of ``leaf_torsos`` goes
    through its own torso (a CNN for an image entry, say), the entries not named are flattened,
    concatenated and go through one MLP (``hidden_sizes``, ``activation``), and the features
    are concatenated (the named entries' in key order, then the MLP's)."""

    leaf_torsos: tuple[tuple[str, str], ...]
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    channels_first: bool = True
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs):
        named = dict(self.leaf_torsos)
        keys = sorted(obs) if isinstance(obs, dict) else []
        missing = sorted(set(named) - set(keys))
        if missing:
            given = f"a dict of {', '.join(keys)}" if keys else "an array"
            raise ConfigValueError(
                f"leaf_torsos names {', '.join(missing)}, which the observations do not have: "
                f"they are {given}"
            )
        features = [
            make_torso(
                named[key], self.hidden_sizes, self.activation, self.channels_first,
                self.layer_norm, module_name=f"leaf_{key}",
            )(obs[key])
            for key in keys
            if key in named
        ]  # fmt: skip
        rest = {key: obs[key] for key in keys if key not in named}
        if rest:
            features.append(MLP(self.hidden_sizes, self.activation, self.layer_norm)(rest))
        return jnp.concatenate(features, axis=-1)


def _add_policy_and_value_heads(module: nn.Module) -> None:
    """The actor-critics' linear heads, set up on ``module``: logits (or means), a value, and
    with continuous actions a log standard deviation (a head or one free parameter)."""
    module.policy_head = nn.Dense(module.num_actions, kernel_init=_orthogonal(0.01))
    module.value_head = nn.Dense(1, kernel_init=_orthogonal(1.0))
    if module.continuous and module.state_dependent_std:
        module.log_std_head = nn.Dense(module.num_actions, kernel_init=_orthogonal(0.01))
    elif module.continuous:
        module.log_std = module.param("log_std", nn.initializers.zeros, (module.num_actions,))


def mask_outputs(module: nn.Module, outputs, mask):
    """A discrete policy's logits (or a Q-network's q-values) with the illegal actions'
    at :data:`ILLEGAL` (:func:`mask_logits`); a Gaussian's outputs, or no ``mask``: unchanged.
    ``outputs`` may be ``(policy, value)``, whose policy is masked."""
    if mask is None or getattr(module, "continuous", False):
        return outputs
    if isinstance(outputs, tuple):
        return (mask_logits(outputs[0], mask), *outputs[1:])
    return mask_logits(outputs, mask)


def _policy_outputs(module: nn.Module, x):
    """Logits, or ``(mean, log_std)`` with continuous actions, from the policy's features."""
    out = module.policy_head(x)
    if not module.continuous:
        return out
    if module.state_dependent_std:
        return out, module.log_std_head(x)
    return out, jnp.broadcast_to(module.log_std, out.shape)


class ActorCritic(nn.Module):
    """Actor-critic: ``obs [B, ...] -> (policy [B, ...], value [B])``.

    The policy output is the logits ``[B, num_actions]`` of a categorical policy, or, with
    ``continuous``, the mean and log standard deviation ``([B, num_actions], [B, num_actions])``
    of a diagonal Gaussian (``num_actions`` is then the action's size): the log standard
    deviation is a free parameter ``log_std [num_actions]`` (initialised to 0) shared by every
    state, as in the PPO implementation details of Huang et al. (2022) and Brax's PPO, or with
    ``state_dependent_std`` a second dense head of the actor's torso. The head that turns it into
    actions is :mod:`podracer.agents.policy`'s.

    With ``shared_torso`` one torso feeds both heads; otherwise actor and critic have torsos of
    their own (as in the PPO implementation details of Huang et al., 2022). ``torso`` picks the
    torso by name (:func:`make_torso`): the MLP by default, or ``"nature_cnn"`` /
    ``"impala_resnet"`` for images (``channels_first`` says their layout). Heads use orthogonal
    initialisation with gain 0.01 (policy) and 1 (value).
    """

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    shared_torso: bool = False
    torso: str = "mlp"
    channels_first: bool = True
    continuous: bool = False
    state_dependent_std: bool = False
    leaf_torsos: tuple[tuple[str, str], ...] = ()

    def setup(self):
        def torso():
            return make_torso(
                self.torso, self.hidden_sizes, self.activation, self.channels_first,
                leaf_torsos=self.leaf_torsos,
            )  # fmt: skip

        self.actor_torso = torso()
        self.critic_torso = self.actor_torso if self.shared_torso else torso()
        _add_policy_and_value_heads(self)

    def __call__(self, obs):
        return self.policy(obs), self.value(obs)

    def policy(self, obs):
        obs, mask = split_action_mask(obs)
        return mask_outputs(self, _policy_outputs(self, self.actor_torso(obs)), mask)

    def value(self, obs):
        obs, _ = split_action_mask(obs)
        return self.value_head(self.critic_torso(obs))[..., 0]


class QNetwork(nn.Module):
    """``obs [B, ...] -> q-values [B, A]``: a torso by name (:func:`make_torso`; the MLP by
    default, with a LayerNorm before each activation with ``layer_norm``, as PQN's network),
    then a linear head, or with ``dueling`` a dueling one, ``q = v + a - mean(a)`` (Wang et al.,
    2016, https://arxiv.org/abs/1511.06581)."""

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "relu"
    layer_norm: bool = False
    torso: str = "mlp"
    channels_first: bool = True
    dueling: bool = False
    leaf_torsos: tuple[tuple[str, str], ...] = ()

    @nn.compact
    def __call__(self, obs):
        obs, mask = split_action_mask(obs)
        torso = make_torso(
            self.torso, self.hidden_sizes, self.activation, self.channels_first, self.layer_norm,
            leaf_torsos=self.leaf_torsos,
        )  # fmt: skip
        x = torso(obs)
        if not self.dueling:
            return mask_logits(nn.Dense(self.num_actions)(x), mask)
        value = nn.Dense(1)(x)
        advantage = nn.Dense(self.num_actions)(x)
        return mask_logits(value + advantage - jnp.mean(advantage, axis=-1, keepdims=True), mask)


MEMORIES = ("none", "gru", "lstm")
"""The ``memory`` of a network: none (feed-forward), or a recurrent cell after the torso."""


def make_cell(memory: str, size: int) -> nn.Module:
    """flax's recurrent cell of ``memory`` (``gru``: :class:`flax.linen.GRUCell`; ``lstm``:
    :class:`flax.linen.OptimizedLSTMCell`) with ``size`` features."""
    if memory == "gru":
        return nn.GRUCell(size)
    if memory == "lstm":
        return nn.OptimizedLSTMCell(size)
    raise ConfigValueError(f"memory={memory!r} has no cell: choose one of gru, lstm")


def initial_carry(memory: str, size: int, batch: int):
    """The cell's carry at an episode's start, ``[batch, size]`` zeros (``(c, h)`` for an
    LSTM, flax's layout)."""
    zeros = jnp.zeros((batch, size), jnp.float32)
    return zeros if memory == "gru" else (zeros, zeros)


class RecurrentBase(nn.Module):
    """The parts every network with memory has: ``embed`` (its torso ``body``), ``core`` (its
    ``cell``, one step of flax's GRU or LSTM) and ``heads``; ``__call__(carry, obs)`` is one
    step of all three. A subclass that keeps this ``core`` is re-run over sequences by
    :mod:`podracer.core.cells` (the same maths, faster); one that overrides it, by a scan of
    its own ``core``."""

    def __call__(self, carry, obs):
        carry, h = self.core(carry, self.embed(obs))
        return carry, mask_outputs(self, self.heads(h), split_action_mask(obs)[1])

    def embed(self, obs):
        return self.body(split_action_mask(obs)[0])

    def core(self, carry, x):
        return self.cell(carry, x)


class RecurrentActorCritic(RecurrentBase):
    """Actor-critic with memory: ``obs [N, ...] -> torso -> recurrent cell -> (policy, value)``.

    One torso (:func:`make_torso`) feeds the cell (:func:`make_cell`), whose output feeds a
    policy head (logits, or a Gaussian's mean and log standard deviation as in
    :class:`ActorCritic`) and a value head, each a hidden layer of ``memory_size`` units (with
    the torso's activation) and a linear layer: the cell's output is bounded (a tanh), and a
    linear value head on it learns returns of CartPole's scale far more slowly (measured:
    PureJaxRL's ``ppo_rnn.py`` with linear heads ended at 201 after 5e5 steps, against 500
    with its hidden layers). The learner calls the parts apart
    (:mod:`podracer.core.memory`): :meth:`embed` over a whole trajectory at once, :meth:`core`
    step by step, :meth:`heads` over the whole trajectory again; ``__call__(carry, obs)`` is one
    step of all three. PureJaxRL's ``ppo_rnn.py`` has the same shape (an embedding, a GRU, two
    heads).
    """

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    torso: str = "mlp"
    channels_first: bool = True
    continuous: bool = False
    state_dependent_std: bool = False
    memory: str = "gru"
    memory_size: int = 128
    leaf_torsos: tuple[tuple[str, str], ...] = ()

    def setup(self):
        self.body = make_torso(
            self.torso, self.hidden_sizes, self.activation, self.channels_first,
            leaf_torsos=self.leaf_torsos,
        )  # fmt: skip
        self.cell = make_cell(self.memory, self.memory_size)
        self.policy_hidden = nn.Dense(self.memory_size, kernel_init=_orthogonal(np.sqrt(2)))
        self.value_hidden = nn.Dense(self.memory_size, kernel_init=_orthogonal(np.sqrt(2)))
        _add_policy_and_value_heads(self)

    def heads(self, h):
        return self.policy(h), self.value(h)

    def policy(self, h):
        x = ACTIVATIONS[self.activation](self.policy_hidden(h))
        return _policy_outputs(self, x)

    def value(self, h):
        return self.value_head(ACTIVATIONS[self.activation](self.value_hidden(h)))[..., 0]


class RecurrentQNetwork(RecurrentBase):
    """A Q-network with memory: ``obs [N, ...] -> torso -> recurrent cell -> q-values [N, A]``
    (the torso as :class:`QNetwork`'s, with a LayerNorm before each activation with
    ``layer_norm``; then a hidden layer of ``memory_size`` units and a linear or dueling head,
    as :class:`RecurrentActorCritic`'s heads). Its parts as :class:`RecurrentActorCritic`'s:
    :meth:`embed`, :meth:`core`, :meth:`heads`."""

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "relu"
    layer_norm: bool = False
    torso: str = "mlp"
    channels_first: bool = True
    dueling: bool = False
    memory: str = "gru"
    memory_size: int = 128
    leaf_torsos: tuple[tuple[str, str], ...] = ()

    def setup(self):
        self.body = make_torso(
            self.torso, self.hidden_sizes, self.activation, self.channels_first, self.layer_norm,
            leaf_torsos=self.leaf_torsos,
        )  # fmt: skip
        self.cell = make_cell(self.memory, self.memory_size)
        self.hidden = nn.Dense(self.memory_size, kernel_init=_orthogonal(np.sqrt(2)))
        self.norm = nn.LayerNorm() if self.layer_norm else None
        self.q_head = nn.Dense(self.num_actions)
        if self.dueling:
            self.v_head = nn.Dense(1)

    def heads(self, h):
        x = self.hidden(h)
        x = ACTIVATIONS[self.activation](self.norm(x) if self.norm is not None else x)
        if not self.dueling:
            return self.q_head(x)
        advantage = self.q_head(x)
        return self.v_head(x) + advantage - jnp.mean(advantage, axis=-1, keepdims=True)
