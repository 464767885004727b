"""Runs: a run directory, its config, loggers, checkpoints, periodic evaluation and resume.

A run directory holds::

    config.json      the full resolved RunSpec (load it back with load_spec), the environment's
                     options (env_options: params, observe) included
    metrics.jsonl    "train" and "eval" records (podracer.logging)
    leaderboard.jsonl  a population's "leaderboard" records (podracer.population)
    tb/              TensorBoard events
    checkpoints/     orbax checkpoints, one step directory per saved update count

:func:`train` starts or resumes a run for either loop. For Anakin, resume is exact: a run
resumed from a checkpoint calls the same compiled programs on the same state as a run that never
stopped, so it ends with bitwise identical params, optimizer state, environment state and keys.
For Sebulba, the learner state (params, optimizer state, key, update count) and the counters are
restored and the environments start afresh.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import sys
import time
from typing import Any

import jax
import numpy as np

from podracer import agents, loops
from podracer.agents.policy import describe_window
from podracer.checkpoint import Checkpointer, CheckpointError
from podracer.config import ConfigError
from podracer.envs.options import EnvOptions, as_options
from podracer.logging import make_logger
from podracer.loops.common import Diverged, check_finite, params_finite
from podracer.parallel import is_main_process
from podracer.rundir import CHECKPOINT_DIR, CONFIG_FILE


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """What a run records: checkpoints, evaluation, loggers."""

    checkpoint_interval: int = 0
    """Save a checkpoint every this many updates (0: only at the end and on Ctrl-C)."""
    keep_checkpoints: int = 3
    """Checkpoints kept: the latest ones, plus the best by evaluation return."""
    eval_interval: int = 0
    """Evaluate every this many updates, and at the end (0: never during training)."""
    eval_episodes: int = 10
    """Episodes per evaluation (per seed)."""
    eval_greedy: bool = True
    """Evaluate the greedy policy (largest logit) rather than sampling actions."""
    tensorboard: bool = True
    """Write TensorBoard events into the run directory."""
    wandb: bool = False
    """Log to Weights & Biases too (needs ``pip install 'podracer[wandb]'``); offline unless
    ``wandb_online``."""
    wandb_online: bool = False
    """Sync the wandb run to the server as it runs (implies ``wandb``); offline runs can be
    uploaded later with ``wandb sync``."""
    check_finite: bool = True
    """Stop the run at the first non-finite learner metric (loss, ``grad_norm``, ...) or
    parameter, without saving the state that holds it."""

    def __post_init__(self):
        for name in ("checkpoint_interval", "eval_interval"):
            if getattr(self, name) < 0:
                raise ConfigError(
                    f"--{name.replace('_', '-')}={getattr(self, name)} is not allowed: it must be "
                    ">= 0 (0 turns it off)"
                )
        for name in ("keep_checkpoints", "eval_episodes"):
            if getattr(self, name) < 1:
                raise ConfigError(
                    f"--{name.replace('_', '-')}={getattr(self, name)} is not allowed: it must be "
                    ">= 1"
                )


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """Everything that defines a run; ``config.json`` is this, as JSON."""

    arch: str
    agent: str
    env: str
    seed: int
    total_timesteps: int
    agent_config: Any
    arch_config: Any
    options: RunOptions = RunOptions()
    population: Any = None  # a PopulationConfig: tournament-based ensemble training (Anakin)
    # --env-param, --env-observe: the options every environment of the run is built with
    env_options: EnvOptions = dataclasses.field(default_factory=EnvOptions)
    # The AgentSpec ``agent`` names, resolved once (here when not given) and carried along:
    # building, sweeping and checking a grid read it, never the registry again. Not saved:
    # config.json keeps the name.
    agent_spec: Any = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if self.agent_spec is None:
            object.__setattr__(self, "agent_spec", agents.get(self.agent))
        if not isinstance(self.env_options, EnvOptions):
            object.__setattr__(self, "env_options", as_options(self.env_options))
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ConfigError(f"--seed={self.seed!r} is not allowed: it must be an integer >= 0")
        if self.population is not None and not loops.get(self.arch).members_in_one_program:
            one_program = [n for n in loops.names() if loops.get(n).members_in_one_program]
            raise ConfigError(
                f"--population is not allowed with --arch {self.arch}: a population trains its "
                f"members as one program (--arch {' or '.join(one_program)})"
            )

    def to_dict(self) -> dict[str, Any]:
        out = {
            "arch": self.arch,
            "agent": self.agent,
            "env": self.env,
            "seed": self.seed,
            "total_timesteps": self.total_timesteps,
            "agent_config": dataclasses.asdict(self.agent_config),
            "arch_config": dataclasses.asdict(self.arch_config),
            "options": dataclasses.asdict(self.options),
            "env_options": self.env_options.to_dict(),
        }
        if self.population is not None:
            out["population"] = dataclasses.asdict(self.population)
        return out


def arch_config_cls(arch: str) -> type:
    """The config dataclass of the loop ``arch`` (:func:`podracer.loops.get`)."""
    return loops.get(arch).config_cls


def dataclass_from_dict(cls: type, values: dict[str, Any], where: str, checked: bool = True):
    """``cls(**values)`` with JSON lists turned back into tuples; an unknown field is an error
    naming it and the fields allowed.

    ``checked=False`` skips ``cls``'s checks (``__post_init__``): for a command line's default,
    whose fields may only agree once the flags are applied (``--population 2`` with
    ``--population.fraction 0.5``); the parser builds the final value with them."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(
            f"{where}: unknown field(s) {', '.join(unknown)} for {cls.__name__}; the fields are "
            f"{', '.join(fields)}"
        )
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    if checked:
        return cls(**values)
    out = object.__new__(cls)
    for name, field in fields.items():
        if name in values:
            value = values[name]
        elif field.default_factory is not dataclasses.MISSING:
            value = field.default_factory()
        elif field.default is not dataclasses.MISSING:
            value = field.default
        else:
            raise ConfigError(f"{where}: {cls.__name__}.{name} has no default: give it")
        object.__setattr__(out, name, value)
    return out


