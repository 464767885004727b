"""Sweeps: seeds and numeric hyper-parameters.

For Anakin a sweep is ONE program: every member (a combination of hyper-parameter values and a
seed) is one more entry of the vmapped seed axis, and its hyper-parameters are traced values
carried in the state (:class:`podracer.anakin.Members`), so the whole grid compiles once. For
Sebulba the grid runs one member after another.

Members are ordered combination-major: member ``c * seeds + s`` has the ``c``-th combination of
the grid (``itertools.product`` order of the fields as given) and seed ``seed + s``. The results
table aggregates each combination over its seeds: mean, median, IQM and the IQM's bootstrap 95%
confidence interval (:mod:`podracer.stats`).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from podracer.config import ConfigError

SWEEPABLE: dict[str, tuple[str, ...]] = {
    # Fields used only inside jnp / optax arithmetic: they can be traced. (Not max_grad_norm:
    # whether to clip at all is a Python decision.)
    "ppo": ("lr", "gamma", "gae_lambda", "clip_eps", "ent_coef", "vf_coef"),
    "impala": (
        "lr",
        "gamma",
        "vtrace_lambda",
        "clip_rho",
        "clip_pg_rho",
        "baseline_cost",
        "entropy_cost",
    ),
    "qlambda": ("lr", "gamma", "q_lambda", "epsilon"),
}


@dataclasses.dataclass(frozen=True)
class Grid:
    """The values of each swept field, and the number of seeds per combination."""

    values: dict[str, tuple[float, ...]]
    seeds: int = 1

    def combinations(self) -> list[dict[str, float]]:
        names = list(self.values)
        return [
            dict(zip(names, combo, strict=True))
            for combo in itertools.product(*(self.values[n] for n in names))
        ]

    @property
    def num_members(self) -> int:
        return len(self.combinations()) * self.seeds


def check_grid(agent: str, agent_config: Any, grid: Grid) -> None:
    """Every swept field sweepable, every value valid for the agent's config (checked by
    building the config with it)."""
    if grid.seeds < 1:
        raise ConfigError(f"--seeds={grid.seeds} is not allowed: it must be >= 1")
    allowed = SWEEPABLE.get(agent, ())
    for name, values in grid.values.items():
        if name not in allowed:
            raise ConfigError(
                f"--sweep.{name.replace('_', '-')} is not allowed: the sweepable fields of "
                f"{agent} are {', '.join(allowed)}"
            )
        if not values:
            raise ConfigError(f"--sweep.{name.replace('_', '-')} needs one or more values")
        for value in values:
            dataclasses.replace(agent_config, **{name: value})  # validates the value


def members(agent: str, agent_config: Any, grid: Grid, num_actions: int, num_updates: int):
    """:class:`podracer.anakin.Members` of the grid: ``build`` makes the agent and optimizer of
    one member from its traced hyper-parameters."""
    from podracer import agents
    from podracer.anakin import Members

    combos = grid.combinations()
    hparams = {
        name: np.repeat(np.asarray([c[name] for c in combos], np.float32), grid.seeds)
        for name in grid.values
    }
    offsets = np.tile(np.arange(grid.seeds), len(combos))

    def build(values):
        config = dataclasses.replace(agent_config, **values)  # traced values skip the checks
        return agents.build(config, num_actions, num_updates)

    del agent
    return Members(build=build, hparams=hparams, seed_offsets=offsets)


def sweep_anakin(
    env_id: str,
    agent: str,
    agent_config: Any,
    config,
    grid: Grid,
    *,
    seed: int = 0,
    total_timesteps: int,
    devices=None,
    progress=None,
):
    """Runs the whole grid as one Anakin program; returns :class:`podracer.anakin.RunResult`
    (``num_seeds`` = members) and the member table."""
    from podracer import anakin, envs
    from podracer.core.learner import choose_execution

    check_grid(agent, agent_config, grid)
    env = envs.make(env_id)
    config = dataclasses.replace(config, num_seeds=grid.num_members)
    num_updates = max(1, total_timesteps // config.steps_per_update)
    team = members(agent, agent_config, grid, env.action_spec.num_actions, num_updates)
    from podracer import agents

    base_agent, base_optimizer = agents.build(agent_config, env.action_spec.num_actions, 1)
    system = anakin.make_anakin(
        env,
        base_agent,
        base_optimizer,
        config,
        num_epochs=agent_config.num_epochs,
        num_minibatches=agent_config.num_minibatches,
        devices=devices,
        execution=choose_execution(agent_config, config, devices),
        members=team,
    )
    result = anakin.run(system, seed=seed, total_timesteps=total_timesteps, progress=progress)
    result.summary.update(env=env_id, arch="anakin", seed=seed, agent=agent)
    rows = member_rows(grid, seed, result.summary["final_return_per_seed"])
    return result, rows


def member_rows(grid: Grid, seed: int, finals: Sequence[float | None]) -> list[dict[str, Any]]:
    rows = []
    for i, (combo, s) in enumerate(itertools.product(grid.combinations(), range(grid.seeds))):
        rows.append({"member": i, "seed": seed + s, **combo, "final_return": finals[i]})
    return rows


def table(grid: Grid, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per combination: its values and the summary over its seeds."""
    from podracer import stats

    out = []
    for combo in grid.combinations():
        finals = [
            r["final_return"]
            for r in rows
            if all(r[k] == v for k, v in combo.items()) and r["final_return"] is not None
        ]
        summary = stats.summarize(finals)
        out.append({**combo, **summary})
    return out


def sweep_sebulba(spec, grid: Grid, run_dir: str, *, console: bool = True) -> list[dict]:
    """The grid as Sebulba runs one after another, each in ``run_dir/member-<i>``."""
    from podracer import runs

    check_grid(spec.agent, spec.agent_config, grid)
    rows = []
    for i, (combo, s) in enumerate(itertools.product(grid.combinations(), range(grid.seeds))):
        member = dataclasses.replace(
            spec,
            seed=spec.seed + s,
            agent_config=dataclasses.replace(spec.agent_config, **combo),
        )
        summary = runs.train(member, os.path.join(run_dir, f"member-{i}"), console=console)
        rows.append(
            {"member": i, "seed": member.seed, **combo, "final_return": summary["final_return"]}
        )
    return rows


def parse_sweep_flags(argv: Sequence[str]) -> tuple[dict[str, tuple[float, ...]], list[str]]:
    """``--sweep.FIELD v1,v2,...`` (or ``--sweep.FIELD=v1,v2``) out of ``argv``: the values per
    field (kebab- or snake-case) and the remaining arguments."""
    values: dict[str, tuple[float, ...]] = {}
    rest: list[str] = []
    it = iter(argv)
    for arg in it:
        if not arg.startswith("--sweep."):
            rest.append(arg)
            continue
        name, _, text = arg[len("--sweep.") :].partition("=")
        if not text:
            text = next(it, "")
        name = name.replace("-", "_")
        try:
            values[name] = tuple(float(v) for v in text.split(",") if v.strip())
        except ValueError as error:
            raise ConfigError(
                f"--sweep.{name.replace('_', '-')}={text!r} is not allowed: give numbers "
                "separated by commas, e.g. 3e-4,1e-3"
            ) from error
    return values, rest
