"""MuJoCo's renderer of brax and MuJoCo Playground states (podracer.envs.render.mujoco): one
short episode becomes T frames of 240 x 320 that follow the state (a cart's pixel column moves
with its position, equal states give equal frames), and where no OpenGL context can be made the
renderer refuses in one line."""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer import envs
from podracer.envs.render import NoRenderer, renderer, without_auto_reset
from podracer.envs.render import mujoco as mr


def _episode(env_id, steps, seed=0):
    """``(env, stacked states, params)``: ``steps + 1`` states of one episode (random actions,
    no auto-reset)."""
    env, kept = without_auto_reset(envs.make(env_id))
    assert kept
    params = env.default_params
    key = jax.random.key(seed)
    state, _ = env.reset(key, params)
    step = jax.jit(env.step)
    shape = env.action_spec.shape
    states = [state]
    for _ in range(steps):
        key, action_key, step_key = jax.random.split(key, 3)
        action = jax.random.uniform(action_key, shape, minval=-1.0, maxval=1.0)
        state, _ = step(step_key, state, action, params)
        states.append(state)
    return env, jax.tree.map(lambda *x: jnp.stack(x), *states), params


def _column(frames, mask_of):
    """The mean pixel column of each frame's pixels where ``mask_of(frame)``."""
    columns = []
    for frame in frames:
        mask = mask_of(frame.astype(np.int32))
        assert mask.sum() > 50, "the object is not in the frame"
        columns.append(np.nonzero(mask)[1].mean())
    return np.array(columns)


def _check_frames(frames, count):
    assert frames.shape == (count, mr.HEIGHT, mr.WIDTH, 3)
    assert frames.dtype == np.uint8
    assert frames.std() > 5  # a picture, not a blank


def test_no_gl_is_one_line(monkeypatch):
    monkeypatch.setitem(mr._checked, "gl", "FatalError: an OpenGL platform library is missing")
    assert not mr.gl_ready()
    for draw, family in ((mr.brax, "brax"), (mr.playground, "MuJoCo Playground")):
        with pytest.raises(NoRenderer) as error:
            draw(None, None, ())
        message = str(error.value)
        assert "\n" not in message
        assert message.startswith(f"{family} cannot render here")
        assert "MUJOCO_GL=egl" in message and "OSMesa" in message
    with pytest.raises(NoRenderer, match="envpool's MuJoCo task"):
        mr.make_current("envpool's MuJoCo task envpool:HalfCheetah-v4", 8, 8)


def test_gl_checked_once(monkeypatch):
    calls = []
    monkeypatch.setattr(mr, "_probe", lambda: calls.append(1) or "RuntimeError: no display")
    monkeypatch.setattr(mr, "_checked", {})
    assert not mr.gl_ready() and not mr.gl_ready()
    assert calls == [1]
    with pytest.raises(NoRenderer, match="no display"):
        mr.require_gl("brax")


@pytest.mark.skipif(sys.platform != "linux", reason="MUJOCO_GL=egl is Linux's")
def test_prepare_chooses_egl_before_mujoco_is_imported(monkeypatch):
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.delenv("PYOPENGL_PLATFORM", raising=False)
    monkeypatch.delitem(sys.modules, "mujoco", raising=False)
    monkeypatch.delitem(sys.modules, "OpenGL", raising=False)
    mr.prepare()
    assert os.environ["MUJOCO_GL"] == "egl" and os.environ["PYOPENGL_PLATFORM"] == "egl"
    monkeypatch.setenv("MUJOCO_GL", "osmesa")  # a user's choice is kept
    mr.prepare()
    assert os.environ["MUJOCO_GL"] == "osmesa"


@pytest.mark.slow
def test_brax_episode_frames_follow_the_state():
    if not mr.gl_ready():
        pytest.skip(f"no OpenGL context here: {mr._checked['gl']}")
    steps = 12
    env, states, params = _episode("brax:inverted_pendulum?episode_length=50", steps)
    draw = renderer(envs.make("brax:inverted_pendulum"), "brax:inverted_pendulum")
    frames = draw(states, params)
    _check_frames(frames, steps + 1)
    q = np.asarray(states.env_state.pipeline_state.q)
    moved = [not np.allclose(q[t], q[t + 1]) for t in range(steps)]
    differ = [not np.array_equal(frames[t], frames[t + 1]) for t in range(steps)]
    assert differ == moved and any(moved)
    np.testing.assert_array_equal(draw(states, params), frames)  # equal states, equal frames

    # the cart (brown: red above blue) at x = -0.5, 0, 0.5 with the pole upright
    three = jax.tree.map(lambda x: x[:3], states)
    pipeline = three.env_state.pipeline_state
    q = jnp.zeros_like(pipeline.q).at[:, 0].set(jnp.array([-0.5, 0.0, 0.5]))
    three = _with_pipeline(three, pipeline.replace(q=q))
    placed = mr.brax(env, three, params)
    column = _column(placed, lambda f: (f[..., 0] > 40) & (f[..., 0] - f[..., 2] > 15))
    assert abs(column[1] - mr.WIDTH / 2) < 20
    assert np.all(np.abs(np.diff(column)) > 40)
    assert np.all(np.sign(np.diff(column)) == np.sign(column[2] - column[0]))


def _with_pipeline(states, pipeline):
    return states.replace(env_state=states.env_state.replace(pipeline_state=pipeline))


@pytest.mark.slow
def test_brax_spring_backend_draws():
    if not mr.gl_ready():
        pytest.skip(f"no OpenGL context here: {mr._checked['gl']}")
    env = envs.make("brax:inverted_pendulum?backend=spring")
    state, _ = jax.jit(env.reset)(jax.random.key(0), ())
    two = jax.tree.map(lambda x: jnp.stack([x, x]), state)
    pipeline = two.env_state.pipeline_state
    two = _with_pipeline(two, pipeline.replace(q=pipeline.q.at[1, 0].set(0.5)))
    frames = mr.brax(env, two, ())
    _check_frames(frames, 2)
    assert not np.array_equal(frames[0], frames[1])


@pytest.mark.slow
def test_playground_episode_frames_follow_the_state():
    if not mr.gl_ready():
        pytest.skip(f"no OpenGL context here: {mr._checked['gl']}")
    steps = 12
    env, states, params = _episode("playground:CartpoleBalance", steps)
    draw = renderer(envs.make("playground:CartpoleBalance"), "playground:CartpoleBalance")
    frames = draw(states, params)
    _check_frames(frames, steps + 1)
    qpos = np.asarray(states.env_state.data.qpos)
    assert all(not np.allclose(qpos[t], qpos[t + 1]) for t in range(steps))
    assert all(not np.array_equal(frames[t], frames[t + 1]) for t in range(steps))
    np.testing.assert_array_equal(draw(states, params), frames)

    # the cart (orange) at x = -0.5, 0, 0.5 seen from the "fixed" camera: left to right
    data = jax.tree.map(lambda x: x[:3], states.env_state.data)
    data = data.replace(qpos=jnp.zeros_like(data.qpos).at[:, 0].set(jnp.array([-0.5, 0.0, 0.5])))
    three = jax.tree.map(lambda x: x[:3], states)
    three = three.replace(env_state=three.env_state.replace(data=data))
    placed = mr.playground(env, three, params)
    column = _column(placed, lambda f: (f[..., 0] > 150) & (f[..., 0] - f[..., 2] > 60))
    assert abs(column[1] - mr.WIDTH / 2) < 20
    assert np.all(np.diff(column) > 20)
