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
    + [k>0]\\, \\mathrm{CE}(\\phi(h(r_{t+k-1})), r_k) m^r_k \right],

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

import jax
import jax.numpy as jnp
import optax

from podracer.agents.dqn import init_target, target_update
from podracer.agents.muzero_model import (
    Model,
    MuZeroNetwork,
    logits_to_scalar,
    make_search,
    model_of,
    scalar_to_logits_target,
    scale_gradient,
)
from podracer.agents.spec import AgentSpec, Space, num_actions
from podracer.core import memory
from podracer.core.learner.buffers import ReplayFields
from podracer.core.learner.replay import Replay, ReplayBatch, n_step_targets
from podracer.errors import ConfigError
from podracer.networks import (
    ACTIVATIONS,
    TORSOS,
)
from podracer.types import (
    ActionSpec,
    ActorOutput,
    Agent,
    LossOutput,
    Trajectory,
)
from podracer.util.validation import (
    check_choice,
    check_fraction,
    check_non_negative,
    check_positive,
    check_range,
)

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
        check_non_negative(self, "gumbel_scale")
        check_fraction(self, "dirichlet_fraction")
        check_non_negative(self, "pb_c_init")
        check_fraction(self, "gamma")
        check_non_negative(
            self, "max_grad_norm", "value_loss_weight", "reward_loss_weight", "policy_loss_weight"
        )
        check_fraction(self, "dynamics_gradient_scale")
        check_range(self, "tau", 0.0, 1.0, low_open=True)
        check_fraction(self, "reanalyse_fraction")
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


def prepare_steps(params, state, traj: Trajectory, mean_fn) -> Step:
    """MuZero's ``prepare``: the trajectory's steps, as they go into the replay's windows."""
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


def step_item(actions: int):
    """``item(obs) -> Step`` of ``jax.ShapeDtypeStruct`` s: one stored step (``Replay.item``)."""

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

    return item


def make_targets(config: MuZeroConfig, model: Model, search):
    """``targets_of(target_params, steps [b, W], key, reanalyse) -> (value [b, K + 1], policy
    [b, K + 1, A], Targets)``: the n-step value targets bootstrapped from the target network,
    and the stored search policies, the first ``reanalyse`` windows' searched afresh with the
    target network (all without gradient)."""
    k, n = config.num_unroll_steps, config.n_step

    def targets_of(target_params, steps: Step, key, reanalyse: int):
        targets = window_targets(
            steps.reward, steps.terminated, steps.truncated, config.gamma, n, k
        )
        b = steps.reward.shape[0]
        rows = jnp.arange(b)[:, None]
        boot_obs = jax.tree.map(lambda x: x[rows, targets.bootstrap_index], steps.bootstrap_obs)
        _, boot_value_logits = model.predict(
            target_params, model.represent(target_params, memory.merge_leading_axes(boot_obs))
        )
        boot_value = logits_to_scalar(boot_value_logits, config.support_size).reshape(b, k + 1)
        value = targets.value + targets.discount * boot_value
        policy = steps.search_policy[:, : k + 1]
        if reanalyse:
            first = jax.tree.map(lambda x: x[:reanalyse, : k + 1], steps.obs)
            obs = memory.merge_leading_axes(first)
            fresh = search(target_params, obs, key).weights.reshape(reanalyse, k + 1, -1)
            policy = policy.at[:reanalyse].set(fresh)
        return jax.lax.stop_gradient(value), jax.lax.stop_gradient(policy), targets

    return targets_of


def _masked_mean(x, m):
    return jnp.sum(x * m) / jnp.maximum(jnp.sum(m), 1.0)


def make_loss(config: MuZeroConfig, model: Model, targets_of):
    """MuZero's ``loss(params, batch: ReplayBatch, key) -> (loss, LossOutput)``: the model
    unrolled ``K`` steps from each window's first observation, cross-entropies of the policy,
    value and reward against their targets (:func:`make_targets`), the unrolled positions
    weighted ``1/K``, each window by its importance weight; the new priority is the root's
    ``|search value - value target|``."""
    k = config.num_unroll_steps

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
        metrics = {
            "loss": total,
            "value_loss": _masked_mean(value_ce, targets.value_mask),
            "reward_loss": _masked_mean(reward_ce, targets.reward_mask),
            "policy_loss": _masked_mean(policy_ce, targets.policy_mask),
            "value_target": jnp.mean(value_target[:, 0]),
            "value": jnp.mean(logits_to_scalar(value[:, 0], config.support_size)),
        }
        return total, LossOutput(metrics, priority)

    return loss


def make_agent(config: MuZeroConfig, action_spec: ActionSpec | int, num_updates: int = 1) -> Agent:
    """MuZero as an :class:`~podracer.types.Agent` with a replay of windows (see the module's
    docstring)."""
    del num_updates  # no schedule over the run
    actions = num_actions(action_spec, "muzero")
    network = MuZeroNetwork(config, actions)
    model = model_of(network)
    search = make_search(config, model, actions)

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

    item = step_item(actions)
    return Agent(
        init=init,
        act=act,
        prepare=prepare_steps,
        loss=make_loss(config, model, make_targets(config, model, search)),
        greedy=greedy,
        init_state=init_target,
        update_state=target_update(config),
        replay=Replay(config, item, window=config.window, period=1, batch_size=config.batch_size),
    )


SPEC = AgentSpec(
    name="muzero",
    config_cls=MuZeroConfig,
    make_agent=make_agent,
    default_env="catch",
    loop_defaults={"envs": 16, "rollout_len": 8},
    search_space={
        "lr": Space(1e-5, 1e-2, log=True),
        "gamma": Space(0.8, 0.9999),
        "tau": Space(1e-3, 1.0, log=True),
        "value_loss_weight": Space(0.05, 2.0, log=True),
    },
    # 2e5 steps on catch, not the command line's 5e5 (eight minutes of a 2-core CPU at about
    # 1,100 steps/s): seed 0 returned 0.99 from 5.5e4 steps on and 1.00 at 5e5
    # (docs/defaults.md).
    presets={"catch": {"total_timesteps": 200_000}},
)
