"""The renderer of the gymnax family (``gymnax:<name>``): what gymnax's own visualiser
(``gymnax.visualize``) draws, as frames.

- **Classic control** (CartPole-v1, Acrobot-v1, MountainCar-v0, Pendulum-v1,
  MountainCarContinuous-v0): gymnasium's classic-control renderer (pygame, ``rgb_array``, no
  display), given gymnax's state and the params it draws with. gymnax's visualiser draws these
  tasks the same way (``gymnax/visualize/vis_gym.py`` sets a gymnasium environment's state and
  calls its ``render``); it is called here directly, with one gymnasium environment for all
  ``T`` frames, because ``vis_gym``'s functions differ between gymnax releases. gymnasium is a
  dependency of podracer; pygame is not (gymnasium's ``classic-control`` extra): without it
  these tasks raise :class:`NoRenderer`. Frames: 600 x 400 (CartPole, the mountain cars),
  500 x 500 (Acrobot, Pendulum).
- **MinAtar** (the five ``*-MinAtar`` games) **and Pong-misc**: the ``[H, W, C]`` observation
  of each state (gymnax's ``get_obs``, vmapped over ``T``), each cell the colour of the
  highest channel set in it (black where none), in gymnax's palette (``vis_minatar``:
  seaborn's ``cubehelix`` of ``C`` colours), each cell :data:`MINATAR_CELL` pixels: 320 x 320.
- **Catch-bsuite, MetaMaze-misc, FourRooms-misc, PointRobot-misc**: gymnax's matplotlib
  drawings (``vis_catch``, ``vis_maze``, and ``vis_circle``'s figure drawn here without
  pyplot), on an Agg canvas (no display): 400 x 400.
- The other gymnax tasks (the bandits, the chains, DeepSea, MemoryChain, FrozenLake, Reacher,
  Swimmer) are not drawn by gymnax: :class:`NoRenderer`.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import jax
import numpy as np

from podracer.envs.render import NoRenderer

CLASSIC_CONTROL: dict[str, tuple[str, ...]] = {
    "CartPole-v1": ("x", "x_dot", "theta", "theta_dot"),
    "Acrobot-v1": ("joint_angle1", "joint_angle2", "velocity_1", "velocity_2"),
    "Pendulum-v1": ("theta", "theta_dot"),
    "MountainCar-v0": ("position", "velocity"),
    "MountainCarContinuous-v0": ("position", "velocity"),
}
"""The classic-control tasks and the fields of gymnax's state that make gymnasium's state
vector, in its order."""

_MOUNTAIN = {name: name for name in ("min_position", "max_position", "goal_position")}
DRAWN_PARAMS: dict[str, dict[str, str]] = {
    "CartPole-v1": {"x_threshold": "x_threshold", "length": "length"},
    "Acrobot-v1": {"LINK_LENGTH_1": "link_length_1", "LINK_LENGTH_2": "link_length_2"},
    "Pendulum-v1": {},
    "MountainCar-v0": _MOUNTAIN,
    "MountainCarContinuous-v0": _MOUNTAIN,
}
"""The attributes of gymnasium's environment that its drawing reads, from gymnax's params
(gymnasium's name: gymnax's name): the scale and the lengths drawn follow the params."""

CHANNEL_GAMES = (
    "Asterix-MinAtar",
    "Breakout-MinAtar",
    "Freeway-MinAtar",
    "Seaquest-MinAtar",
    "SpaceInvaders-MinAtar",
    "Pong-misc",
)
"""The tasks drawn from their observation's channels (gymnax's ``vis_minatar``)."""

MINATAR_CELL = 32
"""Pixels of a side of an observation's cell (smaller where the board is over 600 px)."""

FIGURE_SIZE = 400
"""Pixels of a side of the matplotlib drawings (Catch-bsuite, the mazes, PointRobot-misc)."""


def render(env: Any, states: Any, params: Any) -> np.ndarray:
    """The frames of ``T`` stacked states of a gymnax environment (``env``, the adapter:
    gymnax's environment is ``env._env``); see the module docstring for how each task draws.

    Returns:
      uint8 ``[T, H, W, 3]``.

    Raises:
      NoRenderer: gymnax does not draw the task, or pygame is missing (classic control).
    """
    name = env.id.removeprefix("gymnax:")
    if name in CLASSIC_CONTROL:
        return _classic_control(env.id, name, states, params)
    if name in CHANNEL_GAMES:
        return _channels(env._env, states, params)
    if name in ("Catch-bsuite", "MetaMaze-misc", "FourRooms-misc", "PointRobot-misc"):
        return _figure(env._env, name, states, params)
    raise NoRenderer(
        f"{env.id} does not render: gymnax draws no picture of it (it draws classic control, "
        "MinAtar, Pong-misc, Catch-bsuite, MetaMaze-misc, FourRooms-misc and PointRobot-misc)"
    )