def spec_from_dict(data: dict[str, Any], where: str = "config") -> RunSpec:
    known = {"arch", "agent", "env", "seed", "total_timesteps", "agent_config", "arch_config"}
    unknown = sorted(set(data) - known - {"options", "population", "env_options"})
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; the keys are {', '.join(sorted(known))}"
            ", options, population, env_options"
        )
    population = None
    if data.get("population") is not None:
        from podracer.population import PopulationConfig

        population = dataclass_from_dict(
            PopulationConfig, data["population"], f"{where}: population"
        )
    agent = data.get("agent", "ppo")
    try:
        agent_spec = agents.get(agent)
    except ConfigError as error:
        raise ConfigError(f"{where}: agent={agent!r} is not allowed: {error}") from None
    arch = data.get("arch", "anakin")
    try:
        arch_cls = arch_config_cls(arch)
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from None
    return RunSpec(
        arch=arch,
        agent=agent,
        agent_spec=agent_spec,
        env=data["env"],
        seed=int(data.get("seed", 0)),
        total_timesteps=int(data["total_timesteps"]),
        agent_config=dataclass_from_dict(
            agent_spec.config_cls, data.get("agent_config", {}), f"{where}: agent_config"
        ),
        arch_config=dataclass_from_dict(arch_cls, data.get("arch_config", {}), f"{where}: arch"),
        options=dataclass_from_dict(RunOptions, data.get("options", {}), f"{where}: options"),
        population=population,
        env_options=EnvOptions.from_dict(data.get("env_options"), f"{where}: env_options"),
    )


def load_config_file(path: str) -> dict[str, Any]:
    """A YAML or JSON file (by extension; YAML is a superset of JSON) as a dict."""
    if not os.path.isfile(path):
        raise ConfigError(f"--config={path!r}: no such file")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        if path.endswith(".json"):
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as error:
        raise ConfigError(f"--config={path!r} cannot be parsed: {error}") from error
    if not isinstance(data, dict):
        raise ConfigError(f"--config={path!r} must hold a mapping, not {type(data).__name__}")
    return data


