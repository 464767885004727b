"""The gymnax family's renderer (podracer.envs.render.gymnax): CartPole's cart and pole
follow the state with numbers, MinAtar's cells have the colours of their observation's
channels, the tasks gymnax does not draw say so in one line."""

import sys

import jax
import numpy as np
import pytest

from podracer import envs
from podracer.envs.render import NoRenderer, renderer, without_auto_reset
from podracer.types import DiscreteActionSpec


def play(env_id, steps, seed=0):
    """``(env, states, params, obs)``: up to ``steps`` random steps of ``env_id`` (kept at its
    end), the reset's state first, and the observation of each state, stacked on a leading
    axis."""
    env, kept = without_auto_reset(envs.make(env_id))
    assert kept
    params = env.default_params
    step = jax.jit(env.step)
    spec = env.action_spec
    rng = np.random.default_rng(seed)
    state, ts = env.reset(jax.random.key(seed), params)
    states, obs = [state], [ts.obs]
    for t in range(steps):
        if isinstance(spec, DiscreteActionSpec):
            action = rng.integers(spec.num_actions)
        else:
            action = rng.uniform(spec.low, spec.high).astype(np.float32)
        state, ts = step(jax.random.key(1000 + t), state, action, params)
        states.append(state)
        obs.append(ts.obs)
        if ts.terminated or ts.truncated:
            break
    stack = lambda *x: np.stack(x)  # noqa: E731
    return env, jax.tree.map(stack, *states), params, jax.tree.map(stack, *obs)


def cartpole_states(env, params, xs, thetas):
    """CartPole states with the cart at ``xs`` and the pole at ``thetas``, stacked."""
    state = env._env.reset(jax.random.key(0), params)[1]
    each = [
        state.replace(x=np.float32(x), theta=np.float32(a)) for x, a in zip(xs, thetas, strict=True)
    ]
    return jax.tree.map(lambda *x: np.stack(x), *each)


CART = (0, 0, 0)  # gymnasium's CartPole colours
POLE = (202, 152, 101)


def test_cartpole_cart_and_pole_follow_the_state():
    pytest.importorskip("pygame")
    env = envs.make("gymnax:CartPole-v1")
    params = env.default_params
    xs = np.array([-2.0, -1.0, 0.0, 0.5, 1.5, 2.0, 0.0, 0.0, 0.0, 0.0])
    thetas = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.4, -0.1, 0.2, 0.6])
    frames = renderer(env, env.id)(cartpole_states(env, params, xs, thetas), params)
    assert frames.shape == (10, 400, 600, 3) and frames.dtype == np.uint8
    scale = 600 / (2 * params.x_threshold)  # gymnasium's pixels per metre
    for frame, x, theta in zip(frames, xs, thetas, strict=True):
        black = np.all(frame == CART, axis=-1)
        cart_rows = black.sum(axis=1) < 100  # not the track, a line across the frame
        columns = np.nonzero(black[cart_rows])[1]
        centre = (columns.min() + columns.max()) / 2
        assert abs(centre - (300 + x * scale)) <= 1.0, (x, centre)
        # The pole's axis (its pixels' principal direction) leans by theta from the vertical,
        # to the right for theta > 0.
        rows, columns = np.nonzero(np.all(frame == POLE, axis=-1))
        points = np.stack([columns, rows], axis=1).astype(float)
        _, _, axes = np.linalg.svd(points - points.mean(axis=0), full_matrices=False)
        dx, dy = axes[0] * np.sign(-axes[0][1])  # pointing up the frame
        assert abs(np.arctan2(dx, -dy) - theta) < 0.02, (theta, np.arctan2(dx, -dy))
        # its middle: half the pole (2 * length, less its width) from the axle
        middle = 300 + x * scale + (params.length * scale - 5) * np.sin(theta)
        assert abs(points[:, 0].mean() - middle) < 3.0, (theta, points[:, 0].mean(), middle)
    one = renderer(env, env.id)(cartpole_states(env, params, xs[2:3], thetas[2:3]), params)
    np.testing.assert_array_equal(one[0], frames[2])  # equal states, equal frames


def test_cartpole_without_pygame_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "pygame", None)  # import pygame raises ImportError
    env = envs.make("gymnax:CartPole-v1")
    params = env.default_params
    with pytest.raises(NoRenderer) as raised:
        renderer(env, env.id)(cartpole_states(env, params, [0.0], [0.0]), params)
    message = str(raised.value)
    assert "\n" not in message and "gymnax:CartPole-v1" in message
    assert "pip install 'podracer[video]'" in message


