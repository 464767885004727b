"""Environment-family presets: defaults that suit an agent on a family of environments.

An agent's :class:`~podracer.agents.AgentSpec` declares its presets by family name
(``presets={"mujoco": {"agent": {...}, "loop": {"envs": 8, "rollout_len": 256}}}``: the loop's
sizes loop-neutral, :data:`podracer.loops.SIZES`, which each loop maps to its own fields; a
section under a loop's name, ``"anakin": {...}``, applies to that loop alone and may hold that
loop's own ``"agent"`` values; a ``"memory"`` section, at the top or in a loop's section,
applies to an agent with memory alone; an optional ``"total_timesteps"`` in any of them is the
run's length where the agent needs more steps than the command line's 500,000 to reach what
``docs/defaults.md`` states: :func:`preset_for` says which wins); which family an
environment id belongs to is said by its row of the environment registry
(:func:`podracer.envs.registry.preset_family`). The command line applies the preset of
the family an ``--env`` belongs to *under* everything the user gives (a config file, then
flags), and prints which one it applied; a library user passes the values to the configs
directly (:func:`preset_for` returns them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from podracer.envs.registry import preset_family
from podracer.errors import ConfigValueError

RUN_KEYS = ("agent", "total_timesteps")
"""The keys of a preset (or of its section for one loop) that are not the loop's config."""


class Preset(NamedTuple):
    """The values a family's preset sets: ``agent`` for the agent config, ``loop`` for the
    loop's config, ``total_timesteps`` for the run's length (None: the command line's)."""

    family: str
    agent: Mapping[str, Any]
    loop: Mapping[str, Any]
    total_timesteps: int | None = None


def preset_for(agent_spec, env_id: str, loop, memory: bool = False) -> Preset | None:
    """The preset ``agent_spec`` declares for ``env_id``'s family, with the values for the loop
    ``loop`` (a :class:`~podracer.loops.Loop` or its name) in its config's field names
    (:func:`podracer.loops.loop_values`) and, with ``memory`` (an agent whose ``memory`` is not
    ``"none"``), those of its ``"memory"`` sections; None when it sets nothing here.

    The layers, each winning over the one before: the entry, its ``"memory"`` section, the
    entry's section for ``loop``, that section's ``"memory"`` section. Each layer may hold
    ``"agent"`` values and a ``"total_timesteps"``; the rest of a layer is the loop's sizes.
    """
    from podracer import loops

    family = preset_family(env_id)
    presets = getattr(agent_spec, "presets", {}) or {}
    if family is None or family not in presets:
        return None
    where = f"{agent_spec.name}: presets[{family!r}]"
    loop_name = loop if isinstance(loop, str) else loop.name
    agent_values: dict[str, Any] = {}
    neutral: dict[str, Any] = {}  # the loop-neutral sizes (and "loop"'s per-loop sections)
    own: dict[str, Any] = {}  # this loop's section: its fields or neutral sizes
    steps = None

    def take(layer: Mapping[str, Any], sizes: dict[str, Any]) -> None:
        nonlocal steps
        agent_values.update(layer.get("agent", {}))
        steps = layer.get("total_timesteps", steps)
        sizes.update(layer.get("loop", {}))
        sizes.update(
            (k, v)
            for k, v in layer.items()
            if k not in (*RUN_KEYS, "loop", "memory") and k not in loops.names()
        )

    entry = presets[family]
    section = entry.get(loop_name, {})
    take(entry, neutral)
    if memory:
        take(entry.get("memory", {}), neutral)
    take(section, own)
    if memory:
        take(section.get("memory", {}), own)
    own = {**neutral.pop(loop_name, {}), **own}  # a "loop": {loop_name: ...} section, then own
    loop_part = loops.loop_values({**neutral, loop_name: own}, loop, where)
    if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps <= 0):
        raise ConfigValueError(f"{where}: total_timesteps={steps!r} is not allowed: an int > 0")
    if not agent_values and not loop_part and steps is None:
        return None  # the preset sets nothing for this loop
    return Preset(family, agent_values, loop_part, steps)


def describe(preset: Preset, agent_name: str, env_id: str) -> str:
    """One line naming the preset and what it set."""
    values = {**{f"agent.{k}": v for k, v in preset.agent.items()}}
    values.update({f"arch.{k}": v for k, v in preset.loop.items()})
    if preset.total_timesteps is not None:
        values["total-timesteps"] = preset.total_timesteps
    shown = ", ".join(f"{k}={v}" for k, v in values.items())
    return (
        f"preset {preset.family!r} for --agent {agent_name} on {env_id} "
        f"(podracer/loops/presets.py; flags and --config override it): {shown}"
    )
