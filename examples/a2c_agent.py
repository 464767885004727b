"""A new agent in one file: advantage actor-critic (A2C), trained by its import path.

    cd examples
    podracer train --agent a2c_agent:SPEC                       # Anakin, CartPole
    podracer train --agent a2c_agent:SPEC --agent.lr 3e-3 --arch.num-seeds 4
    podracer train --agent a2c_agent:SPEC --arch sebulba        # envpool CartPole
    podracer sweep --agent a2c_agent:SPEC --seeds 2 --sweep.lr 1e-3,3e-3
    podracer train --agent a2c_agent:SPEC --population 8 --population.hparams lr
    python a2c_agent.py                                         # the same from Python

The walk-through is ``docs/agents.md``. Everything an agent is: a frozen config validated in
``__post_init__``, ``make_agent(config, action_spec, num_updates) -> Agent`` (``init``, ``act``,
``prepare``, ``loss``: pure functions, params explicit), ``make_optimizer(config, num_updates)``,
and one ``AgentSpec`` that names them (``SPEC`` below). Both loops, sweeps and populations run it
unchanged through the one learner core (``make_learner``); its config fields become
``--agent.FIELD`` flags.

Mnih et al., 2016, "Asynchronous methods for deep reinforcement learning",
https://arxiv.org/abs/1602.01783 (the synchronous variant).
"""

from __future__ import annotations

import dataclasses
import json
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from podracer.agents import AgentSpec, Space
from podracer.agents.optim import clipped_adam
from podracer.agents.policy import make_categorical_act, select
from podracer.agents.spec import num_actions
from podracer.core.returns import gae
from podracer.networks import ActorCritic
from podracer.types import ActionSpec, Agent, Trajectory
from podracer.util.validation import check_layer_sizes, check_positive, check_range


@dataclasses.dataclass(frozen=True)
class A2CConfig:
    """A2C hyper-parameters."""

    lr: float = 1e-3
    """Adam learning rate."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE trace parameter (1.0: Monte-Carlo returns bootstrapped at the rollout's end)."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Global gradient norm clip (0 disables it)."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of the MLP torsos."""
    num_epochs: int = 1
    """SGD passes over each batch (A2C: one)."""
    num_minibatches: int = 1
    """Minibatches per pass (A2C: one gradient step on the whole batch)."""

    def __post_init__(self):
        check_positive(self, "lr", "num_epochs", "num_minibatches")
        check_range(self, "gamma", 0.0, 1.0)
        check_range(self, "gae_lambda", 0.0, 1.0)
        check_range(self, "ent_coef", 0.0, None)
        check_range(self, "vf_coef", 0.0, None)
        check_range(self, "max_grad_norm", 0.0, None)
        check_layer_sizes(self, "hidden_sizes")


class A2CBatch(NamedTuple):
    """One sample per transition, ``[N]`` with ``N = T * B``."""

    obs: jax.Array
    action: jax.Array  # i32
    advantage: jax.Array  # GAE, not normalised
    target: jax.Array  # the value target: advantage + v(obs)


def make_agent(config: A2CConfig, action_spec: ActionSpec | int, num_updates: int) -> Agent:
    """A2C as an :class:`~podracer.types.Agent` for a discrete ``action_spec`` (``num_updates``,
    the run's length, would set a schedule over the run; A2C has none)."""
    del num_updates
    network = ActorCritic(
        num_actions=num_actions(action_spec, "a2c"), hidden_sizes=tuple(config.hidden_sizes)
    )

    def init(key, example_obs):
        return network.init(key, example_obs[None])

    def values(params, obs):
        num_steps, num_envs = obs.shape[:2]
        flat = obs.reshape(num_steps * num_envs, *obs.shape[2:])
        return network.apply(params, flat, method=ActorCritic.value).reshape(num_steps, num_envs)

    def prepare(params, agent_state, traj: Trajectory, mean_fn):
        # Targets once per update, from the time-major trajectory [T, B]: the value of
        # bootstrap_obs[t] bootstraps step t (inside an episode, at a truncation, at t = T - 1).
        # Both values come from the params being learnt: the actors' (traj.behaviour.value) may
        # lag them by several updates in Sebulba.
        del agent_state, mean_fn  # no state of its own, no batch statistics
        num_steps, num_envs = traj.reward.shape
        v_t = values(params, traj.bootstrap_obs)
        v_tm1 = values(params, traj.obs)
        advantage = gae(
            traj.reward,
            v_tm1,
            v_t,
            traj.terminated,
            traj.truncated,
            config.gamma,
            config.gae_lambda,
        )
        batch = A2CBatch(traj.obs, traj.action, advantage, advantage + v_tm1)
        # A leading sample axis on every leaf: the learner shuffles and cuts along it.
        return jax.tree.map(lambda x: x.reshape(num_steps * num_envs, *x.shape[2:]), batch)

    def loss(params, batch: A2CBatch, key):
        del key
        logits, value = network.apply(params, batch.obs)
        log_probs = jax.nn.log_softmax(logits)
        pg_loss = -jnp.mean(select(log_probs, batch.action) * batch.advantage)
        value_loss = 0.5 * jnp.mean(jnp.square(value - batch.target))
        entropy = -jnp.mean(jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1))
        total = pg_loss + config.vf_coef * value_loss - config.ent_coef * entropy
        metrics = {"pg_loss": pg_loss, "value_loss": value_loss, "entropy": entropy}
        return total, {"loss": total, **metrics}

    return Agent(init=init, act=make_categorical_act(network), prepare=prepare, loss=loss)


def make_optimizer(config: A2CConfig, num_updates: int) -> optax.GradientTransformation:
    del num_updates  # a constant learning rate
    return clipped_adam(config.lr, config.max_grad_norm)


SPEC = AgentSpec(
    name="a2c",
    config_cls=A2CConfig,
    make_agent=make_agent,
    make_optimizer=make_optimizer,
    default_env="gymnax:CartPole-v1",
    loop_defaults={"envs": 16, "rollout_len": 16},  # any loop: each maps them to its fields
    # The fields sweeps and populations may trace, and where a population may take them.
    search_space={
        "lr": Space(1e-5, 1e-1, log=True),
        "gamma": Space(0.8, 0.9999),
        "gae_lambda": Space(0.5, 1.0),
        "ent_coef": Space(0.0, 0.2),
        "vf_coef": Space(0.05, 2.0, log=True),
    },
)


def main() -> None:
    import tyro

    from podracer import agents
    from podracer.loops.anakin import AnakinConfig, train
    from podracer.runs.logging import ConsoleProgress

    agents.register(SPEC)  # podracer.agents.build finds it by its config class

    @dataclasses.dataclass(frozen=True)
    class Args:
        env: str = "gymnax:CartPole-v1"
        total_timesteps: int = 200_000
        seed: int = 0
        num_seeds: int = 1
        num_envs: int = 16
        rollout_len: int = 16
        a2c: A2CConfig = dataclasses.field(default_factory=A2CConfig)

    args = tyro.cli(Args)
    result = train(
        args.env,
        args.a2c,
        AnakinConfig(
            num_envs=args.num_envs, rollout_len=args.rollout_len, num_seeds=args.num_seeds
        ),
        seed=args.seed,
        total_timesteps=args.total_timesteps,
        progress=ConsoleProgress(args.total_timesteps),
    )
    print(json.dumps(result.summary))


if __name__ == "__main__":
    main()
