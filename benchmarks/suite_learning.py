"""Learning on the JAX suites: a trained policy against a uniformly random legal one, one run.

    python benchmarks/suite_learning.py --agent ppo --env navix:Navix-Empty-5x5-v0 \\
        --total-timesteps 100000
    python benchmarks/suite_learning.py --agent ppo --env jumanji:Snake-v1 \\
        --total-timesteps 500000 --policy stochastic --out results.jsonl
    python benchmarks/suite_learning.py --agent ppo --env craftax:Craftax-Classic-Symbolic-v1 \\
        --total-timesteps 1000000 --episodes 64

Every flag that is not this script's own (``--episodes``, ``--policy``, ``--out``) is a
``podracer train`` flag, read as ``podracer train`` reads it (:func:`podracer.cli.parse.run_spec`):
``--agent``, ``--env``, ``--seed``, ``--total-timesteps``, ``--config``, ``--agent.FIELD``,
``--arch.FIELD``, ``--env-param``, ... with the environment family's preset
(:mod:`podracer.loops.presets`) applied under them as the command line applies it, and one XLA:CPU
device per core as the command line gives (:func:`podracer.parallel.use_cpu_cores`; one seed
runs on one of them). The run keeps no run directory: no checkpoints and no periodic evaluation
(``--eval-*`` and ``--checkpoint-*`` are read but do nothing here).

After training, in the same process:

- the trained policy plays ``--episodes`` FULL episodes (the system's evaluator,
  :func:`podracer.core.evaluation.make_evaluator`: one episode per environment, each played to its
  end and counted once), greedily (the action of the largest logit or q-value) and
  stochastically (sampled as when acting: PPO's categorical policy, DQN's epsilon-greedy at its
  final epsilon);
- a uniformly random LEGAL policy (``envs.random_legal_actions``: uniform among the actions the
  observation's ``action_mask`` allows, among all of them without one) plays as many full
  episodes, from the same initial states (the evaluator's key for seed ``--seed``).

``--policy-only`` skips the trained policy's other evaluation (on Craftax each one replays its
episodes' world generation: minutes on a CPU).

One JSON line on stdout: ``env``, ``agent``, ``seed``, ``total_steps`` (steps trained),
``policy`` (which of the trained policy's evaluations is ``trained_return``: ``--policy``,
default greedy), ``trained_return``, ``random_return``, ``ratio`` (``trained_return /
random_return``), ``margin`` (their difference), ``greedy_return``, ``stochastic_return`` and
their standard deviations, ``random_return_std``, ``random_length`` (the random policy's mean
episode length), ``unfinished``, ``episodes``, ``final_return`` (the training log's, which counts
the episodes that ended in the last rollouts and so favours short ones), ``train_s`` (training,
compiling included), ``eval_s``, ``seconds`` (the whole run), ``preset`` (the family whose preset
was applied, or null) and ``jax``, ``backend``, ``device_kind``. A policy's return is the mean
over its episodes of each episode's summed reward. An episode still running after
:data:`MAX_STEPS` steps counts with its return so far, as
:func:`podracer.core.evaluation.make_evaluator` counts it (``unfinished``: how many of the random
policy's did; the suites' time limits end every episode long before).
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from envs import random_legal_actions
from jsonl import emit

from podracer import agents, parallel, runs
from podracer.cli.parse import parse_selectors, run_spec
from podracer.core.evaluation import eval_key, evaluation_params
from podracer.loops.presets import preset_for
from podracer.runs.logging import make_logger

# (No JAX backend has started yet: main's use_cpu_cores still acts.)

POLICIES = ("greedy", "stochastic")
MAX_STEPS = 100_000
"""Steps after which an episode counts with its return so far: make_evaluator's default, which
the loops' evaluators use."""


def random_returns(env, num_episodes: int, key, *, max_steps: int = MAX_STEPS, env_params=None):
    """``(returns [num_episodes], lengths [num_episodes], unfinished)``: a uniformly random
    legal policy on ``num_episodes`` environments, each playing its first episode to its end (the
    structure and keys of :func:`podracer.core.evaluation.make_evaluator`, so the same ``key`` gives
    the same initial states as its ``evaluate(params, key)``)."""
    env_params = evaluation_params(env) if env_params is None else env_params
    reset = jax.vmap(env.reset, in_axes=(0, None))
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def run(key):
        reset_key, key = jax.random.split(key)
        state, ts = reset(jax.random.split(reset_key, num_episodes), env_params)

        def cond(carry):
            *_, finished, _, _, t = carry
            return (t < max_steps) & ~jnp.all(finished)

        def body(carry):
            state, obs, key, finished, returns, lengths, t = carry
            key, act_key, step_key = jax.random.split(key, 3)
            action = random_legal_actions(act_key, env.action_spec, obs, num_episodes)
            state, ts = step(jax.random.split(step_key, num_episodes), state, action, env_params)
            returns = returns + jnp.where(finished, 0.0, ts.reward)
            lengths = lengths + (~finished).astype(jnp.int32)
            finished = finished | ts.terminated | ts.truncated
            return state, ts.obs, key, finished, returns, lengths, t + 1

        zeros = jnp.zeros(num_episodes, jnp.float32)
        init = (state, ts.obs, key, jnp.zeros(num_episodes, bool), zeros, zeros.astype(jnp.int32))
        state, _, _, finished, returns, lengths, _ = jax.lax.while_loop(
            cond, body, (*init, jnp.zeros((), jnp.int32))
        )
        return returns, lengths, jnp.sum(~finished)

    returns, lengths, unfinished = jax.device_get(jax.jit(run)(key))
    return returns, lengths, int(unfinished)


