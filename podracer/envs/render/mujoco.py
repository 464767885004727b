"""MuJoCo's renderer: the frames of brax and MuJoCo Playground states, and the OpenGL context
that MuJoCo's renderers need (envpool's and gymnasium's MuJoCo tasks draw with one too).

MuJoCo draws with OpenGL. On a machine without a display it needs a headless platform, chosen
by ``MUJOCO_GL`` *before* ``mujoco`` is first imported: ``egl`` (libEGL, from Mesa or the
NVIDIA driver; it works on a CPU machine with Mesa's software rasteriser) or ``osmesa``
(libOSMesa). :func:`prepare` sets ``MUJOCO_GL=egl`` (and ``PYOPENGL_PLATFORM=egl``) where
neither is chosen on Linux and mujoco is not imported yet; where mujoco was imported without a
choice and there is no display, :func:`require_gl` switches its context to EGL. Where no
context can be made, :func:`require_gl` raises :class:`~podracer.envs.render.NoRenderer`, one
line naming the family and the fix.

:func:`brax` and :func:`playground` are the registry's renderers of the ``brax:`` and
``playground:`` families: MuJoCo's ``Renderer`` on the environment's ``mj_model``, each state's
``qpos`` and ``qvel`` put into one ``MjData`` and ``mj_forward`` ed, as brax's
``brax.io.image.render_array`` and Playground's ``env.render`` do (one renderer for all the
frames instead of one ``MjData`` a frame; no progress bar), seen from the model's first camera
(brax's ``track``, the Control Suite's ``fixed`` or ``side``) or the free camera where the
model has none. Frames are ``HEIGHT x WIDTH`` (240 x 320, both libraries' default). Where
the OpenGL context is Mesa's software rasteriser (a CPU machine), shadows and reflections are
left out: they take 5x the time of a frame there (ant: ~70 ms against ~12 ms).
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
import threading
from typing import Any

import numpy as np

HEIGHT = 240
WIDTH = 320

_TINY = "<mujoco><worldbody><geom size='1'/></worldbody></mujoco>"
_FIX = (
    "install EGL (libegl1) or OSMesa (libosmesa6) and set MUJOCO_GL=egl or MUJOCO_GL=osmesa "
    "before mujoco is imported"
)
_checked: dict[str, str | None] = {}  # "gl": None where a context can be made, else why not
_local = threading.local()  # this thread's GL context for envpool's MuJoCo tasks


def prepare() -> None:
    """``MUJOCO_GL=egl`` (and ``PYOPENGL_PLATFORM=egl``) where neither is chosen, on Linux,
    before mujoco is imported: MuJoCo's default there (GLFW) needs a display."""
    if platform.system() != "Linux":
        return
    if "MUJOCO_GL" not in os.environ and "mujoco" not in sys.modules:
        os.environ["MUJOCO_GL"] = "egl"
    if os.environ.get("MUJOCO_GL", "").lower() == "egl" and "OpenGL" not in sys.modules:
        os.environ.setdefault("PYOPENGL_PLATFORM", "egl")


def _use_egl() -> bool:
    """Switches an imported mujoco whose ``MUJOCO_GL`` was not chosen (GLFW) to EGL contexts;
    whether it could (OpenGL not yet imported for another platform)."""
    from mujoco.rendering.classic import gl_context

    chosen = getattr(gl_context, "_MUJOCO_GL", None)
    if platform.system() != "Linux" or chosen != "":
        return False
    if "OpenGL" in sys.modules and os.environ.get("PYOPENGL_PLATFORM", "").lower() != "egl":
        return False
    os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
    try:
        from mujoco.egl import GLContext
    except Exception:  # no libEGL: the probe says why
        return False
    os.environ["MUJOCO_GL"] = "egl"  # gymnasium's MuJoCo renderer reads it when it draws
    gl_context.GLContext = GLContext  # what mujoco.Renderer makes its context with
    return True


def _probe() -> str | None:
    """None where MuJoCo can make a context and draw, else why not (one line)."""
    import mujoco

    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        _use_egl()
    reason = _try_frame(mujoco)
    if reason is not None and _use_egl():  # a display's GLFW failed: EGL instead
        reason = _try_frame(mujoco)
    return reason


def _try_frame(mujoco: Any) -> str | None:
    """None where a tiny model draws, else why not (a GLFW error, a missing library)."""
    try:
        _tiny_frame(mujoco)
    except Exception as error:
        return _line(error)
    return None


def _tiny_frame(mujoco: Any) -> None:
    model = mujoco.MjModel.from_xml_string(_TINY)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    with contextlib.closing(mujoco.Renderer(model, 8, 8)) as renderer:
        renderer.update_scene(data)
        renderer.render()
        _checked["software"] = _software_gl()


