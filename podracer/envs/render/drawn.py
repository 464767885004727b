"""The renderers of podracer's own environments, drawn here: catch (the board, with NumPy) and
trading (the prices, the portfolio's value and its holdings, with matplotlib).

Each is a family renderer of :mod:`podracer.envs.render`: ``function(env, states, params)`` of
``T`` states stacked on a leading axis, returning uint8 ``[T, H, W, 3]``.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

CATCH_CELL = 32
"""Pixels of a side of a catch cell (a multiple of 16: video encoders' macro blocks)."""

BACKGROUND = (24, 24, 32)
GRID = (64, 64, 80)
BALL = (250, 200, 40)
PADDLE = (60, 140, 240)


def catch(env: Any, states: Any, params: Any) -> np.ndarray:
    """The catch board of each state: ``rows x columns`` cells of :data:`CATCH_CELL` pixels on
    a grid, the paddle a bar on the bottom half of its cell, the ball a square inside its cell
    (drawn over the paddle where they meet). Vectorised over ``T``.

    Returns:
      uint8 ``[T, rows * cell, columns * cell, 3]`` (``cell`` smaller for boards over 600 px).
    """
    del env
    rows, columns = params.rows, params.columns
    cell = min(CATCH_CELL, 600 // max(rows, columns)) // 2 * 2
    ball_row = np.asarray(states.ball_row).reshape(-1)  # [T]
    ball_column = np.asarray(states.ball_column).reshape(-1)
    paddle_column = np.asarray(states.paddle_column).reshape(-1)
    count = len(ball_row)
    height, width = rows * cell, columns * cell
    y_cell, y_in = np.divmod(np.arange(height), cell)  # [H]
    x_cell, x_in = np.divmod(np.arange(width), cell)  # [W]
    board = np.empty((height, width, 3), np.uint8)
    board[:] = BACKGROUND
    board[y_in == 0] = GRID
    board[:, x_in == 0] = GRID
    frames = np.repeat(board[None], count, axis=0)

    margin = max(cell // 8, 1)
    x_inside = (x_in >= margin) & (x_in < cell - margin)  # [W]
    paddle_rows = (y_cell == rows - 1) & (y_in >= cell // 2) & (y_in < cell - margin)  # [H]
    paddle = (
        paddle_rows[None, :, None]
        & (x_cell[None, None, :] == paddle_column[:, None, None])
        & x_inside[None, None, :]
    )  # [T, H, W]
    frames[paddle] = PADDLE
    inset = max(cell // 4, 1)
    ball_y = (y_cell[None, :] == ball_row[:, None]) & (y_in >= inset) & (y_in < cell - inset)
    ball_x = (x_cell[None, :] == ball_column[:, None]) & (x_in >= inset) & (x_in < cell - inset)
    frames[ball_y[:, :, None] & ball_x[:, None, :]] = BALL
    return frames


TRADING_SIZE = (640, 400)
"""Width and height of a trading frame (multiples of 16)."""

VALUE_COLOUR = (214, 39, 40)
"""The portfolio value's line (drawn without antialiasing: its pixels have exactly this
colour)."""


def trading(env: Any, states: Any, params: Any) -> np.ndarray:
    """A chart of each day of a trading episode: above, the close price of each asset over the
    price on the episode's first day (thin lines) and the portfolio's value over the initial
    cash (the thick red line), from the first day of the episode to the state's day, on axes
    that span the whole episode; below, each asset's position as a share of the portfolio's
    value (bars); the date, the day, the value and the cash's share in the title. One
    matplotlib figure (Agg canvas, no display) is drawn once, and each frame redraws only its
    lines, bars and title over it (blitting).

    Returns:
      uint8 ``[T, 400, 640, 3]``.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import LineCollection, PolyCollection
    from matplotlib.figure import Figure

    from podracer.trading.environment import episode_days

    close = np.asarray(env._close, np.float64)  # [days, D]
    day = np.asarray(states.day).reshape(-1)  # [T]
    end = np.asarray(states.end).reshape(-1)
    value = np.asarray(states.value, np.float64).reshape(-1)
    cash = np.asarray(states.cash, np.float64).reshape(-1)
    holdings = np.asarray(states.holdings, np.float64).reshape(len(day), -1)  # [T, D]
    _, _, steps = episode_days(env.data.dates, params, env.id)
    start = end - steps  # [T]: the episode's first day
    assets = close.shape[1]
    dates = np.asarray(env.data.dates).astype(str)
    name = os.path.basename(env.id)  # a CSV's name, not its path

    relative = value / params.initial_cash
    windows = set(zip(start.tolist(), end.tolist(), strict=True))
    prices = [close[s : e + 1] / close[s] for s, e in windows]
    low = min(min(p.min() for p in prices), relative.min())
    high = max(max(p.max() for p in prices), relative.max())
    pad = 0.05 * (high - low) + 1e-6
    positions = holdings * close[day] / np.maximum(value[:, None], 1e-9)  # [T, D]

    width, height = TRADING_SIZE
    dpi = 100
    figure = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)
    canvas = FigureCanvasAgg(figure)
    top, bottom = figure.subplots(2, 1, height_ratios=(3, 1))
    figure.subplots_adjust(left=0.1, right=0.98, top=0.92, bottom=0.06, hspace=0.3)
    top.set_xlim(-0.01 * steps, 1.01 * steps)  # the thick line's ends inside the axes
    top.set_ylim(low - pad, high + pad)
    top.axhline(1.0, color=(0.8, 0.8, 0.8), linewidth=0.8)
    top.set_ylabel("price, value / day 0", fontsize=8)
    price_lines = LineCollection([], linewidths=0.7, alpha=0.6, colors=[(0.25, 0.45, 0.7)])
    top.add_collection(price_lines)
    (value_line,) = top.plot(
        [], [], linewidth=2.5, color=np.asarray(VALUE_COLOUR) / 255, antialiased=False
    )
    title = top.set_title("", fontsize=10)
    bars = PolyCollection([], facecolors=[(0.25, 0.45, 0.7)])
    bottom.add_collection(bars)
    left = np.arange(assets) - 0.4  # [D]: the bars' left edges, 0.8 wide
    bottom.set_xlim(-0.6, assets - 0.4)
    bottom.set_ylim(0, min(1.0, positions.max() * 1.1) + 1e-6)
    bottom.set_ylabel("held / value", fontsize=8)
    bottom.set_xticks([])
    bottom.tick_params(labelsize=8)
    top.tick_params(labelsize=8)
    # Blitting: the axes are drawn once; a frame redraws only what moves over them.
    moving = [price_lines, value_line, title, bars]
    for artist in moving:
        artist.set_animated(True)
    canvas.draw()
    background = canvas.copy_from_bbox(figure.bbox)

    frames = np.empty((len(day), height, width, 3), np.uint8)
    for t in range(len(day)):
        s, d = start[t], day[t]
        x = np.arange(d - s + 1)
        paths = (close[s : d + 1] / close[s]).T  # [D, days so far]
        price_lines.set_segments(np.stack(np.broadcast_arrays(x, paths), axis=-1))
        same = (end[: t + 1] == end[t]) & (day[: t + 1] <= d)
        value_line.set_data(day[: t + 1][same] - s, relative[: t + 1][same])
        top_edge = np.broadcast_to(positions[t][:, None], (assets, 2))
        corners_x = np.stack([left, left, left + 0.8, left + 0.8], axis=-1)  # [D, 4]
        corners_y = np.concatenate([np.zeros((assets, 1)), top_edge, np.zeros((assets, 1))], -1)
        bars.set_verts(np.stack([corners_x, corners_y], axis=-1))
        title.set_text(
            f"{name}  {dates[d]}  day {d - s}/{steps}  value {value[t]:,.0f}  "
            f"cash {cash[t] / max(value[t], 1e-9):.0%}"
        )
        canvas.restore_region(background)
        for artist in moving:
            figure.draw_artist(artist)
        frames[t] = np.asarray(canvas.buffer_rgba())[..., :3]
    return frames


__all__ = ["catch", "trading"]