def measure(
    spec,
    *,
    episodes: int = 128,
    policy: str = "greedy",
    both: bool = True,
    progress=None,
) -> dict:
    """Trains ``spec`` (a :class:`podracer.runs.RunSpec`) without a run directory, then
    evaluates the trained policy (greedy and stochastic; only ``policy`` without ``both``, the
    other's fields then None) and the random legal policy over ``episodes`` full episodes each;
    returns the record :func:`main` prints (without the ``preset`` and platform fields)."""
    if policy not in POLICIES:
        raise ValueError(f"policy={policy!r}: choose one of {', '.join(POLICIES)}")
    start = time.perf_counter()
    system = runs.build_system(spec)
    result = system.run(system.init(spec.seed), seed=spec.seed, progress=progress)
    train_s = time.perf_counter() - start
    summary = result.summary
    updates = summary["num_updates"]

    start = time.perf_counter()
    trained = dict.fromkeys(POLICIES)
    for name in POLICIES if both else (policy,):
        evaluate = system.evaluator(seed=spec.seed, episodes=episodes, greedy=name == "greedy")
        trained[name] = np.asarray(evaluate(result.state, updates))[0]  # member 0: seed
    # The evaluator's key of member 0 (podracer.loops.anakin's run_eval): the same initial states.
    key = jax.random.split(eval_key(spec.seed, updates), getattr(system.config, "num_seeds", 1))
    env = system.recipe.make_env()
    rand, lengths, unfinished = random_returns(env, episodes, key[0])
    eval_s = time.perf_counter() - start

    trained_return = float(trained[policy].mean())
    random_return = float(rand.mean())
    return {
        "env": spec.env,
        "agent": spec.agent,
        "seed": spec.seed,
        "total_steps": int(summary["total_steps"]),
        "policy": policy,
        "trained_return": trained_return,
        "random_return": random_return,
        "ratio": trained_return / random_return if random_return else float("nan"),
        "margin": trained_return - random_return,
        **{
            f"{name}_return{stat}": None if returns is None else float(fn(returns))
            for name, returns in trained.items()
            for stat, fn in (("", np.mean), ("_std", np.std))
        },
        "random_return_std": float(rand.std()),
        "random_length": float(lengths.mean()),
        "unfinished": unfinished,
        "episodes": episodes,
        "final_return": summary.get("final_return"),
        "train_s": train_s,
        "eval_s": eval_s,
    }


def main(argv=None) -> int:
    start = time.perf_counter()
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Every other flag is a `podracer train` flag (--agent, --env, --total-timesteps, "
        "--seed, --agent.FIELD, --arch.FIELD, ...).",
    )
    parser.add_argument("--episodes", type=int, default=128, help="full episodes per policy")
    parser.add_argument(
        "--policy", choices=POLICIES, default="greedy", help="the trained policy's headline figure"
    )
    parser.add_argument(
        "--policy-only",
        action="store_true",
        help="evaluate the trained policy only as --policy says (the other's fields null)",
    )
    parser.add_argument("--out", help="also append the JSON line to this file")
    args, train_argv = parser.parse_known_args(argv)
    if args.episodes < 1:
        parser.error(f"--episodes={args.episodes}: it must be >= 1")

    parallel.use_cpu_cores()  # as `podracer train` does, before JAX starts
    spec, _ = run_spec(parse_selectors(train_argv))  # prints the preset it applied on stderr
    preset = preset_for(agents.get(spec.agent), spec.env, spec.arch)
    logger = make_logger(None, spec.total_timesteps, console=True, tensorboard=False)
    try:
        record = measure(
            spec,
            episodes=args.episodes,
            policy=args.policy,
            both=not args.policy_only,
            progress=logger,
        )
    finally:
        logger.close()
    device = jax.devices()[0]
    record.update(
        seconds=time.perf_counter() - start,
        preset=None if preset is None else preset.family,
        jax=jax.__version__,
        backend=jax.default_backend(),
        device_kind=device.device_kind,
    )
    emit(record, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