def test_breakout_cells_have_their_channels_colours():
    import seaborn

    env, states, params, obs = play("gymnax:Breakout-MinAtar", 30)
    frames = renderer(env, env.id)(states, params)
    count = len(states.time)
    assert frames.shape == (count, 320, 320, 3) and frames.dtype == np.uint8
    obs = obs > 0  # [T, 10, 10, 4]: gymnax's get_obs of each state
    palette = np.round(np.asarray(seaborn.color_palette("cubehelix", 4)) * 255)  # gymnax's
    centres = frames[:, 16::32, 16::32]  # [T, 10, 10, 3]: each cell's middle
    blocks = frames.reshape(count, 10, 32, 10, 32, 3)
    assert np.all(blocks == blocks[:, :, :1, :, :1])  # each cell one colour
    highest = 3 - np.argmax(obs[..., ::-1], axis=-1)  # [T, 10, 10]: the last channel set
    expected = np.where(obs.any(axis=-1)[..., None], palette[highest], 0)
    np.testing.assert_array_equal(centres, expected)
    assert (centres == 0).all(axis=-1).mean() > 0.5  # most cells empty: black
    assert obs[:, :, :, 1].any() and obs[:, :, :, 3].any()  # the ball and the bricks drawn


def test_tasks_gymnax_does_not_draw_say_so_in_one_line():
    env = envs.make("gymnax:DeepSea-bsuite")
    with pytest.raises(NoRenderer) as raised:
        renderer(env, env.id)(None, env.default_params)  # refused before a state is read
    message = str(raised.value)
    assert "\n" not in message and message.startswith("gymnax:DeepSea-bsuite does not render")


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, size",
    [
        ("Acrobot-v1", (500, 500)),
        ("MountainCar-v0", (400, 600)),
        ("Pendulum-v1", (500, 500)),
        ("MountainCarContinuous-v0", (400, 600)),
        ("Pong-misc", (420, 560)),
        ("Catch-bsuite", (400, 400)),
        ("MetaMaze-misc", (400, 400)),
        ("FourRooms-misc", (400, 400)),
        ("PointRobot-misc", (400, 400)),
    ],
)
def test_every_task_gymnax_draws_renders(name, size):
    if name in ("Acrobot-v1", "MountainCar-v0", "Pendulum-v1", "MountainCarContinuous-v0"):
        pytest.importorskip("pygame")
    env, states, params, _ = play(f"gymnax:{name}", 12)
    frames = renderer(env, env.id)(states, params)
    count = len(jax.tree.leaves(states)[0])
    assert frames.shape == (count, *size, 3) and frames.dtype == np.uint8
    moved = [(frames[t] != frames[t + 1]).any() for t in range(count - 1)]
    assert any(moved)  # the picture follows the states
    again = renderer(env, env.id)(jax.tree.map(lambda x: x[::-1], states), params)
    np.testing.assert_array_equal(again[::-1], frames)  # equal states, equal frames


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["Asterix-MinAtar", "Freeway-MinAtar", "SpaceInvaders-MinAtar", "Seaquest-MinAtar"]
)
def test_minatar_first_states_have_their_channels_colours(name):
    import seaborn

    # Their first states (compiling their steps takes tens of seconds on a CPU).
    env = envs.make(f"gymnax:{name}")
    params = env.default_params
    firsts = [env.reset(jax.random.key(seed), params) for seed in range(2)]
    states = jax.tree.map(lambda *x: np.stack(x), *(state for state, _ in firsts))
    obs = np.stack([np.asarray(ts.obs) for _, ts in firsts]) > 0  # [2, 10, 10, C]
    frames = renderer(env, env.id)(states, params)
    assert frames.shape == (2, 320, 320, 3) and frames.dtype == np.uint8
    channels = obs.shape[-1]
    palette = np.round(np.asarray(seaborn.color_palette("cubehelix", channels)) * 255)
    highest = channels - 1 - np.argmax(obs[..., ::-1], axis=-1)
    expected = np.where(obs.any(axis=-1)[..., None], palette[highest], 0)
    np.testing.assert_array_equal(frames[:, 16::32, 16::32], expected)