def save_spec(run_dir: str, spec: RunSpec) -> None:
    if not is_main_process():
        return
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, CONFIG_FILE)
    with open(path + ".tmp", "w", encoding="utf-8") as f:  # a kill mid-write keeps the old one
        json.dump(spec.to_dict(), f, indent=2)
        f.write("\n")
    os.replace(path + ".tmp", path)


def load_spec(run_dir: str) -> RunSpec:
    path = os.path.join(run_dir, CONFIG_FILE)
    if not os.path.isfile(path):
        raise ConfigError(f"{run_dir!r} is not a run directory: {path} does not exist")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ConfigError(f"{path} cannot be read as JSON: {error}") from error
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object, not {type(data).__name__}")
    return spec_from_dict(data, where=path)


def source_digest() -> str:
    """The first 16 hex digits of the SHA-256 of podracer's Python source: processes started
    from different checkouts of the code differ here, whatever their version number says."""
    import hashlib
    from pathlib import Path

    digest = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def check_processes_agree(spec: RunSpec, run_dir: str, **more: Any) -> None:
    """Every process of a multi-process run agrees with process 0 on the resolved config, the
    run directory, ``more`` (resume flags) and the code (podracer's source and JAX's version),
    or every process stops with the field and both values
    (:func:`podracer.parallel.check_agreement`); nothing to do for one process."""
    from podracer.parallel import check_agreement

    if jax.process_count() == 1:
        return
    code = {"podracer_source": source_digest(), "jax": jax.__version__}
    check_agreement({"config": spec.to_dict(), "run_dir": run_dir, **more, "code": code})


def check_run_dir(run_dir: str, *, resume: bool, flag: str = "--run-dir") -> None:
    """A :class:`ConfigError` before anything is built, when ``run_dir`` cannot hold the run:
    a path through a file, a directory that cannot be written, or (for a fresh run) one that
    already holds a run, whose checkpoints the new run would mix with its own."""
    if os.path.exists(run_dir) and not os.path.isdir(run_dir):
        raise ConfigError(f"{flag}={run_dir!r} is a file, not a directory")
    parent = os.path.abspath(run_dir)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ConfigError(f"{flag}={run_dir!r} cannot be made: {parent!r} is a file")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag}={run_dir!r} cannot be written: no permission in {parent!r}")
    if resume:
        return
    held = [
        name
        for name in (CONFIG_FILE, CHECKPOINT_DIR)
        if os.path.exists(os.path.join(run_dir, name))
    ]
    if held:
        raise ConfigError(
            f"{flag}={run_dir!r} already holds a run ({held[0]}): continue it with "
            f"podracer train --resume {run_dir}, or choose another directory"
        )


def default_run_dir(spec: RunSpec, root: str = "runs", kind: str | None = None) -> str:
    """``root/<env>-<agent>-<kind>-<time>``; the kind is the loop's name (with the population's
    size), or what ``kind`` says (``sweep``)."""
    env = re.sub(r"[^A-Za-z0-9_.=-]", "_", spec.env.replace("?", "-").replace("&", "-"))
    now = time.time()
    if jax.process_count() > 1:  # one directory for every process: process 0's clock
        from jax.experimental import multihost_utils

        now = float(multihost_utils.broadcast_one_to_all(np.float64(now)))
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    if kind is None:
        kind = spec.arch if spec.population is None else f"{spec.arch}-pop{spec.population.size}"
    agent = spec.agent.replace(":", "_").replace("/", "_")
    return os.path.join(root, f"{env}-{agent}-{kind}-{stamp}")


