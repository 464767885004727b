"""Runs: a run directory, its config, loggers, checkpoints, periodic evaluation and resume.

A run directory holds::

    config.json      the full resolved RunSpec (load it back with load_spec)
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
import time
from typing import Any

import jax
import numpy as np

from podracer.checkpoint import Checkpointer, CheckpointError
from podracer.config import ConfigError
from podracer.logging import is_main_process, make_logger
from podracer.parallel import fetch

ARCHS = ("anakin", "sebulba")
CONFIG_FILE = "config.json"


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

    def __post_init__(self):
        if self.population is not None and self.arch != "anakin":
            raise ConfigError(
                f"--population is not allowed with --arch {self.arch}: a population trains on "
                "the Anakin loop (--arch anakin)"
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
        }
        if self.population is not None:
            out["population"] = dataclasses.asdict(self.population)
        return out


def arch_config_cls(arch: str) -> type:
    if arch == "anakin":
        from podracer.anakin import AnakinConfig

        return AnakinConfig
    if arch == "sebulba":
        from podracer.sebulba import SebulbaConfig

        return SebulbaConfig
    raise ConfigError(f"arch={arch!r} is not allowed: choose one of {', '.join(ARCHS)}")


def dataclass_from_dict(cls: type, values: dict[str, Any], where: str):
    """``cls(**values)`` with JSON lists turned back into tuples; an unknown field is an error
    naming it and the fields allowed."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(
            f"{where}: unknown field(s) {', '.join(unknown)} for {cls.__name__}; the fields are "
            f"{', '.join(fields)}"
        )
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def spec_from_dict(data: dict[str, Any], where: str = "config") -> RunSpec:
    from podracer import agents

    known = {"arch", "agent", "env", "seed", "total_timesteps", "agent_config", "arch_config"}
    unknown = sorted(set(data) - known - {"options", "population"})
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; the keys are {', '.join(sorted(known))}"
            ", options, population"
        )
    population = None
    if data.get("population") is not None:
        from podracer.population import PopulationConfig

        population = dataclass_from_dict(
            PopulationConfig, data["population"], f"{where}: population"
        )
    agent = data.get("agent", "ppo")
    if agent not in agents.AGENTS:
        raise ConfigError(
            f"{where}: agent={agent!r} is not allowed: choose one of {', '.join(agents.AGENTS)}"
        )
    arch = data.get("arch", "anakin")
    arch_cls = arch_config_cls(arch)
    return RunSpec(
        arch=arch,
        agent=agent,
        env=data["env"],
        seed=int(data.get("seed", 0)),
        total_timesteps=int(data["total_timesteps"]),
        agent_config=dataclass_from_dict(
            agents.AGENTS[agent].config_cls, data.get("agent_config", {}), f"{where}: agent_config"
        ),
        arch_config=dataclass_from_dict(arch_cls, data.get("arch_config", {}), f"{where}: arch"),
        options=dataclass_from_dict(RunOptions, data.get("options", {}), f"{where}: options"),
        population=population,
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
    with open(os.path.join(run_dir, CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump(spec.to_dict(), f, indent=2)
        f.write("\n")


def load_spec(run_dir: str) -> RunSpec:
    path = os.path.join(run_dir, CONFIG_FILE)
    if not os.path.isfile(path):
        raise ConfigError(f"{run_dir!r} is not a run directory: {path} does not exist")
    with open(path, encoding="utf-8") as f:
        return spec_from_dict(json.load(f), where=path)


def default_run_dir(spec: RunSpec, root: str = "runs") -> str:
    env = spec.env.replace(":", "_").replace("/", "_")
    now = time.time()
    if jax.process_count() > 1:  # one directory for every process: process 0's clock
        from jax.experimental import multihost_utils

        now = float(multihost_utils.broadcast_one_to_all(np.float64(now)))
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    arch = spec.arch if spec.population is None else f"{spec.arch}-pop{spec.population.size}"
    return os.path.join(root, f"{env}-{spec.agent}-{arch}-{stamp}")


class _Hooks:
    """Periodic evaluation and checkpoints between calls (:class:`podracer.anakin.RunHooks`)."""

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

    def save(self, state, updates: int, eval_return=None) -> None:
        if updates == self.start:
            return  # nothing new since the checkpoint this run started from
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


def eval_key(seed: int, updates: int) -> jax.Array:
    """Evaluation's own keys: they never touch the training state's keys."""
    return jax.random.fold_in(jax.random.key(seed + 1_000_003), updates)


def anakin_evaluator(spec: RunSpec, system):
    """``evaluate(state, updates) -> returns [seeds, episodes]`` for an Anakin run: every seed's
    params on ``eval_episodes`` fresh environments, on device."""
    from podracer import agents, envs
    from podracer.evaluation import make_evaluator

    env = envs.make(spec.env)
    agent, _ = agents.build(spec.agent_config, env.action_spec.num_actions, 1)
    evaluate = make_evaluator(
        env, agent, num_episodes=spec.options.eval_episodes, greedy=spec.options.eval_greedy
    )
    per_seed = jax.jit(jax.vmap(evaluate))
    num_seeds = system.config.num_seeds

    def run(state, updates):
        keys = jax.random.split(eval_key(spec.seed, updates), num_seeds)
        return fetch(per_seed(state.learner.params, keys))

    return run


def sebulba_evaluator(spec: RunSpec, num_actions: int):
    """``evaluate(state, updates) -> returns [1, episodes]`` for a Sebulba run: the learner's
    params on a separate host environment of ``eval_episodes`` environments."""
    from podracer import agents
    from podracer.evaluation import evaluate_host
    from podracer.sebulba import env_factory

    config = dataclasses.replace(
        spec.arch_config, envs_per_actor=spec.options.eval_episodes, async_batch_size=0
    )
    make_env = env_factory(spec.env, _single_learner(config), seed=spec.seed + 1_000_003)
    agent, _ = agents.build(spec.agent_config, num_actions, 1)

    def run(state, updates):
        env = make_env(0)
        try:
            params = jax.device_get(state.params)
            returns = evaluate_host(
                env, agent, params, eval_key(spec.seed, updates), greedy=spec.options.eval_greedy
            )
        finally:
            env.close()
        return returns[None]

    return run


def _single_learner(config):
    # envs_per_actor need not divide over the learners for an evaluation environment
    return dataclasses.replace(config, learner_device_ids=(config.learner_device_ids[0],))


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

    The system is built (and a bad config or environment id reported) before anything is
    written into ``run_dir``.
    """
    if spec.arch == "anakin":
        system = build_anakin(spec, devices)
        initial = system.init(spec.seed)
        jax.eval_shape(system.make_step(1), initial)  # sizes that do not divide fail here
    else:
        from podracer.sebulba import env_factory

        env_factory(spec.env, spec.arch_config, spec.seed)(-1).close()  # a bad id fails here
    if not resume:
        save_spec(run_dir, spec)
    logger = make_logger(
        run_dir,
        spec.total_timesteps,
        console=console,
        tensorboard=spec.options.tensorboard,
        wandb=spec.options.wandb,
        wandb_online=spec.options.wandb_online,
        config=spec.to_dict(),
    )
    checkpointer = Checkpointer(run_dir, keep=spec.options.keep_checkpoints)
    try:
        if spec.arch == "anakin":
            summary = _train_anakin(
                spec, system, initial, checkpointer, logger, resume, resume_step
            )
        else:
            summary = _train_sebulba(spec, checkpointer, logger, resume, resume_step, devices)
    finally:
        logger.close()
        checkpointer.close()
    summary.update(
        agent=spec.agent,
        run_dir=run_dir,
        processes=jax.process_count(),
        process=jax.process_index(),
    )
    return summary


def build_anakin(spec: RunSpec, devices=None):
    """The Anakin system of a spec: a population's when ``spec.population`` is set."""
    if spec.population is not None:
        from podracer import population

        return population.build(
            spec.env,
            spec.agent_config,
            spec.arch_config,
            spec.population,
            total_timesteps=spec.total_timesteps,
            devices=devices,
        )
    from podracer import anakin

    return anakin.build(
        spec.env,
        spec.agent_config,
        spec.arch_config,
        total_timesteps=spec.total_timesteps,
        devices=devices,
    )


def _train_anakin(spec, system, state, checkpointer, logger, resume, resume_step):
    from podracer import anakin

    start = 0
    if resume:
        state, meta = checkpointer.restore(state, resume_step)
        start = int(meta["updates"])
    hooks = _Hooks(
        spec,
        checkpointer,
        logger,
        anakin_evaluator(spec, system) if spec.options.eval_interval else None,
        system.config.steps_per_update,
        start,
    )
    with hooks.reporting_interrupts():
        result = anakin.run(
            system,
            seed=spec.seed,
            total_timesteps=spec.total_timesteps,
            progress=logger,
            state=state,
            start_update=start,
            hooks=hooks,
        )
    result.summary.update(
        env=spec.env, arch="anakin", seed=spec.seed, devices=system.mesh.devices.size
    )
    if spec.population is not None:
        from podracer.population import final_scores

        result.summary.update(population=spec.population.size, **final_scores(result.events))
    return result.summary


def _train_sebulba(spec, checkpointer, logger, resume, resume_step, devices):
    from podracer import sebulba

    state, start, num_actions = None, 0, None
    if resume or spec.options.eval_interval:
        template, num_actions = sebulba_learner_template(spec)
        if resume:
            state, meta = checkpointer.restore(template, resume_step)
            start = int(meta["updates"])
    hooks = _Hooks(
        spec,
        checkpointer,
        logger,
        sebulba_evaluator(spec, num_actions) if spec.options.eval_interval else None,
        spec.arch_config.steps_per_update * jax.process_count(),
        start,
    )
    with hooks.reporting_interrupts():
        result = sebulba.train(
            spec.env,
            spec.agent_config,
            spec.arch_config,
            seed=spec.seed,
            total_timesteps=spec.total_timesteps,
            progress=logger,
            devices=devices,
            state=state,
            start_update=start,
            hooks=hooks,
        )
    return result.summary


def sebulba_learner_template(spec: RunSpec):
    """``(LearnerState, num_actions)``: a freshly initialised learner state on the host, the
    template a Sebulba checkpoint is restored into."""
    from podracer import agents
    from podracer.core.learner import make_learner
    from podracer.sebulba import env_factory

    probe = env_factory(spec.env, spec.arch_config, spec.seed)(-1)
    num_actions = probe.action_spec.num_actions
    example_obs = np.zeros(probe.observation_spec.shape, probe.observation_spec.dtype)
    probe.close()
    steps = max(1, spec.total_timesteps // spec.arch_config.steps_per_update)
    agent, optimizer = agents.build(spec.agent_config, num_actions, steps)
    learner = make_learner(
        agent,
        optimizer,
        num_epochs=spec.agent_config.num_epochs,
        num_minibatches=spec.agent_config.num_minibatches,
    )
    state = jax.jit(learner.init)(jax.random.key(spec.seed), example_obs)
    return state, num_actions


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
        if spec.arch == "anakin":
            system = build_anakin(spec)
            state, meta = checkpointer.restore(system.init(spec.seed), step)
            returns = anakin_evaluator(spec, system)(state, int(meta["updates"]))
        else:
            template, num_actions = sebulba_learner_template(spec)
            state, meta = checkpointer.restore(template, step)
            returns = sebulba_evaluator(spec, num_actions)(state, int(meta["updates"]))
    return {
        **summarize_returns(returns),
        "per_seed_mean": [float(r) for r in returns.mean(axis=1)],
        "greedy": greedy,
        "updates": int(meta["updates"]),
        "step": int(meta["step"]),
        "run_dir": run_dir,
    }
