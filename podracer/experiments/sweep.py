"""Sweeps: seeds and numeric hyper-parameters.

On a loop whose members run as one program (Anakin) a sweep is ONE program: every member (a
combination of hyper-parameter values and a seed) is one more entry of the vmapped seed axis,
and its hyper-parameters are traced values carried in the state (:class:`podracer.loops.Members`),
so the whole grid compiles once. On other loops (Sebulba) the grid runs one member after
another, each in a run directory of its own. The sweepable fields of an agent are its spec's
``search_space``.

Members are ordered combination-major: member ``c * seeds + s`` has the ``c``-th combination of
the grid (``itertools.product`` order of the fields as given) and seed ``seed + s``. The results
table aggregates each combination over its seeds: mean, median, IQM and the IQM's bootstrap 95%
confidence interval (:mod:`podracer.util.stats`).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from podracer.agents.spec import AgentSpec
from podracer.errors import ConfigError
from podracer.loops import Loop, Members


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


def sweepable(agent_spec: AgentSpec) -> tuple[str, ...]:
    """The fields an agent's sweeps may trace: its spec's ``search_space``."""
    return tuple(agent_spec.search_space)


def check_grid(agent_spec: AgentSpec, agent_config: Any, grid: Grid) -> None:
    """Every swept field sweepable, every value valid for the agent's config (checked by
    building the config with it)."""
    if grid.seeds < 1:
        raise ConfigError(f"--seeds={grid.seeds} is not allowed: it must be >= 1")
    allowed = sweepable(agent_spec)
    for name, values in grid.values.items():
        if name not in allowed:
            raise ConfigError(
                f"--sweep.{name.replace('_', '-')} is not allowed: the sweepable fields of "
                f"{agent_spec.name} are {', '.join(allowed)}"
            )
        if not values:
            raise ConfigError(f"--sweep.{name.replace('_', '-')} needs one or more values")
        for value in values:
            dataclasses.replace(agent_config, **{name: value})  # validates the value


def members(grid: Grid, build) -> Members:
    """:class:`podracer.loops.Members` of the grid: ``build(hparams)`` (a recipe's ``member``)
    makes the agent and optimizer of one member from its traced hyper-parameters."""
    combos = grid.combinations()
    hparams = {
        name: np.repeat(np.asarray([c[name] for c in combos], np.float32), grid.seeds)
        for name in grid.values
    }
    offsets = np.tile(np.arange(grid.seeds), len(combos))
    return Members(build=build, hparams=hparams, seed_offsets=offsets)


def sweep_system(
    loop: Loop,
    env_id: str,
    agent_spec: AgentSpec,
    agent_config: Any,
    config,
    grid: Grid,
    *,
    seed: int = 0,
    total_timesteps: int,
    devices=None,
    env_options=None,
):
    """The system that runs the whole grid as one program of ``loop`` (its members in one
    program; member ``c * seeds + s`` has combination ``c`` and seed ``seed + s``), every member
    on the environment with ``env_options`` (an :class:`~podracer.envs.EnvOptions`)."""
    from podracer import loops

    check_grid(agent_spec, agent_config, grid)
    return loops.build_members(
        loop,
        env_id,
        agent_config,
        config,
        grid.num_members,
        agent_spec=agent_spec,
        total_timesteps=total_timesteps,
        seed=seed,
        devices=devices,
        members=lambda recipe: members(grid, recipe.member),
        env_options=env_options,
    )


def first_system(spec, grid: Grid):
    """The system a sweep of ``spec`` (one member's :class:`~podracer.runs.RunSpec`) over
    ``grid`` builds first: the whole grid's (:func:`sweep_system`) on a loop whose members run as
    one program, else its first member's (the others differ only in their values).

    Args:
      spec: one member's spec.
      grid: the swept values and the seeds per combination.

    Returns:
      A built :class:`podracer.loops.System` (nothing compiled).
    """
    from podracer import loops, runs

    loop = loops.get(spec.arch)
    agent_spec = spec.agent_spec
    check_grid(agent_spec, spec.agent_config, grid)
    if not loop.members_in_one_program:
        first = grid.combinations()[0]
        config = dataclasses.replace(spec.agent_config, **first)
        return runs.build_system(dataclasses.replace(spec, agent_config=config))
    return sweep_system(
        loop,
        spec.env,
        agent_spec,
        spec.agent_config,
        spec.arch_config,
        grid,
        seed=spec.seed,
        total_timesteps=spec.total_timesteps,
        env_options=spec.env_options,
    )


def run_in_one_program(system, grid: Grid, *, seed: int = 0, progress=None):
    """Runs a :func:`sweep_system`; returns the :class:`podracer.loops.RunResult`
    (``num_seeds`` = members) and the member table."""
    result = system.run(None, seed=seed, progress=progress)
    result.summary.update(agent=system.recipe.agent_spec.name)
    rows = member_rows(grid, seed, result.summary["final_return_per_seed"])
    return result, rows


def sweep_in_one_program(loop, env_id, agent_spec, agent_config, config, grid, **kwargs):
    """:func:`sweep_system` and :func:`run_in_one_program` in one call (``kwargs``: ``seed``,
    ``total_timesteps``, ``devices``, ``progress``, ``env_options``)."""
    progress = kwargs.pop("progress", None)
    system = sweep_system(loop, env_id, agent_spec, agent_config, config, grid, **kwargs)
    return run_in_one_program(system, grid, seed=kwargs.get("seed", 0), progress=progress)


def member_rows(grid: Grid, seed: int, finals: Sequence[float | None]) -> list[dict[str, Any]]:
    rows = []
    for i, (combo, s) in enumerate(itertools.product(grid.combinations(), range(grid.seeds))):
        rows.append({"member": i, "seed": seed + s, **combo, "final_return": finals[i]})
    return rows


def table(grid: Grid, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per combination: its values and the summary over its seeds."""
    from podracer.util import stats

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


def sweep_in_turn(spec, grid: Grid, run_dir: str, *, console: bool = True) -> list[dict]:
    """The grid as runs one after another, each in ``run_dir/member-<i>``."""
    from podracer import runs

    check_grid(spec.agent_spec, spec.agent_config, grid)
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


def run_sweep(spec, grid: Grid, run_dir: str, *, console: bool = True) -> list[dict[str, Any]]:
    """Runs the sweep of ``spec`` (a :class:`podracer.runs.RunSpec`, one member's) over
    ``grid`` in ``run_dir``: one program on a loop whose members run as one, else the members in
    turn. Writes ``results.json`` (the grid, the members, the table) and returns the table, one
    row per combination."""
    import json

    from podracer import loops, runs
    from podracer.runs.rundir import RESULTS_FILE

    loop = loops.get(spec.arch)
    check_grid(spec.agent_spec, spec.agent_config, grid)
    if loop.members_in_one_program:
        system = first_system(spec, grid)  # built before anything is written: a bad id fails
        runs.save_spec(
            run_dir,
            dataclasses.replace(
                spec, arch_config=loop.with_members(spec.arch_config, grid.num_members)
            ),
        )
        with runs.run_logger(run_dir, spec, console=console) as logger:
            _, rows = run_in_one_program(system, grid, seed=spec.seed, progress=logger)
    else:
        rows = sweep_in_turn(spec, grid, run_dir, console=console)
    combos = table(grid, rows)
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, RESULTS_FILE), "w", encoding="utf-8") as f:
        results = {"grid": dict(grid.values), "seeds": grid.seeds, "members": rows}
        json.dump({**results, "table": combos}, f, indent=2)
    return combos