class _Hooks(loops.RunHooks):
    """Periodic evaluation and checkpoints between calls (:class:`podracer.loops.RunHooks`)."""

    def __init__(self, spec: RunSpec, checkpointer, logger, evaluate, steps_per_update, start):
        options = spec.options
        self.options = options
        intervals = [i for i in (options.checkpoint_interval, options.eval_interval) if i]
        self.interval = math.gcd(*intervals) if intervals else 0
        self.checkpointer = checkpointer
        self.logger = logger
        self.evaluate = evaluate  # (state, updates) -> record or None
        self.steps_per_update = steps_per_update
        self.meta_base = {"arch": spec.arch, "agent": spec.agent, "env": spec.env}
        self.start = start
        self.session_start = time.time()
        self.last_saved = None
        self.saved_on_interrupt = None  # the updates of the state saved on Ctrl-C, if any

    def _meta(self, updates: int) -> dict[str, Any]:
        return {
            **self.meta_base,
            "updates": updates,
            "step": updates * self.steps_per_update,
            "saved_at": time.time(),
            "session_s": time.time() - self.session_start,
        }

    def after_call(self, state, updates: int, last: bool) -> None:
        options = self.options
        eval_return = None
        if options.eval_interval and (last or updates % options.eval_interval == 0):
            returns = self.evaluate(state, updates)
            record = _eval_record(returns, updates, self.steps_per_update)
            self.logger.log(record)
            eval_return = record["eval_return"]
        if last or (options.checkpoint_interval and updates % options.checkpoint_interval == 0):
            self.save(state, updates, eval_return)

    def after_metrics(self, metrics, first_update: int) -> None:
        if self.options.check_finite:
            try:
                check_finite(metrics, first_update)
            except Diverged as error:
                raise Diverged(f"{error}{self._nothing_saved()}") from None

    def _nothing_saved(self) -> str:
        latest = self.checkpointer.latest_step()
        kept = "no checkpoint" if latest is None else f"the latest checkpoint is of update {latest}"
        return (
            f"; nothing after it is saved ({kept}). Lower the learning rate, or pass "
            "--no-check-finite to let a run go on with non-finite values"
        )

    def save(self, state, updates: int, eval_return=None) -> None:
        if updates == self.start:
            return  # nothing new since the checkpoint this run started from
        if self.options.check_finite and not params_finite(state.learner.params):
            raise Diverged(
                f"the run diverged: the parameters after update {updates} are not finite"
                f"{self._nothing_saved()}"
            )
        with signals_held():
            self.checkpointer.save(updates, state, self._meta(updates), eval_return)
        self.last_saved = updates

    def interrupted(self, state, updates: int) -> None:
        self.save(state, updates)
        if updates in self.checkpointer.steps():  # just saved, or saved before (the same state)
            self.saved_on_interrupt = updates

    @contextlib.contextmanager
    def reporting_interrupts(self):
        """A Ctrl-C inside becomes :class:`Interrupted`, saying what was saved."""
        try:
            yield
        except KeyboardInterrupt as stop:
            raise Interrupted(self.saved_on_interrupt, self.checkpointer.latest_step()) from stop


@contextlib.contextmanager
def signals_held():
    """Ctrl-C (SIGINT) and SIGTERM that arrive inside are acted on when it ends: a checkpoint is
    never abandoned half-written by its own process (orbax then found the unfinished step in
    its way when the interrupted run saved that state, and failed). Main thread only (where
    Python runs signal handlers); a signal whose handler is not Python's is left alone."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(signum)
        if callable(handler):
            previous[signum] = handler
            signal.signal(signum, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if pending:
            previous[pending[0]](pending[0], None)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped a run.

    ``saved``: the updates of the checkpoint that holds the state the run had reached (None
    when it could not be saved: interrupted before the first update, or as a step returned, its
    input state donated); ``latest``: the run's latest checkpoint (None: there is none).
    """

    def __init__(self, saved: int | None, latest: int | None):
        super().__init__(saved, latest)
        self.saved = saved
        self.latest = latest


def _eval_record(returns: np.ndarray, updates: int, steps_per_update: int) -> dict[str, Any]:
    """``returns [members, episodes]`` as an ``"eval"`` record."""
    return {
        "kind": "eval",
        "step": updates * steps_per_update,
        "updates": updates,
        "eval_return": float(returns.mean()),
        "eval_return_std": float(returns.std()),
        "eval_returns": [float(r) for r in returns.mean(axis=1)],
        "episodes": int(returns.size),
    }


