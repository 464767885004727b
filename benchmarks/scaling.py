"""Scaling: Anakin PPO steps per second on 1, 2, 4 devices and on 1 vs 2 processes.

    python benchmarks/scaling.py                        # the sweep (virtual CPU devices here)
    python benchmarks/scaling.py --envs-per-device 256 --updates 20 --out scaling.jsonl

Weak scaling: every configuration gives each device the same ``--envs-per-device`` environments,
so ``D`` devices step ``D`` times as many. Each configuration runs in fresh processes (the device
count is fixed when JAX starts): on CPU, ``XLA_FLAGS=--xla_force_host_platform_device_count=D``
gives one process ``D`` virtual devices, and several processes talk through
:func:`podracer.parallel.initialize` on 127.0.0.1 (gloo). On a GPU host, ``--platform gpu``
uses the real devices instead (through ``CUDA_VISIBLE_DEVICES``: process ``i`` of a
configuration sees GPUs ``i * D ... (i + 1) * D - 1``); the configurations need 4 GPUs. On a TPU
VM, ``--platform tpu`` runs the one-process configurations on the first ``D`` chips of the host
(``jax.devices()[:D]``) and skips the two-process one (a host's chips are not split between
processes); across the hosts of a pod slice, run ``podracer train`` on every host instead
(``docs/scaling.md``), where JAX's cluster detection connects the processes.

One JSON line per configuration on stdout: ``sps`` (training steps per second of the whole
mesh, after compiling), ``scaling_efficiency`` (``sps / (D * sps of 1 device)``), ``compile_s``,
and ``env_only_sps`` (the same environments stepped with random actions in the same process,
through the same scan structure, on one device; see ``anakin_throughput.py``) with ``ratio``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time

from jsonl import emit

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = [  # (name, processes, devices per process)
    ("1-device", 1, 1),
    ("2-devices", 1, 2),
    ("4-devices", 1, 4),
    ("2-processes", 2, 1),
]


def child(args) -> None:
    """One process of one configuration: train, print the summary as JSON (process 0)."""
    from podracer import parallel

    parallel.initialize(args.coordinator, args.num_processes, args.process_id)
    import jax

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from anakin_throughput import env_only_sps

    from podracer.agents import PPOConfig
    from podracer.loops.anakin import AnakinConfig, build, run

    devices = jax.devices()[: args.devices] if args.devices else jax.devices()
    num_envs = args.envs_per_device * len(devices)
    config = AnakinConfig(num_envs=num_envs, rollout_len=args.rollout_len)
    total = args.updates * config.steps_per_update
    system = build(
        "gymnax:CartPole-v1", PPOConfig(), config, total_timesteps=total, devices=devices
    )
    summary = run(system, seed=0, total_timesteps=total).summary
    if parallel.is_main_process():  # the other processes are idle meanwhile
        env_sps = env_only_sps("gymnax:CartPole-v1", num_envs, args.rollout_len, args.updates)
        record = {
            "devices": len(devices),
            "processes": jax.process_count(),
            "num_envs": num_envs,
            "backend": jax.default_backend(),
            "total_steps": summary["total_steps"],
            "sps": summary["sps"],
            "compile_s": summary["compile_s"],
            "env_only_sps": env_sps,
            "ratio": summary["sps"] / env_sps,
        }
        print(json.dumps(record), flush=True)


def _env(args, process: int, devices: int) -> dict[str, str]:
    env = dict(os.environ)
    if args.platform == "cpu":
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
        env["JAX_PLATFORMS"] = "cpu"
    elif args.platform == "tpu":  # one process per configuration, on the first `devices` chips
        env["JAX_PLATFORMS"] = "tpu"
    else:  # process i sees GPUs [i * devices, (i + 1) * devices)
        env["JAX_PLATFORMS"] = "cuda"
        gpus = range(process * devices, (process + 1) * devices)
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def launch(args, processes: int, devices: int) -> dict:
    base = [sys.executable, __file__, "--child", "--envs-per-device", str(args.envs_per_device)]
    base += ["--updates", str(args.updates), "--rollout-len", str(args.rollout_len)]
    if args.platform == "tpu":
        base += ["--devices", str(devices)]
    if processes > 1:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        base += ["--coordinator", f"127.0.0.1:{port}", "--num-processes", str(processes)]
    with tempfile.TemporaryDirectory() as logs:
        errs = [pathlib.Path(logs) / f"stderr_{i}.txt" for i in range(processes)]
        procs = []
        for i in range(processes):
            with open(errs[i], "w") as err:  # the child keeps its own descriptor
                procs.append(
                    subprocess.Popen(
                        base + (["--process-id", str(i)] if processes > 1 else []),
                        env=_env(args, i, devices),
                        stdout=subprocess.PIPE,
                        stderr=err,
                        text=True,
                    )
                )
        deadline = time.monotonic() + args.timeout  # one deadline for every process
        try:
            outputs = [
                p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0] for p in procs
            ]
        except subprocess.TimeoutExpired:
            outputs = None
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        failed = [(i, p.returncode) for i, p in enumerate(procs) if p.returncode != 0]
        if outputs is None or failed:
            tails = "\n".join(f"--- process {i}:\n{errs[i].read_text()[-2000:]}" for i, _ in failed)
            what = f"ran past --timeout {args.timeout:.0f} s" if outputs is None else "failed"
            raise RuntimeError(f"{processes} x {devices} devices {what}: {failed}\n{tails}")
    return json.loads(outputs[0].strip().splitlines()[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs-per-device", type=int, default=64)
    parser.add_argument("--rollout-len", type=int, default=128)
    parser.add_argument("--updates", type=int, default=30, help="updates per configuration")
    parser.add_argument("--platform", default="cpu", choices=("cpu", "gpu", "tpu"))
    parser.add_argument("--timeout", type=float, default=600, help="seconds per configuration")
    parser.add_argument("--out", help="also append the JSON lines to this file")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--coordinator", help=argparse.SUPPRESS)
    parser.add_argument("--num-processes", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--process-id", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--devices", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)

    one_device_sps = None
    for name, processes, per_process in CONFIGS:
        if processes > 1 and args.platform == "tpu":
            print(
                f"{name}: skipped on TPU (one process per host; see the docstring)", file=sys.stderr
            )
            continue
        record = launch(args, processes, per_process)
        if one_device_sps is None:
            one_device_sps = record["sps"]
        record = {
            "config": name,
            **record,
            "scaling_efficiency": record["sps"] / (record["devices"] * one_device_sps),
        }
        emit(record, args.out)


if __name__ == "__main__":
    sys.exit(main())
