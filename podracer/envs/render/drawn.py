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

_VALUES: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray]] = {}
"""The value line of the episode drawn last on each window, ``(id(env), first day, end)``:
``(days, values)`` up to the last state drawn, so a video drawn a chunk of states at a time
continues its line where the chunk before it stopped."""


def trading(env: Any, states: Any, params: Any) -> np.ndarray:
    """A chart of each day of a trading episode: above, the close price of each asset over the
    price on the episode's first day (thin lines) and the portfolio's value over the initial
    cash (the thick red line), from the first day of the episode to the state's day; below,
    each asset's position as a share of the portfolio's value (bars); the date, the day, the
    value and the cash's share in the title.

    A frame depends on its state and on the values of the episode's states before it (the
    line): those of this call, and of the call before it where that call drew the day before
    this call's first (:data:`_VALUES`; a video drawn in chunks, in order, is the video drawn
    at once). The axes are the episode's: its days, and its assets' prices over them. One
    matplotlib figure (Agg canvas, no display) is drawn once, and each frame redraws only its
    lines, bars and title over it (blitting).

    Returns:
      uint8 ``[T, 400, 640, 3]``.
    """
    from podracer.trading.environment import episode_days

    close = np.asarray(env._close, np.float64)  # [days, D]
    day = np.asarray(states.day).reshape(-1)  # [T]
    end = np.asarray(states.end).reshape(-1)
    value = np.asarray(states.value, np.float64).reshape(-1)
    cash = np.asarray(states.cash, np.float64).reshape(-1)
    holdings = np.asarray(states.holdings, np.float64).reshape(len(day), -1)  # [T, D]
    _, _, steps = episode_days(env.data.dates, params, env.id)
    start = end - steps  # [T]: the episode's first day
    relative = value / params.initial_cash
    positions = holdings * close[day] / np.maximum(value[:, None], 1e-9)  # [T, D]
    dates = np.asarray(env.data.dates).astype(str)
    name = os.path.basename(env.id)  # a CSV's name, not its path

    chart = _TradingChart(close.shape[1], steps)
    frames = np.empty((len(day), *chart.shape), np.uint8)
    lines: dict[tuple[int, int, int], tuple[list, list]] = {}
    for t in range(len(day)):
        s, d, key = start[t], day[t], (id(env), int(start[t]), int(end[t]))
        days, values = lines.get(key) or ([], [])
        if not days:  # this call's first state of the episode: the line drawn before it
            before = _VALUES.get(key)
            if before is not None and before[0][-1] == d - 1:
                days, values = list(before[0]), list(before[1])
        if days and days[-1] >= d:  # another episode on the same days
            days, values = [], []
        days.append(d)
        values.append(relative[t])
        lines[key] = days, values
        title = (
            f"{name}  {dates[d]}  day {d - s}/{steps}  value {value[t]:,.0f}  "
            f"cash {cash[t] / max(value[t], 1e-9):.0%}"
        )
        prices = close[s : end[t] + 1] / close[s]  # [steps + 1, D]
        frames[t] = chart.draw(prices, d - s, np.asarray(days) - s, values, positions[t], title)
    for key, (days, values) in lines.items():
        _VALUES.pop(key, None)
        _VALUES[key] = np.asarray(days), np.asarray(values)
        while len(_VALUES) > 16:
            _VALUES.pop(next(iter(_VALUES)))
    return frames


class _TradingChart:
    """The figure of :func:`trading`, its axes drawn once (``assets`` assets, episodes of
    ``steps`` days); :meth:`draw` draws a frame over them."""

    def __init__(self, assets: int, steps: int):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.collections import LineCollection, PolyCollection
        from matplotlib.figure import Figure

        width, height = TRADING_SIZE
        self.shape = (height, width, 3)
        self.steps = steps
        dpi = 100
        self.figure = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)
        self.canvas = FigureCanvasAgg(self.figure)
        self.top, bottom = self.figure.subplots(2, 1, height_ratios=(3, 1))
        self.figure.subplots_adjust(left=0.1, right=0.98, top=0.92, bottom=0.06, hspace=0.3)
        self.top.set_xlim(-0.01 * steps, 1.01 * steps)  # the thick line's ends inside the axes
        self.top.axhline(1.0, color=(0.8, 0.8, 0.8), linewidth=0.8)
        self.top.set_ylabel("price, value / day 0", fontsize=8)
        blue = (0.25, 0.45, 0.7)
        self.prices = LineCollection([], linewidths=0.7, alpha=0.6, colors=[blue])
        self.top.add_collection(self.prices)
        colour = np.asarray(VALUE_COLOUR) / 255
        (self.value,) = self.top.plot([], [], linewidth=2.5, color=colour, antialiased=False)
        self.title = self.top.set_title("", fontsize=10)
        self.bars = PolyCollection([], facecolors=[blue])
        bottom.add_collection(self.bars)
        self.left = np.arange(assets) - 0.4  # [D]: the bars' left edges, 0.8 wide
        bottom.set_xlim(-0.6, assets - 0.4)
        bottom.set_ylim(0, min(1.0, max(0.25, 4 / assets)))  # 4x an even share
        bottom.set_ylabel("held / value", fontsize=8)
        bottom.set_xticks([])
        bottom.tick_params(labelsize=8)
        self.top.tick_params(labelsize=8)
        self.moving = [self.prices, self.value, self.title, self.bars]
        for artist in self.moving:
            artist.set_animated(True)
        self.limits = None  # the price axis's, set by the first episode drawn
        self.background = None

    def draw(self, prices, today, days, values, positions, title) -> np.ndarray:
        """uint8 ``[H, W, 3]``: the episode's ``prices [steps + 1, D]`` up to day ``today``,
        the value line ``values`` at ``days``, the bars' ``positions [D]`` and the title."""
        low, high = min(prices.min(), 1.0), max(prices.max(), 1.0)
        limits = (low - 0.1 * (high - low) - 1e-3, high + 0.1 * (high - low) + 1e-3)
        if limits != self.limits:  # the axes of the episode: drawn once each
            self.limits = limits
            self.top.set_ylim(*limits)
            self.canvas.draw()
            self.background = self.canvas.copy_from_bbox(self.figure.bbox)
        x = np.arange(today + 1)
        self.prices.set_segments(np.stack(np.broadcast_arrays(x, prices[: today + 1].T), -1))
        self.value.set_data(days, values)
        top = np.broadcast_to(positions[:, None], (len(positions), 2))
        zeros = np.zeros((len(positions), 1))
        corners_x = np.stack([self.left, self.left, self.left + 0.8, self.left + 0.8], -1)
        corners_y = np.concatenate([zeros, top, zeros], axis=-1)  # [D, 4]
        self.bars.set_verts(np.stack([corners_x, corners_y], axis=-1))
        self.title.set_text(title)
        self.canvas.restore_region(self.background)
        for artist in self.moving:
            self.figure.draw_artist(artist)
        return np.asarray(self.canvas.buffer_rgba())[..., :3]


__all__ = ["catch", "trading"]