def run_logger(run_dir: str, spec: RunSpec, *, console: bool = True):
    """The logger of a run directory, with the backends ``spec.options`` asks for."""
    return make_logger(
        run_dir,
        spec.total_timesteps,
        console=console,
        tensorboard=spec.options.tensorboard,
        wandb=spec.options.wandb,
        wandb_online=spec.options.wandb_online,
        config=spec.to_dict(),
    )


def build_system(spec: RunSpec, devices=None) -> loops.System:
    """The system of a spec, through the loop registry: a population's when
    ``spec.population`` is set; its environments have ``spec.env_options``."""
    loop = loops.get(spec.arch)
    agent_spec = spec.agent_spec
    if spec.population is not None:
        from podracer import population

        return population.build_system(
            loop,
            spec.env,
            agent_spec,
            spec.agent_config,
            spec.arch_config,
            spec.population,
            total_timesteps=spec.total_timesteps,
            seed=spec.seed,
            devices=devices,
            env_options=spec.env_options,
        )
    return loops.build(
        loop,
        spec.env,
        agent_spec,
        spec.agent_config,
        spec.arch_config,
        total_timesteps=spec.total_timesteps,
        seed=spec.seed,
        devices=devices,
        env_options=spec.env_options,
    )


def train(
    spec: RunSpec,
    run_dir: str,
    *,
    resume: bool = False,
    resume_step: int | None = None,
    console: bool = True,
    devices=None,
) -> dict[str, Any]:
    """Runs (or resumes) ``spec`` in ``run_dir``; returns the summary (the final JSON line).

    The system is built and its initial state made (so a bad config, environment id or size
    is reported) before anything is written into ``run_dir``.
    """
    system = build_system(spec, devices)
    state = system.init(spec.seed)
    if not resume:
        save_spec(run_dir, spec)
    checkpointer = Checkpointer(run_dir, keep=spec.options.keep_checkpoints)
    logger = None
    try:
        start = 0
        if resume:  # the checkpoint is checked before anything is added to the run directory
            state, meta = checkpointer.restore(state, resume_step)
            start = int(meta["updates"])
            steps_per_update = system.recipe.steps_per_update
            if start >= max(1, spec.total_timesteps // steps_per_update):
                raise ConfigError(
                    f"--total-timesteps={spec.total_timesteps} is not allowed: the run in "
                    f"{run_dir} has already done {start} updates ({start * steps_per_update} "
                    "steps); give more to continue it"
                )
            if spec.total_timesteps != load_spec(run_dir).total_timesteps:
                save_spec(run_dir, spec)  # the run's new length
        logger = run_logger(run_dir, spec, console=console)
        options = spec.options
        evaluate = None
        if options.eval_interval:
            evaluate = system.evaluator(
                seed=spec.seed, episodes=options.eval_episodes, greedy=options.eval_greedy
            )
        hooks = _Hooks(spec, checkpointer, logger, evaluate, system.recipe.steps_per_update, start)
        with hooks.reporting_interrupts():
            result = system.run(
                state, seed=spec.seed, start_update=start, hooks=hooks, progress=logger
            )
    finally:
        if logger is not None:
            logger.close()
        checkpointer.close()
    summary = result.summary
    if spec.population is not None:
        from podracer.population import final_scores

        summary.update(population=spec.population.size, **final_scores(result.events))
    summary.update(agent=spec.agent, run_dir=run_dir)
    return summary


def checkpoint_steps(run_dir: str) -> list[int]:
    """The update counts of the checkpoints in ``run_dir``, read from the directory's names
    (nothing is opened or made)."""
    directory = os.path.join(run_dir, CHECKPOINT_DIR)
    names = os.listdir(directory) if os.path.isdir(directory) else []
    return sorted(int(name) for name in names if name.isdigit())


def _bytes(tree) -> int:
    return sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves(tree))


