"""The cost of the divergence check (``RunOptions.check_finite``) in Anakin's steps per second.

    python benchmarks/finite_check_cost.py            # PPO, CartPole, 4 and 64 envs x 128 steps
    python benchmarks/finite_check_cost.py --rounds 40

The check has two parts: on the device, every optimizer step computes the global norm of the
gradients (the ``grad_norm`` metric); on the host, every call's metrics go through
:func:`podracer.loops.common.check_finite`. This builds the same Anakin system twice, once as
it is and once with the learner's norm replaced by a constant (its cost before the check
existed), compiles both, then times one call of each in turn (in alternating order),
``--rounds`` times, so both see the same machine load; the host check is timed on the
metrics of one call.

One JSON line per size: ``sps_with`` and ``sps_without`` (medians over the rounds),
``device_cost`` (``1 - sps_with / sps_without``), ``host_check_us`` (one
``check_finite`` call) and ``host_cost`` (its share of one call's time).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from podracer.agents import PPOConfig
from podracer.core.learner import skeleton as learner_module
from podracer.loops.anakin import AnakinConfig, build
from podracer.loops.common import check_finite

UPDATES_PER_CALL = 10


def without_norm():
    """``optimizer_step`` as it was before the check: no gradient norm (a constant 0)."""
    step = learner_module.optimizer_step

    def no_norm(optimizer, params, opt_state, grads, axis_name):
        params, opt_state, _ = step(optimizer, params, opt_state, grads, axis_name)
        return params, opt_state, jnp.zeros(())

    return no_norm


def compiled_step(num_envs: int, plain: bool):
    config = AnakinConfig(num_envs=num_envs, rollout_len=128, updates_per_call=UPDATES_PER_CALL)
    original = learner_module.optimizer_step
    if plain:  # the learner looks the function up when it is built
        learner_module.optimizer_step = without_norm()
    try:
        system = build("gymnax:CartPole-v1", PPOConfig(), config, total_timesteps=10**8)
        state = system.init(0)
        step = system.make_step(UPDATES_PER_CALL).lower(state).compile()
    finally:
        learner_module.optimizer_step = original
    return step, state, config.steps_per_update * UPDATES_PER_CALL


def measure(num_envs: int, rounds: int) -> dict:
    with_step, with_state, steps = compiled_step(num_envs, plain=False)
    plain_step, plain_state, _ = compiled_step(num_envs, plain=True)
    times = {"with": [], "without": []}
    metrics = None
    for i in range(rounds + 2):  # the first two of each are warm-up
        for name in ("with", "without") if i % 2 else ("without", "with"):  # either first
            start = time.perf_counter()
            if name == "with":
                with_state, metrics = with_step(with_state)
                jax.block_until_ready(with_state)
            else:
                plain_state, _ = plain_step(plain_state)
                jax.block_until_ready(plain_state)
            times[name].append(time.perf_counter() - start)
    learner_metrics = jax.device_get(metrics.learner)
    start = time.perf_counter()
    for _ in range(1000):
        check_finite(learner_metrics, 0)
    host_s = (time.perf_counter() - start) / 1000
    with_s = statistics.median(times["with"][2:])
    without_s = statistics.median(times["without"][2:])
    assert np.isfinite(learner_metrics["grad_norm"]).all()
    return {
        "config": f"ppo-cartpole-{num_envs}",
        "num_envs": num_envs,
        "rounds": rounds,
        "sps_with": steps / with_s,
        "sps_without": steps / without_s,
        "device_cost": 1 - without_s / with_s,
        "host_check_us": host_s * 1e6,
        "host_cost": host_s / with_s,
        "backend": jax.default_backend(),
        "jax": jax.__version__,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[4, 64])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args(argv)
    for num_envs in args.num_envs:
        print(json.dumps(measure(num_envs, args.rounds)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
