"""One learner update of an image agent, laid out in the ways ``make_learner`` offers (epoch and
minibatch loops as ``lax.scan`` or unrolled; gradients over whole minibatches or accumulated
over slices), on the default backend.

    python benchmarks/learner_unroll.py                       # PPO and IMPALA, IMPALA ResNet
    python benchmarks/learner_unroll.py --unrolls 1,true      # also straight-line (long compile)
    python benchmarks/learner_unroll.py --torsos nature_cnn,impala_resnet --agents ppo
    python benchmarks/learner_unroll.py --agents impala --unrolls 1 --microbatches 0 \
        --jax-conv-grad --num-envs 2 --repeats 1  # JAX's conv gradient in loops (minutes)

XLA:CPU runs JAX's convolution backward passes inside loops much slower than the same computation
outside one (jax-ml/jax#12868; ``podracer.util.ops`` gives the IMPALA ResNet a gradient that does
not suffer from it, ``--jax-conv-grad`` takes JAX's), and over a large batch slower per frame than
over a small one; this measures both on the batch Sebulba's Breakout benchmark uses (16
environments x 32 steps of 4 x 84 x 84 uint8 frames). One JSON line per configuration with the
seconds per update (``update_s``), environment steps learnt per second (``sps``), the compile
seconds, the peak memory and, in the same process, the seconds of the same SGD steps run one by one
as separate jitted calls (no loop, whole minibatches). The environment does not take part here; its
speed is in ``sebulba_throughput.py``'s ``env_only_sps``.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import jax
import jax.numpy as jnp
import numpy as np

from podracer import agents
from podracer.core.learner.build import make_learner
from podracer.types import ActorOutput, Trajectory
from podracer.util import ops


def example_trajectory(num_steps: int, num_envs: int, num_actions: int) -> Trajectory:
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 255, (num_steps, num_envs, 4, 84, 84), dtype=np.uint8)
    logits = rng.normal(size=(num_steps, num_envs, num_actions)).astype(np.float32)
    action = rng.integers(0, num_actions, (num_steps, num_envs)).astype(np.int32)
    log_prob = np.take_along_axis(jax.nn.log_softmax(logits), action[..., None], -1)[..., 0]
    return Trajectory(
        obs=obs,
        reward=rng.normal(size=(num_steps, num_envs)).astype(np.float32),
        terminated=rng.random((num_steps, num_envs)) < 0.01,
        truncated=np.zeros((num_steps, num_envs), bool),
        bootstrap_obs=np.roll(obs, -1, axis=0),
        behaviour=ActorOutput(
            action=action,
            log_prob=np.asarray(log_prob),
            value=np.zeros((num_steps, num_envs), np.float32),
            extras={"logits": logits},
        ),
    )


def timed(fn, *args, repeats: int):
    start = time.perf_counter()
    out = fn(*args)
    jax.block_until_ready(out)
    first = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(repeats):
        out = fn(*args)
    jax.block_until_ready(out)
    return first, (time.perf_counter() - start) / repeats


def bench(
    agent_name: str, torso: str, unroll, microbatch_steps: int, traj: Trajectory, repeats: int
) -> dict:
    entry = agents.get(agent_name)
    config = entry.config_cls(torso=torso, shared_torso=True)
    agent, optimizer = agents.build(config, 4, num_updates=1000)
    learner = make_learner(
        agent,
        optimizer,
        num_epochs=config.num_epochs,
        num_minibatches=config.num_minibatches,
        unroll=unroll,
        microbatch_steps=microbatch_steps,
    )
    state = learner.init(jax.random.key(0), traj.obs[0, 0])
    traj = jax.device_put(traj)
    update = jax.jit(learner.update)
    first, per_update = timed(update, state, traj, repeats=repeats)
    return {
        "agent": agent_name,
        "torso": torso,
        "unroll": unroll,
        "microbatch_steps": microbatch_steps,
        "backend": jax.default_backend(),
        "epochs": config.num_epochs,
        "minibatches": config.num_minibatches,
        "update_s": round(per_update, 4),
        "sps": round(traj.reward.size / per_update, 1),
        "compile_s": round(first - per_update, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def straight_line(agent_name: str, torso: str, traj: Trajectory, repeats: int) -> float:
    """The same SGD steps with no loop at all: one jitted step (gradient of the loss and the
    optimizer update) called once per minibatch from Python."""
    import optax

    entry = agents.get(agent_name)
    config = entry.config_cls(torso=torso, shared_torso=True)
    agent, optimizer = agents.build(config, 4, num_updates=1000)
    params = agent.init(jax.random.key(0), traj.obs[0, 0])
    opt_state = optimizer.init(params)
    batch = agent.prepare(params, (), jax.device_put(traj), jnp.mean)
    size = jax.tree.leaves(batch)[0].shape[0] // config.num_minibatches
    minibatch = jax.tree.map(lambda x: x[:size], batch)

    @jax.jit
    def sgd_step(params, opt_state, minibatch, key):
        # The minibatch is an argument: closed over, it would be a constant that XLA folds
        # through the whole network at compile time (minutes for a batch of frames).
        grads, _ = jax.grad(agent.loss, has_aux=True)(params, minibatch, key)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    def all_steps(params, opt_state):
        for i in range(config.num_epochs * config.num_minibatches):
            params, opt_state = sgd_step(params, opt_state, minibatch, jax.random.key(i))
        return params

    _, seconds = timed(all_steps, params, opt_state, repeats=repeats)
    return seconds


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="ppo,impala")
    parser.add_argument("--torsos", default="impala_resnet")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--rollout-len", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--unrolls", default="1", help="1 (the loops) and/or true (no loops: straight-line code)"
    )
    parser.add_argument(
        "--jax-conv-grad",
        action="store_true",
        help="the convolutions' gradient as JAX computes it (flax's default conv), not "
        "podracer.util.ops' loop-friendly one: the layout of a learner written with flax's convs "
        "and lax.scan loops (tens of times slower in loops on XLA:CPU: use a small batch)",
    )
    parser.add_argument(
        "--microbatches",
        default="0,32",
        help="gradient slice sizes in steps (0: whole minibatches), comma-separated",
    )
    args = parser.parse_args(argv)
    if args.jax_conv_grad:  # what podracer.networks passes to flax's Conv
        ops.conv_general_dilated = jax.lax.conv_general_dilated
    traj = example_trajectory(args.rollout_len, args.num_envs, num_actions=4)
    for agent_name in args.agents.split(","):
        for torso in args.torsos.split(","):
            loose = straight_line(agent_name, torso, traj, args.repeats)
            choices = {"true": True, "1": 1}
            for unroll in (choices[u] for u in args.unrolls.split(",")):
                for steps in (int(m) for m in args.microbatches.split(",")):
                    line = bench(agent_name, torso, unroll, steps, traj, args.repeats)
                    line["conv_grad"] = "jax" if args.jax_conv_grad else "podracer.util.ops"
                    line["separate_calls_s"] = round(loose, 4)
                    line["slowdown_vs_separate"] = round(line["update_s"] / loose, 2)
                    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