def _replay_bytes(state) -> int:
    """The bytes of the state's replay buffers: the leaves under a field named ``replay``."""
    leaves = jax.tree_util.tree_flatten_with_path(state)[0]
    return sum(
        leaf.size * leaf.dtype.itemsize
        for path, leaf in leaves
        if any(getattr(key, "name", None) == "replay" for key in path)
    )


def plan(system: loops.System, spec: RunSpec, run_dir: str, **more: Any) -> dict[str, Any]:
    """What a run of ``system`` would do, found without compiling: the resolved config, the
    devices, the steps per update and the updates, the memory of its state and of the replay
    buffers in it. The initial state's shapes come from tracing ``system.init`` (and, on
    Anakin, one update), so a size that does not divide fails here as it would in the run.

    Args:
      system: the built system (:func:`build_system`).
      spec: the run's spec.
      run_dir: where the run would write.
      **more: added to the returned record (what a sweep or a resume adds).

    Returns:
      One JSON-ready record (``podracer train --dry-run`` prints it as its last line).
    """
    state = jax.eval_shape(lambda: system.init(spec.seed))
    recipe = system.recipe
    devices = jax.devices()
    return {
        "dry_run": True,
        "run_dir": run_dir,
        **more,
        "config": spec.to_dict(),
        "devices": len(devices),
        "platform": devices[0].platform,
        "processes": jax.process_count(),
        "steps_per_update": recipe.steps_per_update,
        "num_updates": recipe.num_updates,
        "total_steps": recipe.num_updates * recipe.steps_per_update,
        "state_bytes": _bytes(state),
        "replay_bytes": _replay_bytes(state),
        **_memory_plan(system),
    }


def _memory_plan(system: loops.System) -> dict[str, Any]:
    """``{"memory": line}`` for an agent with memory: the sequences its learner re-runs on
    each device (:func:`podracer.agents.policy.describe_window`); ``{}`` otherwise."""
    rollout_len = getattr(system.config, "rollout_len", None)
    envs = getattr(system, "envs_per_device", None)
    if not rollout_len or not envs:
        return {}
    line = describe_window(system.recipe.agent_config, rollout_len, envs)
    return {"memory": line} if line else {}


def dry_run(
    spec: RunSpec,
    run_dir: str,
    *,
    resume: bool = False,
    resume_step: int | None = None,
    devices=None,
) -> dict[str, Any]:
    """What :func:`train` would do with these arguments, without compiling or writing anything
    (:func:`plan`): the system is built (environment, agent, sizes checked) and, for a resume,
    the checkpoint it would restore is found.

    Args:
      spec: the run's spec.
      run_dir: the run directory (checked by :func:`check_run_dir` beforehand).
      resume: resume the run in ``run_dir``.
      resume_step: the checkpoint to resume (default: the latest).
      devices: as for :func:`train`.

    Returns:
      The :func:`plan` record, with ``resume_from`` (a checkpoint's update count) for a resume.
    """
    system = build_system(spec, devices)
    more: dict[str, Any] = {}
    if resume:
        steps = checkpoint_steps(run_dir)
        directory = os.path.join(run_dir, CHECKPOINT_DIR)
        if not steps:
            raise CheckpointError(f"no checkpoint in {directory}")
        if resume_step is not None and resume_step not in steps:
            raise CheckpointError(
                f"no checkpoint of step {resume_step} in {directory}: the steps saved are {steps}"
            )
        more["resume_from"] = steps[-1] if resume_step is None else resume_step
    return plan(system, spec, run_dir, **more)


