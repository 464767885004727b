"""Host environments draw themselves (envpool, gymnasium made with ``render=True``):
``render()`` is uint8 ``[num_envs, H, W, 3]`` of each environment's current state, Atari's the
full 210 x 160 screen, and after a step that ended an episode the ended episode's last state
(CartPole's pole drawn at ``final_obs``'s angle); without ``render=True`` nothing changes and
``render()`` refuses in one line."""

import numpy as np
import pytest

from podracer.envs import host
from podracer.envs.render import NoRenderer
from podracer.envs.render import mujoco as mr
from podracer.errors import ConfigError
from podracer.types import DiscreteActionSpec

SIZES = {
    "envpool:CartPole-v1": (400, 600),
    "envpool:Pong-v5": (210, 160),
    "envpool:HalfCheetah-v4": (480, 480),
    "gymnasium:CartPole-v1": (400, 600),
    "gymnasium:HalfCheetah-v5": (480, 480),
}
MUJOCO = ("envpool:HalfCheetah-v4", "gymnasium:HalfCheetah-v5")
CARTPOLES = ("envpool:CartPole-v1", "gymnasium:CartPole-v1")


def _actions(spec, n, rng):
    if isinstance(spec, DiscreteActionSpec):
        return rng.integers(0, spec.num_actions, n)
    return rng.uniform(-1.0, 1.0, (n, *spec.shape)).astype(np.float32)


def _pole_width(frame):
    """The horizontal extent in pixels of CartPole's pole (its colour, (202, 152, 101))."""
    mask = (np.abs(frame.astype(np.int32) - [202, 152, 101]) < 20).all(axis=-1)
    columns = np.flatnonzero(mask.any(axis=0))
    assert columns.size, "no pole in the frame"
    return columns.max() - columns.min() + 1


@pytest.mark.parametrize(
    "env_id", [pytest.param(i, marks=pytest.mark.slow) if i in MUJOCO else i for i in SIZES]
)
def test_render_shapes_and_frames_change(env_id):
    if env_id in MUJOCO and not mr.gl_ready():
        pytest.skip(f"no OpenGL context here: {mr._checked['gl']}")
    env = host.make(env_id, num_envs=2, render=True)
    try:
        env.reset()
        first = env.render()
        assert first.shape == (2, *SIZES[env_id], 3) and first.dtype == np.uint8
        assert first.std() > 5
        rng = np.random.default_rng(0)
        for _ in range(8):
            env.step(_actions(env.action_spec, 2, rng))
        later = env.render()
        assert later.shape == first.shape and later.dtype == np.uint8
        for i in range(2):
            assert not np.array_equal(first[i], later[i])
        np.testing.assert_array_equal(env.render(), later)  # the same state, the same frame
    finally:
        env.close()


def test_atari_renders_the_full_screen_not_the_observation():
    env = host.make("envpool:Pong-v5", num_envs=1, render=True)
    try:
        ts = env.reset()
        assert ts.obs.shape == (1, 4, 84, 84)
        assert env.render().shape == (1, 210, 160, 3)
    finally:
        env.close()


@pytest.mark.parametrize("env_id", CARTPOLES)
def test_a_step_that_ends_an_episode_renders_its_last_state(env_id):
    env = host.make(env_id, num_envs=1, render=True)
    try:
        env.reset()
        assert _pole_width(env.render()[0]) < 20  # upright
        for _ in range(50):
            ts = env.step(np.zeros(1, np.int64))  # push left: the pole falls right
            if ts.terminated[0]:
                break
        assert ts.terminated[0]
        angle = ts.final_obs[0, 2]
        assert abs(angle) > 0.2 and abs(ts.obs[0, 2]) < 0.06  # ended, and reset already
        # the ended state: the pole (125 x 10 pixels) at final_obs's angle, not the new episode's
        width = _pole_width(env.render()[0])
        assert abs(width - (125 * np.sin(abs(angle)) + 10 * np.cos(angle))) < 5
        env.step(np.zeros(1, np.int64))
        assert _pole_width(env.render()[0]) < 20  # the next episode's second state
    finally:
        env.close()


@pytest.mark.parametrize("env_id", CARTPOLES)
def test_render_changes_no_timestep(env_id):
    runs = []
    for render in (False, True):
        env = host.make(env_id, num_envs=3, seed=3, render=render)
        try:
            out = [env.reset()]
            for t in range(40):
                out.append(env.step(np.full(3, t % 3 == 0, np.int64)))
        finally:
            env.close()
        runs.append(out)
    assert any(ts.terminated.any() for ts in runs[0])
    for plain, drawn in zip(*runs, strict=True):
        for a, b in zip(plain, drawn, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("env_id", CARTPOLES)
def test_render_without_render_true_is_one_line(env_id):
    env = host.make(env_id, num_envs=1)
    try:
        env.reset()
        with pytest.raises(NoRenderer, match="made without render=True") as error:
            env.render()
        assert "\n" not in str(error.value)
    finally:
        env.close()
    with pytest.raises(ConfigError, match="render='yes' is not allowed"):
        host.make(env_id, num_envs=1, render="yes")


def test_envpool_async_render_is_refused():
    with pytest.raises(NoRenderer, match="render=True is for sync mode"):
        host.make("envpool:CartPole-v1", num_envs=4, batch_size=2, render=True)


@pytest.mark.parametrize("env_id", MUJOCO)
def test_mujoco_without_gl_is_refused_in_one_line(env_id, monkeypatch):
    monkeypatch.setitem(mr._checked, "gl", "FatalError: an OpenGL platform library is missing")
    with pytest.raises(NoRenderer) as error:
        host.make(env_id, num_envs=1, render=True)
    message = str(error.value)
    assert "\n" not in message and env_id in message and "MUJOCO_GL=egl" in message


def test_gymnasium_that_cannot_draw_is_one_line(monkeypatch):
    import gymnasium

    env = host.make("gymnasium:CartPole-v1", num_envs=1, render=True)
    try:
        env.reset()

        def missing():
            raise gymnasium.error.DependencyNotInstalled("pygame is not installed\nmore")

        monkeypatch.setattr(env._vec.envs[0], "render", missing)
        with pytest.raises(NoRenderer, match=r"cannot draw it \(pygame is not installed\)$"):
            env.render()
    finally:
        env.close()