def _software_gl() -> bool:
    """Whether the current OpenGL context is Mesa's software rasteriser (a CPU machine)."""
    try:
        from OpenGL import GL

        name = GL.glGetString(GL.GL_RENDERER) or b""
    except Exception:  # unknown: drawn as on a GPU
        return False
    return any(s in name.lower() for s in (b"llvmpipe", b"softpipe", b"swrast"))


def _line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def gl_ready() -> bool:
    """Whether MuJoCo can make an OpenGL context here (checked once, with a tiny
    ``mujoco.Renderer``; :func:`prepare` first)."""
    if "gl" not in _checked:
        prepare()
        try:
            _checked["gl"] = _probe()
        except Exception as error:  # mujoco itself fails to import
            _checked["gl"] = _line(error)
    return _checked["gl"] is None


def require_gl(family: str) -> None:
    """Returns where MuJoCo can draw (:func:`gl_ready`).

    Raises:
      NoRenderer: no OpenGL context can be made, one line naming ``family`` and the fix.
    """
    if gl_ready():
        return
    from podracer.envs.render import NoRenderer

    raise NoRenderer(
        f"{family} cannot render here: MuJoCo cannot make an OpenGL context "
        f"(MUJOCO_GL={os.environ.get('MUJOCO_GL', '')!r}; {_checked['gl']}); {_FIX}"
    )


def make_current(family: str, width: int, height: int) -> None:
    """An OpenGL context of MuJoCo's platform made current in this thread (one per thread,
    kept), for a library that draws with MuJoCo but makes no context itself (envpool's MuJoCo
    tasks, which end the process without one).

    Raises:
      NoRenderer: no context can be made (:func:`require_gl`).
    """
    require_gl(family)
    context = getattr(_local, "context", None)
    if context is None:
        from mujoco.rendering.classic import gl_context

        context = _local.context = gl_context.GLContext(max(width, 1), max(height, 1))
    context.make_current()


def frames(
    mj_model: Any,
    qpos: Any,
    qvel: Any,
    *,
    extra: dict[str, Any] | None = None,
    height: int = HEIGHT,
    width: int = WIDTH,
) -> np.ndarray:
    """uint8 ``[T, height, width, 3]``: ``mj_model`` at each of ``T`` states, ``qpos [T, nq]``
    and ``qvel [T, nv]`` (and ``extra``'s ``MjData`` fields, each ``[T, ...]``), from the
    model's first camera (the free camera where it has none)."""
    import mujoco

    qpos, qvel = np.asarray(qpos), np.asarray(qvel)
    extra = {k: np.asarray(v) for k, v in (extra or {}).items()}
    data = mujoco.MjData(mj_model)
    camera = 0 if mj_model.ncam else -1
    plain = _checked.get("software", False)  # shadows: 5x the time of a frame on a CPU
    out = np.empty((len(qpos), height, width, 3), np.uint8)
    with contextlib.closing(mujoco.Renderer(mj_model, height=height, width=width)) as renderer:
        for t in range(len(qpos)):
            data.qpos, data.qvel = qpos[t], qvel[t]
            for name, values in extra.items():
                getattr(data, name)[...] = values[t]
            mujoco.mj_forward(mj_model, data)
            renderer.update_scene(data, camera=camera)
            if plain:
                for flag in (mujoco.mjtRndFlag.mjRND_SHADOW, mujoco.mjtRndFlag.mjRND_REFLECTION):
                    renderer.scene.flags[flag] = False
            renderer.render(out=out[t])
    return out


def brax(env: Any, states: Any, params: Any) -> np.ndarray:
    """The frames of ``T`` stacked states of a ``brax:`` environment
    (:class:`~podracer.envs.jax.brax.BraxEnvironment`, any backend: each pipeline state has
    ``q`` and ``qd``), 240 x 320."""
    del params
    require_gl("brax")
    pipeline = states.env_state.pipeline_state
    return frames(env.unwrapped.sys.mj_model, pipeline.q, pipeline.qd)


def playground(env: Any, states: Any, params: Any) -> np.ndarray:
    """The frames of ``T`` stacked states of a ``playground:`` environment
    (:class:`~podracer.envs.jax.playground.PlaygroundEnvironment`): what its ``env.render``
    draws (``qpos``, ``qvel``, the mocap bodies and the applied forces of each state's MJX
    ``data``), 240 x 320."""
    del params
    require_gl("MuJoCo Playground")
    data = states.env_state.data
    extra = {
        name: getattr(data, name)
        for name in ("mocap_pos", "mocap_quat", "xfrc_applied")
        if np.size(getattr(data, name, ()))
    }
    return frames(env.unwrapped.mj_model, data.qpos, data.qvel, extra=extra)


__all__ = ["HEIGHT", "WIDTH", "brax", "frames", "gl_ready", "make_current", "playground"]
__all__ += ["prepare", "require_gl"]