def dry_run_saved(
    command: str, run_dir: str, *, step: int | None = None, check=None
) -> dict[str, Any]:
    """``podracer eval`` or ``backtest`` with ``--dry-run``: the run directory's config is
    loaded and its system built (``check(run_dir) -> RunSpec`` instead of :func:`load_spec`
    where the command asks more of it), and ``step`` must be one of its checkpoints. A run
    directory that is not there yet (an earlier command of a script writes it) is named, not
    an error. Prints the record as one JSON line and returns it."""
    record: dict[str, Any] = {"dry_run": True, "command": command, "run_dir": run_dir}
    if not os.path.exists(run_dir):
        print(
            f"dry run: podracer {command} reads {run_dir}, which is not there yet "
            "(podracer train writes it)",
            file=sys.stderr,
        )
        record["exists"] = False
    else:
        spec = (check or load_spec)(run_dir)
        build_system(spec)
        steps = checkpoint_steps(run_dir)
        if step is not None and step not in steps:
            directory = os.path.join(run_dir, CHECKPOINT_DIR)
            raise CheckpointError(
                f"no checkpoint of step {step} in {directory}: the steps saved are {steps}"
            )
        record.update(exists=True, config=spec.to_dict(), checkpoints=steps)
    print(json.dumps(record), flush=True)
    return record


def describe_plan(record: dict[str, Any]) -> str:
    """The lines ``--dry-run`` prints on stderr for a :func:`plan` record."""
    config = record["config"]
    mib = 1 / 2**20
    lines = [
        f"dry run: --arch {config['arch']} --agent {config['agent']} --env {config['env']} "
        f"--seed {config['seed']}",
        f"  devices: {record['devices']} {record['platform']} "
        f"({record['processes']} process{'es' if record['processes'] > 1 else ''})",
        f"  {record['num_updates']} updates x {record['steps_per_update']} steps per update and "
        f"member = {record['total_steps']} steps",
        f"  state: {record['state_bytes'] * mib:.1f} MiB, of which replay buffers "
        f"{record['replay_bytes'] * mib:.1f} MiB",
        *([f"  memory: {record['memory']}"] if "memory" in record else []),
        f"  run directory: {record['run_dir']}"
        + (f" (resumed from update {record['resume_from']})" if "resume_from" in record else ""),
        "  nothing was compiled or written",
    ]
    return "\n".join(lines)


def restore_run(spec: RunSpec, run_dir: str, *, step: int | None = None, best: bool = False):
    """``(system, state, meta)``: the system of ``spec`` and the state of one of its checkpoints
    in ``run_dir`` (default: the latest; ``step``; ``best``: the one of the largest evaluation
    return during training), what ``podracer eval`` and ``podracer backtest`` start from."""
    with Checkpointer(run_dir, keep=spec.options.keep_checkpoints) as checkpointer:
        if best:
            if step is not None:
                raise ConfigError("--best and --step are not allowed together: give one")
            step = checkpointer.best_step()
            if step is None:
                raise CheckpointError(
                    f"no checkpoint in {checkpointer.directory} was saved with an evaluation "
                    "return: train with --eval-interval N to keep the best one"
                )
        system = build_system(spec)
        state, meta = checkpointer.restore(system.init(spec.seed), step)
    return system, state, meta


def evaluate_run(
    run_dir: str,
    *,
    episodes: int = 10,
    greedy: bool = True,
    step: int | None = None,
    best: bool = False,
) -> dict[str, Any]:
    """Evaluates a saved run's checkpoint (default: the latest; ``best``: the one of the largest
    evaluation return during training): one dict with the mean, std, min and max return over
    ``episodes`` episodes (per seed for Anakin), and the step."""
    from podracer.evaluation import summarize_returns

    spec = load_spec(run_dir)
    spec = dataclasses.replace(
        spec, options=dataclasses.replace(spec.options, eval_episodes=episodes, eval_greedy=greedy)
    )
    system, state, meta = restore_run(spec, run_dir, step=step, best=best)
    evaluate = system.evaluator(seed=spec.seed, episodes=episodes, greedy=greedy)
    returns = evaluate(state, int(meta["updates"]))
    return {
        **summarize_returns(returns),
        "per_seed_mean": [float(r) for r in returns.mean(axis=1)],
        "greedy": greedy,
        "updates": int(meta["updates"]),
        "step": int(meta["step"]),
        "run_dir": run_dir,
    }
