"""The renderers drawn by podracer (podracer.envs.render.drawn): catch's board and trading's
chart follow the states they draw, pixel by pixel."""

import jax
import numpy as np

from podracer import envs
from podracer.envs.render import drawn, renderer, without_auto_reset


def play(env, actions, seed=0, jit=True):
    """``(states, params)``: the states of an episode of ``env`` (kept at its end), stacked on a
    leading axis: the reset's, then one after each action."""
    env, kept = without_auto_reset(env)
    assert kept
    params = env.default_params
    step = jax.jit(env.step) if jit else env.step
    state, _ = env.reset(jax.random.key(seed), params)
    states = [state]
    for t, action in enumerate(actions):
        state, _ = step(jax.random.key(1000 + t), state, action, params)
        states.append(state)
    return jax.tree.map(lambda *x: np.stack(x), *states), params


def pixels_of(frame, colour):
    """``(rows, columns)`` of the pixels of ``frame`` that have exactly ``colour``."""
    return np.nonzero(np.all(frame == np.asarray(colour, np.uint8), axis=-1))


def test_catch_frames_follow_the_ball_and_the_paddle():
    env = envs.make("catch")
    actions = np.random.default_rng(0).integers(0, 3, size=9)
    states, params = play(env, actions, jit=False)  # catch's few operations: faster eagerly
    frames = renderer(env, "catch")(states, params)
    cell = drawn.CATCH_CELL
    assert frames.shape == (10, 10 * cell, 5 * cell, 3) and frames.dtype == np.uint8
    inset = cell // 4
    for t, frame in enumerate(frames):
        rows, columns = pixels_of(frame, drawn.BALL)
        assert rows.min() == states.ball_row[t] * cell + inset
        assert columns.min() == states.ball_column[t] * cell + inset
        assert rows.max() - rows.min() == columns.max() - columns.min() == cell - 2 * inset - 1
        rows, columns = pixels_of(frame, drawn.PADDLE)
        assert set(rows // cell) == {params.rows - 1}  # the bottom row
        assert set(columns // cell) == {states.paddle_column[t]}
    # The ball falls a row a step; equal states draw equal frames, others differ.
    assert np.array_equal(states.ball_row, np.arange(10))
    again = drawn.catch(env, jax.tree.map(lambda x: x[::-1], states), params)
    np.testing.assert_array_equal(again[::-1], frames)
    assert all((frames[t] != frames[t + 1]).any() for t in range(9))


def test_catch_board_size_follows_the_params():
    env = envs.make("catch", rows=4, columns=7)
    states, params = play(env, [1, 1, 1], jit=False)
    frames = drawn.catch(env, states, params)
    assert frames.shape == (4, 4 * drawn.CATCH_CELL, 7 * drawn.CATCH_CELL, 3)


def test_trading_chart_follows_the_day_and_the_value():
    env = envs.make(
        "trading:synthetic", num_assets=3, days=200, window=24, initial_cash=30_000.0, seed=1
    )
    steps = 24
    actions = np.ones((steps, 3), np.float32)  # buy every day: the value follows the prices
    states, params = play(env, actions)
    frames = renderer(env, env.id)(states, params)
    width, height = drawn.TRADING_SIZE
    assert frames.shape == (steps + 1, height, width, 3) and frames.dtype == np.uint8
    assert all((frames[t] != frames[t + 1]).any() for t in range(steps))
    ends, heights = [], []
    for frame in frames[1:]:  # day 0's value is a point, not yet a line
        rows, columns = pixels_of(frame, drawn.VALUE_COLOUR)
        end = columns.max()
        ends.append(end)
        heights.append(rows[columns == end].mean())
    day = np.asarray(states.day[1:] - states.day[0])
    relative = np.asarray(states.value[1:]) / params.initial_cash
    # The line's end moves right by the same pixels each day and up as the value rises:
    # pixels linear in the day and in the value, within the line's width.
    for x, y in ((day, ends), (relative, heights)):
        fit = np.polyval(np.polyfit(x, y, 1), x)
        assert np.abs(fit - y).max() < 2.0, (x, y)
    assert np.all(np.diff(ends) > 0)
    assert np.polyfit(relative, heights, 1)[0] < 0  # a higher value is higher on the chart
    assert np.ptp(heights) > 20  # the value moved enough pixels for the fit to mean something
    # Drawn a chunk of states at a time, in order (as a video is), the frames are the same.
    parts = [jax.tree.map(lambda x, i=i: x[i : i + 7], states) for i in range(0, steps + 1, 7)]
    chunked = np.concatenate([drawn.trading(env, part, params) for part in parts])
    np.testing.assert_array_equal(chunked, frames)
