"""The JAX environment suites: each family's environment alone and Anakin PPO on it, in one run.

    python benchmarks/envs.py                          # every family, 64 and 1,024 envs
    python benchmarks/envs.py --only craftax,navix --num-envs 64
    python benchmarks/envs.py --smoke                  # tiny sizes, one family, for the tests
    python benchmarks/envs.py --only playground --id playground=playground:CheetahRun

Families (``--only``, comma-separated; one representative id each, :data:`FAMILIES`):
``playground`` (``playground:CartpoleBalance``), ``craftax``
(``craftax:Craftax-Classic-Symbolic-v1``), ``jumanji`` (``jumanji:Snake-v1``), ``navix``
(``navix:Navix-Empty-5x5-v0``), ``xminigrid`` (``xminigrid:MiniGrid-Empty-5x5``),
``popgym_arcade`` (``popgym_arcade:CountRecallEasy``) and ``pgx`` (``pgx:2048``); ``--id
FAMILY=ID`` (repeated) measures another id of a family. A family whose library is not installed
is skipped with a line on stderr. The environments step as the loops step them
(:func:`podracer.types.step_batch`: Craftax resets only the episodes that ended).

One JSON line per family and environment count on stdout: ``env_only_sps`` (the environments
alone with uniformly random legal actions, vmapped and scanned as Anakin scans them, updates x
time, measured after compiling), ``env_compile_s``, ``sps`` (Anakin PPO's training steps per
second, after compiling; the family's PPO preset, :func:`podracer.loops.presets.preset_for`, with
``num_envs`` and ``rollout_len`` set here), ``compile_s``, ``ratio`` (``sps / env_only_sps``),
``peak_rss_mb`` (the process's peak so far; on an accelerator also ``peak_device_mb``) and
what was run (``env``, ``num_envs``, ``rollout_len``, ``jax``, ``backend``, ``device_kind``).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

import jax
import jax.numpy as jnp
from jsonl import emit

import podracer
from podracer import agents, envs
from podracer.errors import ConfigValueError
from podracer.loops.presets import preset_for
from podracer.networks import ILLEGAL, legal_actions
from podracer.types import BoundedActionSpec, split_action_mask, step_batch

FAMILIES: dict[str, str] = {
    "playground": "playground:CartpoleBalance",
    "craftax": "craftax:Craftax-Classic-Symbolic-v1",
    "jumanji": "jumanji:Snake-v1",
    "navix": "navix:Navix-Empty-5x5-v0",
    "xminigrid": "xminigrid:MiniGrid-Empty-5x5",
    "popgym_arcade": "popgym_arcade:CountRecallEasy",
    "pgx": "pgx:2048",
}


def random_legal_actions(key, spec, obs, num_envs: int):
    """Uniformly random actions: within a ``BoundedActionSpec``'s bounds, or among the legal
    actions of ``obs`` (a batch; all of them without a mask)."""
    if isinstance(spec, BoundedActionSpec):
        low = jnp.broadcast_to(jnp.asarray(spec.low, jnp.float32), spec.shape)
        high = jnp.broadcast_to(jnp.asarray(spec.high, jnp.float32), spec.shape)
        return jax.random.uniform(key, (num_envs, *spec.shape), minval=low, maxval=high)
    mask = split_action_mask(obs)[1]
    if mask is None:
        return jax.random.randint(key, (num_envs,), 0, spec.num_actions)
    return jax.random.categorical(key, jnp.where(legal_actions(mask), 0.0, ILLEGAL))


def env_only(env_id: str, num_envs: int, rollout_len: int, num_updates: int):
    """``(steps per second, compile seconds)`` of ``num_envs`` environments with random legal
    actions, scanned as Anakin scans them (updates x time); timed after compiling."""
    env = envs.make(env_id)
    params = env.default_params
    batched_step = step_batch(env)

    def steps(key):
        state, ts = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, num_envs), params)

        def one_step(carry, key):
            env_state, obs = carry
            action_key, step_key = jax.random.split(key)
            actions = random_legal_actions(action_key, env.action_spec, obs, num_envs)
            env_state, ts = batched_step(
                jax.random.split(step_key, num_envs), env_state, actions, params
            )
            return (env_state, ts.obs), jnp.sum(ts.reward)

        def one_update(carry, key):
            carry, rewards = jax.lax.scan(one_step, carry, jax.random.split(key, rollout_len))
            return carry, jnp.sum(rewards)

        _, rewards = jax.lax.scan(one_update, (state, ts.obs), jax.random.split(key, num_updates))
        return jnp.sum(rewards)

    run = jax.jit(steps)
    start = time.perf_counter()
    jax.block_until_ready(run(jax.random.key(0)))
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    jax.block_until_ready(run(jax.random.key(1)))
    return num_envs * rollout_len * num_updates / (time.perf_counter() - start), compile_s


def ppo(env_id: str, num_envs: int, rollout_len: int, num_updates: int) -> dict:
    """Anakin PPO with the family's preset (sizes set here): its summary."""
    spec = agents.get("ppo")
    preset = preset_for(spec, env_id, "anakin")
    config = podracer.PPOConfig(**(preset.agent if preset else {}))
    loop = podracer.AnakinConfig(num_envs=num_envs, rollout_len=rollout_len)
    result = podracer.train(
        env_id, config, loop, seed=0, total_timesteps=num_envs * rollout_len * num_updates
    )
    return result.summary


