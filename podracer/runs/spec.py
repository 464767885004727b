"""What a run is: its spec (agent, loop and environment configs, options) as saved in
``config.json`` and loaded back, and the checks of a run directory and of several processes'
agreement."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from typing import Any

import jax
import numpy as np

from podracer import agents, loops
from podracer.envs.options import EnvOptions, as_options
from podracer.errors import ConfigError
from podracer.parallel import is_main_process
from podracer.runs.rundir import CHECKPOINT_DIR, CONFIG_FILE


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
    video_interval: int = 0
    """Record a video of one greedy episode every this many updates, off the training path,
    into ``videos/`` of the run directory, TensorBoard and wandb (0: none; needs
    ``pip install 'podracer[video]'``)."""
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
        for name in ("checkpoint_interval", "eval_interval", "video_interval"):
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
        from podracer.population.ensemble import PopulationConfig

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
