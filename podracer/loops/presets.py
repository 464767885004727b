"""Environment-family presets: defaults that suit an agent on a family of environments.

An agent's :class:`~podracer.agents.AgentSpec` declares its presets by family name
(``presets={"mujoco": {"agent": {...}, "loop": {"envs": 8, "rollout_len": 256}}}``: the loop's
sizes loop-neutral, :data:`podracer.loops.SIZES`, which each loop maps to its own fields; a
section under a loop's name, ``"anakin": {...}``, applies to that loop alone); which family an
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


class Preset(NamedTuple):
    """The values a family's preset sets: ``agent`` for the agent config, ``loop`` for the
    loop's config."""

    family: str
    agent: Mapping[str, Any]
    loop: Mapping[str, Any]


def preset_for(agent_spec, env_id: str, loop) -> Preset | None:
    """The preset ``agent_spec`` declares for ``env_id``'s family, with the values for the loop
    ``loop`` (a :class:`~podracer.loops.Loop` or its name) in its config's field names
    (:func:`podracer.loops.loop_values`); None when there is none."""
    from podracer import loops

    family = preset_family(env_id)
    presets = getattr(agent_spec, "presets", {}) or {}
    if family is None or family not in presets:
        return None
    entry = presets[family]
    sizes = {k: v for k, v in entry.items() if k not in ("agent", "loop")}
    where = f"{agent_spec.name}: presets[{family!r}]"
    loop_part = loops.loop_values({**entry.get("loop", {}), **sizes}, loop, where)
    return Preset(family, dict(entry.get("agent", {})), loop_part)


def describe(preset: Preset, agent_name: str, env_id: str) -> str:
    """One line naming the preset and what it set."""
    values = {**{f"agent.{k}": v for k, v in preset.agent.items()}}
    values.update({f"arch.{k}": v for k, v in preset.loop.items()})
    shown = ", ".join(f"{k}={v}" for k, v in values.items())
    return (
        f"preset {preset.family!r} for --agent {agent_name} on {env_id} "
        f"(podracer/loops/presets.py; flags and --config override it): {shown}"
    )