def peak_memory() -> dict[str, float]:
    out = {"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    stats = jax.devices()[0].memory_stats() or {}
    if "peak_bytes_in_use" in stats:
        out["peak_device_mb"] = stats["peak_bytes_in_use"] / 2**20
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(FAMILIES), help="families, comma-separated")
    parser.add_argument("--num-envs", default="64,1024", help="environment counts, comma-separated")
    parser.add_argument("--rollout-len", type=int, default=32)
    parser.add_argument("--updates", type=int, default=4, help="PPO updates timed per run")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (the tests)")
    parser.add_argument(
        "--id",
        action="append",
        default=[],
        metavar="FAMILY=ID",
        help="measure ID for FAMILY instead of its representative (repeatable)",
    )
    parser.add_argument("--out", help="also append the JSON lines to this file")
    args = parser.parse_args(argv)
    families = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in families if name not in FAMILIES]
    if unknown:
        parser.error(f"--only: unknown families {unknown}; choose among {', '.join(FAMILIES)}")
    ids = dict(FAMILIES)
    for given in args.id:
        family, _, env_id = given.partition("=")
        if family not in FAMILIES or not env_id.startswith(f"{family}:"):
            parser.error(
                f"--id {given!r}: expected FAMILY=ID with FAMILY among {', '.join(FAMILIES)} "
                "and ID of that family (playground=playground:CheetahRun)"
            )
        ids[family] = env_id
    counts = [int(n) for n in args.num_envs.split(",")]
    rollout_len, updates = args.rollout_len, args.updates
    if args.smoke:
        counts, rollout_len, updates = [4], 4, 2
    device = jax.devices()[0]
    for family in families:
        env_id = ids[family]
        for num_envs in counts:
            try:
                env_sps, env_compile_s = env_only(env_id, num_envs, rollout_len, updates)
            except ConfigValueError as error:  # the family's library is not installed
                print(f"{family}: skipped: {error}", file=sys.stderr)
                break
            summary = ppo(env_id, num_envs, rollout_len, updates)
            emit(
                {
                    "family": family,
                    "env": env_id,
                    "num_envs": num_envs,
                    "rollout_len": rollout_len,
                    "env_only_sps": env_sps,
                    "env_compile_s": env_compile_s,
                    "sps": summary["sps"],
                    "compile_s": summary["compile_s"],
                    "ratio": summary["sps"] / env_sps,
                    **peak_memory(),
                    "jax": jax.__version__,
                    "backend": jax.default_backend(),
                    "device_kind": device.device_kind,
                },
                args.out,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
