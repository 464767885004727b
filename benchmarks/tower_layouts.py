"""Three layouts of PPO's actor and critic towers, one SGD step each, on XLA:CPU.

    python benchmarks/tower_layouts.py
    python benchmarks/tower_layouts.py --batch 128 --rounds 7

The learner of ``anakin_throughput.py``'s configuration takes 16 SGD steps per update, each a
forward and backward pass of two 4-64-64 tanh MLPs (the actor's with 2 outputs, the critic's
with 1) on 128 samples, clipped Adam after. This times that step (the PPO loss's arithmetic:
clipped ratio, value error, entropy) with the towers laid out three ways:

- ``separate``: two MLPs, as ``podracer.networks.ActorCritic`` has them (6 matmuls);
- ``batched``: the first layers concatenated into one ``[4, 128]`` matmul, the second a batched
  ``[2, 64, 64]`` matmul (``einsum``), the heads apart — one matmul per layer;
- ``block_diagonal``: one 128-wide MLP whose second and output layers are block-diagonal (twice
  the multiply-adds of the second layer, three matmuls).

One JSON line per layout: microseconds per SGD step (best of ``--rounds`` runs of 50 x 16 steps),
GFLOP/s of the useful arithmetic, and the compile time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

OBS, HIDDEN, ACTIONS, STEPS, REPEATS = 4, 64, 2, 16, 50


def separate_params(key):
    keys = jax.random.split(key, 6)
    shapes = [(OBS, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, ACTIONS)] * 2
    shapes[5] = (HIDDEN, 1)
    w = [0.1 * jax.random.normal(k, s) for k, s in zip(keys, shapes, strict=True)]
    b = [jnp.zeros(s[1]) for s in shapes]
    return {"w": w, "b": b}


def separate(p, x):
    w, b = p["w"], p["b"]
    a = jnp.tanh(jnp.tanh(x @ w[0] + b[0]) @ w[1] + b[1]) @ w[2] + b[2]
    c = jnp.tanh(jnp.tanh(x @ w[3] + b[3]) @ w[4] + b[4]) @ w[5] + b[5]
    return a, c[:, 0]


def batched_params(p):
    w, b = p["w"], p["b"]
    return {
        "w1": jnp.concatenate([w[0], w[3]], 1),
        "b1": jnp.concatenate([b[0], b[3]]),
        "w2": jnp.stack([w[1], w[4]]),
        "b2": jnp.stack([b[1], b[4]]),
        "heads": (w[2], b[2], w[5], b[5]),
    }


def batched(p, x):
    h = jnp.tanh(x @ p["w1"] + p["b1"]).reshape(x.shape[0], 2, HIDDEN)
    h = jnp.tanh(jnp.einsum("bkh,kho->bko", h, p["w2"]) + p["b2"])
    wa, ba, wc, bc = p["heads"]
    return h[:, 0] @ wa + ba, (h[:, 1] @ wc + bc)[:, 0]


def block_params(p):
    w, b = p["w"], p["b"]
    w2 = jnp.zeros((2 * HIDDEN, 2 * HIDDEN)).at[:HIDDEN, :HIDDEN].set(w[1])
    w3 = jnp.zeros((2 * HIDDEN, ACTIONS + 1)).at[:HIDDEN, :ACTIONS].set(w[2])
    return {
        "w1": jnp.concatenate([w[0], w[3]], 1),
        "b1": jnp.concatenate([b[0], b[3]]),
        "w2": w2.at[HIDDEN:, HIDDEN:].set(w[4]),
        "b2": jnp.concatenate([b[1], b[4]]),
        "w3": w3.at[HIDDEN:, ACTIONS:].set(w[5]),
        "b3": jnp.concatenate([b[2], b[5]]),
    }


def block_diagonal(p, x):
    h = jnp.tanh(jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"])
    out = h @ p["w3"] + p["b3"]
    return out[:, :ACTIONS], out[:, ACTIONS]


def ppo_loss(forward, params, obs, action, advantage, target):
    logits, value = forward(params, obs)
    log_probs = jax.nn.log_softmax(logits)
    taken = jnp.sum(log_probs * jax.nn.one_hot(action, ACTIONS), -1)
    ratio = jnp.exp(taken - jax.lax.stop_gradient(taken))
    pg = -jnp.mean(jnp.minimum(ratio * advantage, jnp.clip(ratio, 0.8, 1.2) * advantage))
    entropy = -jnp.mean(jnp.sum(jnp.exp(log_probs) * log_probs, -1))
    return pg + 0.5 * jnp.mean(jnp.square(value - target)) - 0.01 * entropy


def make_run(forward):
    optimizer = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(2.5e-4, eps=1e-5))

    def run(params, data):
        def step(carry, minibatch):
            params, opt_state = carry
            grads = jax.grad(lambda p: ppo_loss(forward, p, *minibatch))(params)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), None

        def update(carry, _):
            return jax.lax.scan(step, carry, data)[0], None

        carry = (params, optimizer.init(params))
        return jax.lax.scan(update, carry, None, length=REPEATS)[0][0]

    return jax.jit(run)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128, help="samples per minibatch")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    shape = (STEPS, args.batch)
    data = (
        jnp.asarray(rng.normal(size=(*shape, OBS)), jnp.float32),
        jnp.asarray(rng.integers(0, ACTIONS, shape)),
        jnp.asarray(rng.normal(size=shape), jnp.float32),
        jnp.asarray(rng.normal(size=shape), jnp.float32),
    )
    base = separate_params(jax.random.key(0))
    layouts = {
        "separate": (separate, base),
        "batched": (batched, batched_params(base)),
        "block_diagonal": (block_diagonal, block_params(base)),
    }
    # Useful multiply-adds per sample, forward; the backward pass is about twice that.
    macs = 2 * OBS * HIDDEN + 2 * HIDDEN * HIDDEN + HIDDEN * (ACTIONS + 1)
    flops = 2 * 3 * macs * args.batch
    runs, compile_s = {}, {}
    for name, (forward, params) in layouts.items():
        start = time.perf_counter()
        runs[name] = make_run(forward).lower(params, data).compile()
        compile_s[name] = time.perf_counter() - start
        jax.block_until_ready(runs[name](params, data))
    best = dict.fromkeys(layouts, float("inf"))
    for _ in range(args.rounds):  # interleaved, so every layout sees the same machine
        for name, (_, params) in layouts.items():
            start = time.perf_counter()
            jax.block_until_ready(runs[name](params, data))
            best[name] = min(best[name], (time.perf_counter() - start) / (REPEATS * STEPS))
    for name in layouts:
        line = {
            "config": f"ppo-sgd-step-{name}",
            "batch": args.batch,
            "us_per_sgd_step": best[name] * 1e6,
            "useful_gflops": flops / best[name] / 1e9,
            "compile_s": compile_s[name],
            "backend": jax.default_backend(),
        }
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    sys.exit(main())
