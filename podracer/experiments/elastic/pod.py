"""A pod of an elastic run: one compiled Anakin population of ``m`` members (:class:`Pod`, a Ray
actor that also runs in-process) that reports to the leaderboard and takes the tournament's
copies; the member state it copies, and the best member a finished run kept (``podracer eval``)."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from podracer.errors import ConfigError
from podracer.experiments.elastic.config import ELASTIC_FILE, POD_DIR, TOP_DIR, TOP_FILE
from podracer.experiments.elastic.leaderboard import load_member, load_member_meta, pod_row


def member_state(learner, i: int):
    """Member ``i``'s learner state to copy (params, optimizer state, agent state), as raw
    NumPy (:func:`podracer.runs.checkpoint.to_raw`)."""
    import jax

    from podracer.runs.checkpoint import to_raw

    parts = {
        "params": learner.params,
        "opt_state": learner.opt_state,
        "agent_state": learner.agent_state,
    }
    return jax.device_get(to_raw(jax.tree.map(lambda x: x[i], parts)))


def member_template(spec, members: int):
    """A member's learner state as raw NumPy, the template to restore a top checkpoint into
    (:func:`load_member`)."""
    system = pod_system(spec, 0, members)
    return member_state(system.init(spec.seed).learner, 0)


def load_best(run_dir: str):
    """``(state, meta)`` of the best member the leaderboard kept (``top.json``'s first), its
    learner state shaped like the run's members."""
    from podracer.runs import load_spec

    with open(os.path.join(run_dir, TOP_DIR, TOP_FILE)) as f:
        top = json.load(f)
    if not top:
        raise ConfigError(f"{run_dir}: the leaderboard kept no member yet (top/top.json empty)")
    spec = load_spec(run_dir)
    with open(os.path.join(run_dir, ELASTIC_FILE)) as f:
        members = json.load(f)["pods"][0]["members"]
    name = top[0]["name"]
    return load_member(run_dir, name, member_template(spec, members)), load_member_meta(
        run_dir, name
    )


def evaluate_best(run_dir: str, *, episodes: int = 10, greedy: bool = True) -> dict[str, Any]:
    """``podracer eval RUN_DIR`` of an elastic run: the best member the leaderboard kept
    (:func:`load_best`) played for ``episodes`` fresh episodes with its hyper-parameters; the
    returns' summary, the member, its leaderboard score and record."""
    from podracer.core.evaluation import summarize_returns
    from podracer.runs import load_spec

    state, meta = load_best(run_dir)
    spec = load_spec(run_dir)
    with open(os.path.join(run_dir, ELASTIC_FILE)) as f:
        members = json.load(f)["pods"][0]["members"]
    system = pod_system(spec, 0, members)
    full = system.init(spec.seed)
    copy = [{"member": i, "state": state, "hparams": meta["hparams"]} for i in range(members)]
    full = replace_members(full, copy)
    evaluate = system.evaluator(seed=spec.seed, episodes=episodes, greedy=greedy)
    returns = np.asarray(evaluate(full, int(meta["updates"])))[:1]  # [1, episodes]
    with open(os.path.join(run_dir, TOP_DIR, TOP_FILE)) as f:
        best = json.load(f)[0]
    return {
        **summarize_returns(returns),
        "member": best["name"],
        "leaderboard_score": meta["score"],
        "record": meta["record"],
        "hparams": meta["hparams"],
        "greedy": greedy,
        "run_dir": run_dir,
    }


def pod_population(spec, members: int):
    """The :class:`~podracer.population.ensemble.PopulationConfig` of one pod of ``members``:
    the run's, with the in-pod tournament off (the leaderboard runs the tournament across pods)."""
    return dataclasses.replace(spec.population, size=members, tournament=False, init=())


def pod_hparams(spec, pod: int, members: int) -> dict[str, np.ndarray]:
    """Pod ``pod``'s members' initial hyper-parameters: members ``pod x m ...`` of the run's
    population (its ``init`` spreads over all ``P``)."""
    from podracer import population

    bounds = population.spaces(spec.agent, spec.population)
    initial = population.initial_hparams(spec.agent_config, spec.population, bounds)
    return {k: v[pod * members : (pod + 1) * members] for k, v in initial.items()}


def pod_system(spec, pod: int, members: int):
    """The Anakin system of pod ``pod``: a population of ``members`` (seeds ``seed + pod x m
    ...``), with ``updates_per_call`` set to the interval when it is 0, so that every segment
    calls one compiled program."""
    from podracer import agents, loops, population

    loop = loops.get(spec.arch)
    pop = pod_population(spec, members)
    arch = loop.with_members(spec.arch_config, members)
    if getattr(arch, "updates_per_call", None) == 0:
        arch = dataclasses.replace(arch, updates_per_call=pop.interval)
    hparams = pod_hparams(spec, pod, members) if spec.population.init else None
    return population.build_system(
        loop,
        spec.env,
        agents.get(spec.agent),
        spec.agent_config,
        arch,
        pop,
        total_timesteps=spec.total_timesteps,
        seed=spec.seed + pod * members,
        hparams=hparams,
        env_options=spec.env_options,
    )


def pod_updates(spec, system) -> int:
    """The updates a pod runs: the run's, rounded down to whole intervals (at least one)."""
    interval = spec.population.interval
    return max(interval, system.recipe.num_updates // interval * interval)


def replace_members(state, replaced: Sequence[dict[str, Any]]):
    """``state`` (an :class:`~podracer.loops.anakin.AnakinState`) with each replaced member's
    learner state and hyper-parameters set from the leaderboard's answer; a replaced member's replay
    keeps its own items with its streams broken (it acts on in its own environments)."""
    import jax

    from podracer.core.learner.buffers import break_streams
    from podracer.runs.checkpoint import from_raw

    if not replaced:
        return state
    learner = state.learner
    parts = {
        "params": learner.params,
        "opt_state": learner.opt_state,
        "agent_state": learner.agent_state,
    }
    host = jax.device_get(parts)
    template = jax.tree.map(lambda x: x[0], parts)
    host = jax.tree.map(np.array, host)  # writable copies
    for r in replaced:
        new = from_raw(r["state"], jax.device_get(template))
        jax.tree.map(lambda dst, src, i=r["member"]: dst.__setitem__(i, src), host, new)
    placed = jax.tree.map(lambda new, old: jax.device_put(new, old.sharding), host, parts)
    mask = np.zeros(np.shape(jax.tree.leaves(state.hparams)[0]), bool)
    hparams = {k: np.array(v) for k, v in jax.device_get(state.hparams).items()}
    for r in replaced:
        mask[r["member"]] = True
        for name, value in r["hparams"].items():
            hparams[name][r["member"]] = value
    hparams = {
        k: jax.device_put(v.astype(state.hparams[k].dtype), state.hparams[k].sharding)
        for k, v in hparams.items()
    }
    learner = learner._replace(
        params=placed["params"],
        opt_state=placed["opt_state"],
        agent_state=placed["agent_state"],
        replay=break_streams(learner.replay, mask),
    )
    return state._replace(learner=learner, hparams=hparams)


def initial_lineage(members: int) -> list[dict[str, Any]]:
    return [
        {"parent": None, "parent_updates": None, "since": 0, "copies": 0} for _ in range(members)
    ]


def copied_lineage(lineage: list[dict[str, Any]], replaced, updates: int) -> list[dict[str, Any]]:
    out = [dict(line) for line in lineage]
    for r in replaced:
        line = out[r["member"]]
        line.update(
            parent=r["parent"],
            parent_updates=r["parent_updates"],
            since=updates,
            copies=line["copies"] + 1,
        )
    return out


class Pod:
    """One pod: a compiled Anakin population of ``members`` that reports to the leaderboard
    every ``interval`` updates and takes the tournament's copies (a Ray actor; a plain class,
    so it also runs in-process).

    Its checkpoint (the whole Anakin state, its lineage and the updates done) is written after
    every acknowledged report, so a restarted pod re-runs at most the segment it was in.
    """

    def __init__(
        self,
        run_dir: str,
        spec_dict: dict[str, Any],
        pod: int,
        members: int,
        leaderboard: Any,
        *,
        join: bool = False,
        cpus: float = 1.0,
        report_timeout_s: float = 120.0,
        checkpoint_s: float = 0.0,
    ):
        from podracer import parallel

        # Before JAX starts: one XLA:CPU device per core Ray gives the pod (the driver's own
        # device count, inherited through the environment, is not the pod's).
        flags = os.environ.get("XLA_FLAGS", "").split()
        flags = [f for f in flags if not f.startswith("--xla_force_host_platform_device_count")]
        os.environ["XLA_FLAGS"] = " ".join(flags)
        if cpus >= 2:
            parallel.use_cpu_cores(int(cpus))
        self.run_dir = run_dir
        self.spec_dict = spec_dict
        self.pod = pod
        self.members = members
        self.leaderboard = leaderboard
        self.join = join
        self.report_timeout_s = report_timeout_s
        self.checkpoint_s = checkpoint_s

    def info(self) -> dict[str, Any]:
        """Where the pod runs: ``{"pod", "node", "pid", "host"}``."""
        node = None
        try:
            import ray

            if ray.is_initialized():
                node = ray.get_runtime_context().get_node_id()
        except ImportError:
            pass
        return {"pod": self.pod, "node": node, "pid": os.getpid(), "host": socket.gethostname()}

    def _call(self, method: str, *args):
        target = getattr(self.leaderboard, method)
        if hasattr(target, "remote"):
            import ray

            return ray.get(target.remote(*args), timeout=self.report_timeout_s)
        return target(*args)

    def train(self) -> dict[str, Any]:
        """Trains the pod to the run's end (from its checkpoint when it has one); returns
        ``{"pod", "updates", "reports", "replaced", "start_update"}``."""
        import jax

        from podracer.loops.common import params_checksum
        from podracer.runs import spec_from_dict
        from podracer.runs.checkpoint import Checkpointer

        spec = spec_from_dict(self.spec_dict)
        system = pod_system(spec, self.pod, self.members)
        seed = spec.seed + self.pod * self.members
        interval = spec.population.interval
        total = pod_updates(spec, system)
        spu = system.recipe.steps_per_update
        state = system.init(seed)
        template = member_state(state.learner, 0)
        lineage = initial_lineage(self.members)
        directory = os.path.join(self.run_dir, POD_DIR, f"pod-{self.pod}")
        checkpointer = Checkpointer(directory, keep=1, keep_best=False)
        start = 0
        replaced_total = 0
        try:
            if checkpointer.latest_step() is not None:
                state, meta = checkpointer.restore(state)
                start = int(meta["updates"])
                lineage = meta["lineage"]
            elif self.join:
                seeds = self._call("seed_members", self.pod, self.members, template)
                state = replace_members(state, seeds)
                lineage = copied_lineage(lineage, seeds, 0)
                replaced_total += len(seeds)
            reports = 0
            updates = start
            saved_at = time.monotonic()
            report_s = 0.0  # the leaderboard's round trips: the tournament's cost to a pod
            run_started = time.perf_counter()
            while updates < total:
                end = min(updates + interval, total)
                segment = system._replace(recipe=system.recipe._replace(total_timesteps=end * spu))
                result = segment.run(state, seed=seed, start_update=updates)
                state, updates = result.state, end
                boards = [e for e in result.events if e.get("kind") == "leaderboard"]
                record = boards[-1]
                hparams = [
                    m["hparams"] for m in sorted(record["members"], key=lambda m: m["member"])
                ]
                states = [member_state(state.learner, i) for i in range(self.members)]
                sums = [params_checksum(s["params"]) for s in states]
                row = pod_row(self.pod, updates, spu, record["scores"], hparams, lineage, sums)
                t0 = time.perf_counter()
                answer = self._call("report", row, states, template)
                report_s += time.perf_counter() - t0
                reports += 1
                state = replace_members(state, answer["replaced"])
                lineage = copied_lineage(lineage, answer["replaced"], updates)
                replaced_total += len(answer["replaced"])
                if updates == total or time.monotonic() - saved_at >= self.checkpoint_s:
                    meta = {"updates": updates, "lineage": lineage, "pod": self.pod}
                    checkpointer.save(updates, state, meta)
                    saved_at = time.monotonic()
            jax.block_until_ready(state)
        finally:
            checkpointer.close()
        return {
            "pod": self.pod,
            "updates": updates,
            "start_update": start,
            "reports": reports,
            "replaced": replaced_total,
            "report_s": report_s / max(reports, 1),
            "round_s": (time.perf_counter() - run_started) / max(reports, 1),
        }
