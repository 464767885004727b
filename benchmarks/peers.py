"""podracer beside the single-file references it is compared with, alternated on one machine.

    python benchmarks/peers.py --purejaxrl ~/src/purejaxrl             # Anakin PPO at 4, 64, 1024
    python benchmarks/peers.py --purejaxrl ~/src/purejaxrl --num-envs 4 --pairs 5
    python benchmarks/peers.py --cleanba ~/src/cleanba                 # Sebulba on Breakout

Nothing is fetched: each peer runs from the clone of its public repository you name
(``benchmarks/README.md``, "Peers", says where to get them). The peer's code is run unchanged;
the few shims that current gymnax and jax need are written here (:func:`gymnax_five_values`,
:func:`cleanba_shims`) and applied in the peer's process only.

Every measurement runs in a fresh child process of this one (compile time included, nothing
cached between them), peer and podracer alternated, the order flipped every pair so that neither
always runs on a machine the other just warmed. One JSON line per configuration: both programs'
steps per second and compile seconds for every pair, the per-pair ratios podracer / peer, and
their medians.

Configurations:

- ``ppo-4``, ``ppo-64``, ``ppo-1024``: Anakin PPO on ``gymnax:CartPole-v1`` against PureJaxRL's
  ``purejaxrl/ppo.py`` with its own hyper-parameters (128 steps per rollout, 4 epochs x 4
  minibatches, lr 2.5e-4 annealed, gamma 0.99, lambda 0.95, clip 0.2, entropy 0.01, value 0.5,
  grad-norm 0.5, separate 64-64 tanh MLPs), which are podracer's PPO defaults. Each side trains
  for the same steps; steps per second is those steps over the training's wall time after
  compiling.
- ``ppo-gru-4`` (``--rnn``): recurrent PPO against PureJaxRL's ``purejaxrl/ppo_rnn.py`` with its
  own configuration (the same rates, 4 envs x 128 steps; a 128-relu layer, a 128-unit GRU and
  128-relu heads), podracer's ``PPOConfig(memory="gru", ...)`` of the same sizes.
- ``catch-demo``: the Podracer paper's Catch demo (Q(lambda), 128 envs x 16 steps), podracer
  alone: no public peer of it runs on current JAX (the paper's colab is not published as code),
  so its line carries podracer and the environment alone.
- ``cleanba-ppo``, ``cleanba-impala``: Sebulba on ``envpool:Breakout-v5`` against Cleanba's
  ``cleanba/cleanba_ppo.py`` and ``cleanba/cleanba_impala.py``, their settings scaled to the
  machine (:data:`CLEANBA_SCALED`); frames per second (steps x 4 frame skip) over the same
  steps.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

PPO_CONFIG = {
    "LR": 2.5e-4,
    "NUM_STEPS": 128,
    "UPDATE_EPOCHS": 4,
    "NUM_MINIBATCHES": 4,
    "GAMMA": 0.99,
    "GAE_LAMBDA": 0.95,
    "CLIP_EPS": 0.2,
    "ENT_COEF": 0.01,
    "VF_COEF": 0.5,
    "MAX_GRAD_NORM": 0.5,
    "ACTIVATION": "tanh",
    "ENV_NAME": "CartPole-v1",
    "ANNEAL_LR": True,
    "DEBUG": False,
}
"""PureJaxRL's ``purejaxrl/ppo.py`` configuration (its ``__main__``), less the env count and the
steps, which each configuration sets."""

ANAKIN_STEPS = {4: 500_000, 64: 1_048_576, 1024: 2_097_152}
"""Environment steps per run: PureJaxRL's 5e5 at 4 envs; at 64 and 1,024 envs, enough updates
(128 and 16) that the run is not all start-up."""

RESNET = ["--agent.torso", "impala_resnet", "--agent.shared-torso", "True"]


def actor(envs: int, steps: int) -> list[str]:
    return ["--arch.envs-per-actor", str(envs), "--arch.rollout-len", str(steps)]


CLEANBA_SCALED = {
    "cleanba-ppo": {
        "script": "cleanba_ppo.py",
        "args": {"local-num-envs": 8, "num-actor-threads": 1, "num-steps": 32},
        "podracer": ["--agent", "ppo", *RESNET, "--agent.clip-eps", "0.1", *actor(8, 32)],
    },
    "cleanba-impala": {
        "script": "cleanba_impala.py",
        "args": {"local-num-envs": 8, "num-actor-threads": 1, "num-steps": 20},
        "podracer": ["--agent", "impala", *RESNET, "--agent.num-minibatches", "4", *actor(8, 20)],
    },
}
"""Cleanba's Breakout settings scaled to a 2-core machine: one actor thread of 8 environments
(Cleanba's defaults are 2 threads of 64 per actor device, sized for a GPU), rollouts of 32 steps
for PPO (Cleanba's 128 would make one update take many minutes on a CPU) and Cleanba's 20 for
IMPALA, Cleanba's 4 minibatches (PPO: 4 epochs of them, clip 0.1); the same network on both
sides (the IMPALA ResNet 16-32-32 and a 256-unit layer, shared by policy and value). Cleanba
acts and learns on one device; podracer places its actor and learner as its defaults do."""

CLEANBA_STEPS = {"cleanba-ppo": 8 * 32 * 3, "cleanba-impala": 8 * 20 * 4}
"""Environment steps per Breakout run: 3 updates of PPO, 4 of IMPALA (Cleanba's learner takes
minutes an update on a CPU: its convolutions' gradients run in loops)."""


# ---------------------------------------------------------------------------------------------
# Shims: what current libraries changed under the peers' code, applied in their process only.


def gymnax_five_values():
    """gymnax 1.0's ``step`` returns ``(obs, state, reward, terminated, truncated, info)``;
    PureJaxRL's wrappers unpack the five values of earlier gymnax, ``done`` for both ends.
    ``gymnax.make`` is wrapped so its environments return those five, ``done = terminated |
    truncated`` (the auto-reset is gymnax's own, as before)."""
    import gymnax

    make = gymnax.make

    class FiveValues:
        def __init__(self, env):
            self._env = env

        def __getattr__(self, name):
            return getattr(self._env, name)

        def step(self, key, state, action, params=None):
            obs, state, reward, terminated, truncated, info = self._env.step(
                key, state, action, params
            )
            return obs, state, reward, terminated | truncated, info

    def five_value_make(name, **kwargs):
        env, params = make(name, **kwargs)
        return FiveValues(env), params

    gymnax.make = five_value_make


def cleanba_shims():
    """jax 0.10 removed ``jax.tree_map``, ``jax.device_put_sharded`` and
    ``jax.device_put_replicated``, which Cleanba calls; each is put back as the current API's
    equivalent (``jax.tree.map``; an array stacked over the devices, which ``jax.pmap`` takes
    as its per-device inputs). optax moved two private names Cleanba's IMPALA imports from
    ``optax._src.alias`` (``ScalarOrSchedule``, now in ``optax._src.base``, and
    ``_scale_by_learning_rate``, now public as ``optax.scale_by_learning_rate``)."""
    import jax
    import jax.numpy as jnp
    import optax
    from optax._src import alias, base

    envpool_gym_api()
    train_state_of_any_params()
    if not hasattr(alias, "ScalarOrSchedule"):
        alias.ScalarOrSchedule = base.ScalarOrSchedule
    if not hasattr(alias, "_scale_by_learning_rate"):
        alias._scale_by_learning_rate = optax.scale_by_learning_rate

    if not hasattr(jax, "tree_map"):
        jax.tree_map = jax.tree.map
    if not hasattr(jax, "device_put_sharded"):
        jax.device_put_sharded = lambda shards, devices: jnp.stack(
            [jax.device_put(s, d) for s, d in zip(shards, devices, strict=True)]
        )
    if not hasattr(jax, "device_put_replicated"):
        jax.device_put_replicated = lambda x, devices: jax.tree.map(
            lambda leaf: jnp.stack([jax.device_put(leaf, d) for d in devices]), x
        )


def train_state_of_any_params():
    """flax 0.12's ``TrainState.create`` and ``apply_gradients`` ask
    ``"overwrite_with_gradient" in params``, which fails for params that are not a mapping
    (Cleanba's are a ``flax.struct`` dataclass of the network, actor and critic params). Both
    are wrapped to ask it only of mappings, as flax did when Cleanba was written."""
    import optax
    from flax.training import train_state

    create = train_state.TrainState.create.__func__
    apply_gradients = train_state.TrainState.apply_gradients

    def any_params_apply_gradients(self, *, grads, **kwargs):
        if isinstance(grads, dict):
            return apply_gradients(self, grads=grads, **kwargs)
        updates, opt_state = self.tx.update(grads, self.opt_state, self.params)
        params = optax.apply_updates(self.params, updates)
        return self.replace(step=self.step + 1, params=params, opt_state=opt_state, **kwargs)

    train_state.TrainState.apply_gradients = any_params_apply_gradients

    def any_params_create(cls, *, apply_fn, params, tx, **kwargs):
        if isinstance(params, dict):
            return create(cls, apply_fn=apply_fn, params=params, tx=tx, **kwargs)
        opt_state = tx.init(params)
        return cls(step=0, apply_fn=apply_fn, params=params, tx=tx, opt_state=opt_state, **kwargs)

    train_state.TrainState.create = classmethod(any_params_create)


def flax_gru_cell_of_old():
    """``flax.linen`` as ``ppo_rnn.py`` knew it: flax 0.12's ``GRUCell`` needs ``features`` and
    its ``initialize_carry`` is a method of an instance; ppo_rnn.py builds ``nn.GRUCell()``
    and calls ``nn.GRUCell.initialize_carry(key, batch_dims, size)``. The namespace returned
    is ``flax.linen`` with a ``GRUCell`` that takes its features from the carry it is given
    (the same cell, params one level deeper) and makes the zero carry the old way."""
    import types

    import flax.linen as nn
    import jax.numpy as jnp

    class GRUCell(nn.Module):
        @nn.compact
        def __call__(self, carry, inputs):
            return nn.GRUCell(features=carry.shape[-1])(carry, inputs)

        @staticmethod
        def initialize_carry(key, batch_dims, size):
            del key
            return jnp.zeros((*batch_dims, size))

    namespace = types.SimpleNamespace(**{k: getattr(nn, k) for k in dir(nn) if k[0] != "_"})
    namespace.GRUCell = GRUCell
    return namespace


def envpool_gym_api():
    """envpool 1.2's ``env_type="gym"`` pools follow gymnasium's API (``reset`` returns
    ``(obs, info)``, ``step`` and ``recv`` five values) and their ``num_envs`` cannot be set;
    Cleanba was written for gym's (``obs``; ``(obs, reward, done, info)``) and sets attributes
    on the pool. ``envpool.make`` is wrapped so that a gym-type pool answers gym's way:
    ``done = terminated | truncated``, ``info["terminated"]`` kept."""
    import envpool

    make = envpool.make

    class GymPool:
        def __init__(self, pool):
            self.__dict__["_pool"] = pool

        def __getattr__(self, name):
            return getattr(self._pool, name)

        def __setattr__(self, name, value):
            self.__dict__[name] = value

        @staticmethod
        def _four(out):
            obs, reward, terminated, truncated, info = out
            info = dict(info, terminated=terminated)
            return obs, reward, terminated | truncated, info

        def reset(self, *args, **kwargs):
            return self._pool.reset(*args, **kwargs)[0]

        def step(self, *args, **kwargs):
            return self._four(self._pool.step(*args, **kwargs))

        def recv(self, *args, **kwargs):
            return self._four(self._pool.recv(*args, **kwargs))

    def gym_make(task_id, env_type="gymnasium", **kwargs):
        pool = make(task_id, env_type=env_type, **kwargs)
        return GymPool(pool) if env_type == "gym" else pool

    envpool.make = gym_make


# ---------------------------------------------------------------------------------------------
# One measurement, in a child process: prints one JSON line.


def child_purejaxrl(directory: str, script: str, num_envs: int, total_steps: int) -> dict:
    """PureJaxRL's ``purejaxrl/{script}.py`` (``ppo`` or ``ppo_rnn``), unchanged, with its own
    configuration: compiled ahead of time, then the whole training in one call."""
    import importlib

    gymnax_five_values()
    sys.path.insert(0, os.path.join(directory, "purejaxrl"))
    import jax
    import numpy as np

    module = importlib.import_module(script)
    if script == "ppo_rnn":
        module.nn = flax_gru_cell_of_old()
    config = {**PPO_CONFIG, "NUM_ENVS": num_envs, "TOTAL_TIMESTEPS": total_steps}
    key = jax.random.PRNGKey(0)
    start = time.perf_counter()
    compiled = jax.jit(module.make_train(config)).lower(key).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    out = jax.block_until_ready(compiled(key))
    elapsed = time.perf_counter() - start
    steps = config["NUM_UPDATES"] * num_envs * config["NUM_STEPS"]
    info = out["metrics"] if "metrics" in out else out["metric"]  # ppo.py / ppo_rnn.py
    ended = np.asarray(info["returned_episode"][-1])
    returns = np.asarray(info["returned_episode_returns"][-1])[ended]
    return {
        "sps": steps / elapsed,
        "compile_s": compile_s,
        "steps": steps,
        "final_return": float(returns.mean()) if returns.size else None,
    }


def child_podracer_anakin(env_id: str, agent: str, num_envs: int, rollout_len: int, steps: int):
    """podracer's Anakin as ``podracer train`` runs it: one CPU device per core
    (:func:`podracer.parallel.use_cpu_cores`), the placement its members get from there."""
    from podracer import parallel

    parallel.use_cpu_cores()
    from podracer.agents import PPOConfig, QLambdaConfig
    from podracer.loops.anakin import AnakinConfig, build, run

    agent_config = {
        "ppo": PPOConfig(),
        # ppo_rnn.py's network: a 128-relu layer, a 128-unit GRU, 128-relu heads.
        "ppo-gru": PPOConfig(memory="gru", memory_size=128, hidden_sizes=(128,), activation="relu"),
        "qlambda": QLambdaConfig(),
    }[agent]
    config = AnakinConfig(num_envs=num_envs, rollout_len=rollout_len)
    system = build(env_id, agent_config, config, total_timesteps=steps)
    summary = run(system, seed=0, total_timesteps=steps).summary
    out = {
        "sps": summary["sps"],
        "compile_s": summary["compile_s"],
        "steps": summary["total_steps"],
        "final_return": summary["final_return"],
        "devices": system.mesh.devices.size,
    }
    if agent == "qlambda":
        from anakin_throughput import env_only_sps

        out["env_only_sps"] = env_only_sps(env_id, num_envs, rollout_len, summary["num_updates"])
    return out


def child_cleanba(directory: str, name: str, steps: int) -> dict:
    """Cleanba's script run as its own ``__main__`` with the scaled settings. Its printed
    ``SPS`` counts from the start, compiling included; the steady figure here is taken from
    the times its per-update lines are printed: the steps between the first update's line and
    the last, over the time between them (what podracer's ``sps`` is: after compiling)."""
    import re
    import runpy

    cleanba_shims()
    settings = CLEANBA_SCALED[name]
    argv = [settings["script"], "--env-id", "Breakout-v5", "--total-timesteps", str(steps)]
    for flag, value in settings["args"].items():
        argv += [f"--{flag}", str(value)]
    argv += ["--log-frequency", "1"]
    sys.argv = argv

    class Timed:
        """A stdout that notes when each ``global_step=`` line is printed."""

        def __init__(self):
            self.steps: list[tuple[float, int]] = []

        def write(self, text: str) -> int:
            for found in re.finditer(r"global_step=(\d+)", text):
                self.steps.append((time.perf_counter(), int(found.group(1))))
            return len(text)

        def flush(self):
            pass

    printed, stdout = Timed(), sys.stdout
    start = time.perf_counter()
    try:
        sys.stdout = printed
        runpy.run_path(os.path.join(directory, "cleanba", settings["script"]), run_name="__main__")
    except BaseException:
        # Cleanba's actor threads are not daemons: a failed learner would leave the process
        # waiting on them for ever.
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    finally:
        sys.stdout = stdout
    elapsed = time.perf_counter() - start
    (t0, s0), (t1, s1) = printed.steps[0], printed.steps[-1]
    return {
        "sps": (s1 - s0) / (t1 - t0) if t1 > t0 else None,
        "end_to_end_sps": steps / elapsed,
        "wall_s": elapsed,
        "steps": steps,
    }


def child_podracer_sebulba(name: str, steps: int, run_dir: str) -> dict:
    from podracer import parallel
    from podracer.cli.parse import parse_selectors
    from podracer.cli.train import train

    argv = ["--arch", "sebulba", "--env", "envpool:Breakout-v5", "--seed", "0"]
    argv += [*CLEANBA_SCALED[name]["podracer"], "--total-timesteps", str(steps)]
    argv += ["--run-dir", run_dir]
    parallel.use_cpu_cores()  # as `podracer train` does
    start = time.perf_counter()
    summary = train(parse_selectors(argv))
    elapsed = time.perf_counter() - start
    return {
        "end_to_end_sps": summary["total_steps"] / elapsed,
        "sps": summary["sps"],
        "compile_s": summary.get("compile_s"),
        "wall_s": elapsed,
        "steps": summary["total_steps"],
    }


# ---------------------------------------------------------------------------------------------
# The parent: alternates children and prints one line per configuration.


def measure(args: list[str], timeout: float) -> dict:
    """One child run of this script (``--child ...``): its last JSON line."""
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=HERE,
        check=False,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(
            f"peers: the child {' '.join(args)} failed (exit {out.returncode}):\n"
            + out.stderr[-3000:]
        )
    return json.loads(lines[-1])


def pairs(name: str, peer_args: list[str], podracer_args: list[str], n: int, timeout: float):
    """``n`` pairs of (peer, podracer) measurements, the order flipped every pair; one record."""
    peer, ours = [], []
    for i in range(n):
        order = [(peer, peer_args), (ours, podracer_args)]
        for into, child in order if i % 2 == 0 else order[::-1]:
            into.append(measure(child, timeout))
    ratios = [o["sps"] / p["sps"] for o, p in zip(ours, peer, strict=True) if o["sps"] and p["sps"]]
    record = {
        "config": name,
        "pairs": n,
        "podracer_sps": [o["sps"] for o in ours],
        "peer_sps": [p["sps"] for p in peer],
        "podracer_compile_s": [o.get("compile_s") for o in ours],
        "peer_compile_s": [p.get("compile_s") for p in peer],
        "ratios": ratios,
        "median_ratio": statistics.median(ratios) if ratios else None,
        "median_podracer_sps": statistics.median(o["sps"] for o in ours),
        "median_peer_sps": statistics.median(p["sps"] for p in peer if p["sps"]),
        "podracer_final_return": [o.get("final_return") for o in ours],
        "peer_final_return": [p.get("final_return") for p in peer],
    }
    compiles = [(o.get("compile_s"), p.get("compile_s")) for o, p in zip(ours, peer, strict=True)]
    if all(a is not None and b is not None for a, b in compiles):
        record["median_compile_ratio"] = statistics.median(a / b for a, b in compiles)
    return record


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--purejaxrl", help="a clone of github.com/luchris429/purejaxrl")
    parser.add_argument("--cleanba", help="a clone of github.com/vwxyzjn/cleanba")
    parser.add_argument("--pairs", type=int, default=3, help="alternated pairs per config")
    parser.add_argument("--num-envs", type=int, nargs="*", help="Anakin PPO sizes (4 64 1024)")
    parser.add_argument("--steps", type=int, help="environment steps per run (all configs)")
    parser.add_argument("--catch", action="store_true", help="also the Catch demo line")
    parser.add_argument("--rnn", action="store_true", help="also recurrent PPO (ppo_rnn.py)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per child run")
    parser.add_argument("--out", help="also append the JSON lines to this file")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        kind, *rest = args.child
        if kind == "purejaxrl":
            result = child_purejaxrl(rest[0], rest[1], int(rest[2]), int(rest[3]))
        elif kind == "anakin":
            result = child_podracer_anakin(rest[0], rest[1], *map(int, rest[2:5]))
        elif kind == "cleanba":
            result = child_cleanba(rest[0], rest[1], int(rest[2]))
        else:
            result = child_podracer_sebulba(rest[0], int(rest[1]), rest[2])
        print(json.dumps(result), flush=True)
        return

    sys.path.insert(0, HERE)
    from jsonl import emit

    if not (args.purejaxrl or args.cleanba or args.catch):
        parser.error("give --purejaxrl DIR and/or --cleanba DIR (or --catch for podracer alone)")
    if args.purejaxrl:
        for n in args.num_envs or (4, 64, 1024):
            record = purejaxrl_pairs(args.purejaxrl, "ppo", n, args.steps, args.pairs, args.timeout)
            emit(record, args.out)
        if args.rnn:
            record = purejaxrl_pairs(args.purejaxrl, "ppo_rnn", 4, args.steps, args.pairs, 1800)
            emit(record, args.out)
    if args.catch:
        steps = args.steps or 2_000_000
        line = measure(["--child", "anakin", "catch", "qlambda", "128", "16", str(steps)], 600)
        emit({"config": "catch-demo", "peer": None, "num_envs": 128, **line}, args.out)
    if args.cleanba:
        for name in CLEANBA_SCALED:
            steps = args.steps or CLEANBA_STEPS[name]
            emit(cleanba_pairs(args.cleanba, name, steps, args.pairs, args.timeout), args.out)


def purejaxrl_pairs(directory, script: str, n: int, steps, num_pairs: int, timeout: float):
    """``num_pairs`` pairs of PureJaxRL's ``script`` (``ppo`` or ``ppo_rnn``) at ``n`` envs and
    podracer's Anakin PPO (with the GRU for ``ppo_rnn``); :func:`pairs`'s record."""
    steps = steps or ANAKIN_STEPS.get(n, 500_000)
    peer = ["--child", "purejaxrl", directory, script, str(n), str(steps)]
    agent = "ppo" if script == "ppo" else "ppo-gru"
    ours = ["--child", "anakin", "gymnax:CartPole-v1", agent, str(n), "128", str(steps)]
    name = f"ppo-{n}" if script == "ppo" else f"ppo-gru-{n}"
    record = pairs(name, peer, ours, num_pairs, timeout)
    return {"peer": f"purejaxrl/{script}.py", "num_envs": n, **record}


def cleanba_pairs(directory: str, name: str, steps: int, n: int, timeout: float) -> dict:
    """``n`` pairs of Cleanba's ``name`` and podracer's Sebulba (:data:`CLEANBA_SCALED`) on
    Breakout; the record of :func:`pairs` with frames per second added (4 frames a step)."""
    import tempfile

    with tempfile.TemporaryDirectory() as run_dir:
        peer = ["--child", "cleanba", directory, name, str(steps)]
        ours = ["--child", "sebulba", name, str(steps), run_dir]
        record = pairs(name, peer, ours, n, timeout)
    for key in ("podracer_sps", "peer_sps", "median_podracer_sps", "median_peer_sps"):
        value = record[key]
        record[key.replace("sps", "fps")] = (
            [v * 4 for v in value] if isinstance(value, list) else value * 4
        )
    return {"peer": f"cleanba/{CLEANBA_SCALED[name]['script']}", **record}


if __name__ == "__main__":
    sys.exit(main())