def _classic_control(env_id: str, name: str, states: Any, params: Any) -> np.ndarray:
    """gymnasium's drawing of each state: one gymnasium environment, its state set per frame."""
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")  # pygame's greeting on stdout
    try:
        import pygame
    except ImportError:
        raise NoRenderer(
            f"{env_id} draws with gymnasium's classic-control renderer, which needs pygame "
            "(not installed): pip install 'podracer[video]' (or pip install pygame)"
        ) from None
    import gymnasium

    gym_env = gymnasium.make(name, render_mode="rgb_array").unwrapped
    # The surface it draws on, made here: its render would call pygame.init() (the display and
    # the sound, which print errors on a machine without them), and its close pygame.quit().
    side = getattr(gym_env, "screen_dim", None) or getattr(gym_env, "SCREEN_DIM", None)
    size = (side, side) if side else (gym_env.screen_width, gym_env.screen_height)
    gym_env.screen = pygame.Surface(size)
    for gym_name, gymnax_name in DRAWN_PARAMS[name].items():
        setattr(gym_env, gym_name, float(np.asarray(getattr(params, gymnax_name))))
    vectors = np.stack(
        [np.asarray(getattr(states, field), np.float64) for field in CLASSIC_CONTROL[name]],
        axis=-1,
    )  # [T, S]
    last_u = np.asarray(getattr(states, "last_u", np.zeros(len(vectors))), np.float64)
    frames = []
    for t, vector in enumerate(vectors):
        gym_env.state = vector
        if name == "Pendulum-v1":
            gym_env.last_u = float(last_u[t])
        frames.append(np.asarray(gym_env.render(), np.uint8))
    return np.stack(frames)


def _palette(channels: int) -> np.ndarray:
    """gymnax's MinAtar colours (``vis_minatar``): black, then seaborn's ``cubehelix`` of
    ``channels`` colours; uint8 ``[channels + 1, 3]``."""
    import seaborn

    colours = [(0.0, 0.0, 0.0), *seaborn.color_palette("cubehelix", channels)]
    return np.round(np.asarray(colours) * 255).astype(np.uint8)


def _channels(gymnax_env: Any, states: Any, params: Any) -> np.ndarray:
    """Each state's observation ``[H, W, C]``, a cell the colour of its highest channel set."""
    count = len(jax.tree.leaves(states)[0])
    padded = max(16, 1 << (count - 1).bit_length())  # a power of two: few compilations
    states = jax.tree.map(
        lambda x: np.pad(
            np.asarray(x), [(0, padded - count)] + [(0, 0)] * (np.ndim(x) - 1), "edge"
        ),
        states,
    )
    obs = np.asarray(_observe(gymnax_env)(states, params))[:count] > 0  # [T, H, W, C]
    height, width, channels = obs.shape[1:]
    index = np.max(np.where(obs, np.arange(1, channels + 1), 0), axis=-1)  # [T, H, W]
    cell = min(MINATAR_CELL, 600 // max(height, width)) // 2 * 2
    frames = _palette(channels)[index]  # [T, H, W, 3]
    return np.repeat(np.repeat(frames, cell, axis=1), cell, axis=2)


@functools.lru_cache(maxsize=8)
def _observe(gymnax_env: Any) -> Any:
    """gymnax's ``get_obs`` of ``[T]`` stacked states, compiled once per environment."""
    return jax.jit(jax.vmap(lambda state, params: gymnax_env.get_obs(state, params), (0, None)))


def _figure(gymnax_env: Any, name: str, states: Any, params: Any) -> np.ndarray:
    """gymnax's matplotlib drawing of each state, on one figure and an Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    dpi = 100
    figure = Figure(figsize=(FIGURE_SIZE / dpi, FIGURE_SIZE / dpi), dpi=dpi)
    canvas = FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    figure.subplots_adjust(left=0.02, right=0.98, bottom=0.02, top=0.98)
    count = len(jax.tree.leaves(states)[0])
    each = [jax.tree.map(lambda x, t=t: np.asarray(x[t]), states) for t in range(count)]
    if name == "Catch-bsuite":
        from gymnax.visualize import vis_catch

        drawn = vis_catch.init_catch(ax, gymnax_env, each[0], params)
        update = vis_catch.update_catch
    elif name == "PointRobot-misc":
        drawn = _init_circle(ax, each[0], params)
        update = _update_circle
    else:
        from gymnax.visualize import vis_maze

        drawn = vis_maze.init_maze(ax, gymnax_env, each[0], params)
        update = vis_maze.update_maze
    frames = np.empty((count, FIGURE_SIZE, FIGURE_SIZE, 3), np.uint8)
    for t, state in enumerate(each):
        drawn = update(drawn, gymnax_env, state)
        canvas.draw()
        frames[t] = np.asarray(canvas.buffer_rgba())[..., :3]
    return frames


def _init_circle(ax: Any, state: Any, params: Any) -> Any:
    """gymnax's ``vis_circle.init_circle`` (PointRobot-misc: the half circle of goals, the goal
    and the agent) on ``ax``, without its ``pyplot.axis`` call."""
    from matplotlib.patches import Circle

    angles = np.linspace(0, np.pi, 100)
    ax.plot(np.cos(angles), np.sin(angles), color="k")
    ax.set_aspect("equal")
    ax.set_xlim(-1.25, 1.25)
    ax.set_ylim(-0.25, 1.25)
    ax.set_xticks([])
    ax.set_yticks([])
    goal = Circle((state.goal[0], state.goal[1]), radius=float(params.goal_radius), alpha=0.3)
    agent = Circle((state.pos[0], state.pos[1]), radius=0.05, alpha=1, color="red")
    ax.add_artist(goal)
    ax.add_artist(agent)
    return [goal, agent]


def _update_circle(drawn: Any, gymnax_env: Any, state: Any) -> Any:
    """gymnax's ``vis_circle.update_circle``: the goal and the agent moved."""
    del gymnax_env
    goal, agent = drawn
    goal.center = (state.goal[0], state.goal[1])
    agent.center = (state.pos[0], state.pos[1])
    return drawn


__all__ = ["CHANNEL_GAMES", "CLASSIC_CONTROL", "render"]
