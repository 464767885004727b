"""Environment-family presets: defaults that suit an agent on a family of environments.

An agent's :class:`~podracer.agents.AgentSpec` declares its presets by family name
(``presets={"mujoco": {"agent": {...}, "loop": {"envs": 8, "rollout_len": 256}}}``: the loop's
sizes loop-neutral, :data:`podracer.loops.SIZES`, which each loop maps to its own fields; a
section under a loop's name, ``"anakin": {...}``, applies to that loop alone); the families are
defined once here, by the environment ids they match. The command line applies the preset of
the family an ``--env`` belongs to *under* everything the user gives (a config file, then
flags), and prints which one it applied; a library user passes the values to the configs
directly (:func:`preset_for` returns them).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any, NamedTuple

MUJOCO_TASKS = (
    "Ant",
    "HalfCheetah",
    "Hopper",
    "Humanoid",
    "HumanoidStandup",
    "InvertedDoublePendulum",
    "InvertedPendulum",
    "Pusher",
    "Reacher",
    "Swimmer",
    "Walker2d",
)

FAMILIES: dict[str, tuple[str, ...]] = {
    # MuJoCo locomotion and control, on the host (envpool, gymnasium).
    "mujoco": tuple(
        f"{kind}:{task}-v*" for kind in ("envpool", "gymnasium") for task in MUJOCO_TASKS
    ),
    # Brax's physics in JAX (Anakin).
    "brax": ("brax:*",),
    # MinAtar's 10x10 frames in JAX (gymnax), [H, W, C] with a channel per object.
    "minatar": ("gymnax:*-MinAtar",),
    # Stock trading (podracer.trading.environment): D assets' orders in [-1, 1]^D, a day per step.
    "trading": ("trading:*",),
    # Discrete classic control: a few actions, vector observations, short episodes.
    "classic_control": tuple(
        f"{kind}:{task}"
        for kind in ("gymnax", "envpool", "gymnasium")
        for task in ("CartPole-v1", "Acrobot-v1", "MountainCar-v0")
    ),
    # Continuous classic control: one or two actions, short episodes.
    "classic_continuous": tuple(
        f"{kind}:{task}"
        for kind in ("gymnax", "envpool", "gymnasium")
        for task in ("Pendulum-v1", "MountainCarContinuous-v0")
    ),
    # The JAX suites (podracer.envs.suites): MuJoCo Playground's DM Control Suite and
    # locomotion on MJX, Craftax, Jumanji, the MiniGrids in JAX (NAVIX, XLand-MiniGrid),
    # POPGym Arcade and pgx's single-player games.
    "playground": ("playground:*",),
    "craftax": ("craftax:*",),
    # Jumanji's Snake before the rest of Jumanji (the first family that matches wins): its
    # presets send Snake's "grid" through a CNN, which the other games do not have.
    "snake": ("jumanji:Snake-*",),
    "jumanji": ("jumanji:*",),
    "minigrid": ("navix:*", "xminigrid:*"),
    "popgym_arcade": ("popgym_arcade:*",),
    "pgx": ("pgx:*",),
}
"""Family name -> ``fnmatch`` patterns of the environment ids in it (the query string of an id,
``brax:ant?backend=positional``, is ignored)."""


class Preset(NamedTuple):
    """The values a family's preset sets: ``agent`` for the agent config, ``loop`` for the
    loop's config."""

    family: str
    agent: Mapping[str, Any]
    loop: Mapping[str, Any]


def family_of(env_id: str) -> str | None:
    """The family ``env_id`` belongs to, or None."""
    bare = env_id.split("?", 1)[0]
    for family, patterns in FAMILIES.items():
        if any(fnmatch.fnmatchcase(bare, pattern) for pattern in patterns):
            return family
    return None


def preset_for(agent_spec, env_id: str, loop) -> Preset | None:
    """The preset ``agent_spec`` declares for ``env_id``'s family, with the values for the loop
    ``loop`` (a :class:`~podracer.loops.Loop` or its name) in its config's field names
    (:func:`podracer.loops.loop_values`); None when there is none."""
    from podracer import loops

    family = family_of(env_id)
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
        f"preset {preset.family!r} for --agent {agent_name} on {env_id} (podracer/loops/presets.py; "
        f"flags and --config override it): {shown}"
    )
