"""The renderers of the JAX suites (:mod:`podracer.envs.registry`'s ``render`` of their rows):
each ``function(env, states, params) -> uint8 [T, H, W, 3]`` draws ``T`` stacked states of the
family's adapter ``env`` with the library's own renderer, at one size per environment (even
sides, at most 600 px):

- :func:`craftax`: ``render_craftax_pixels`` of ``craftax.craftax_classic.renderer`` or
  ``craftax.craftax.renderer`` (the player's view and the inventory), ``jit`` and ``vmap`` over
  ``T``: Classic at its human block size (64 px: 576 x 576), Craftax at 16 px blocks doubled
  (416 x 352).
- :func:`jumanji`: the game's matplotlib viewer (``env.render(state)``), drawn on a figure of its
  own (Agg, no window) of the viewer's size at 500 px on its longer side.
- :func:`navix`: ``navix.observations.rgb`` (the whole grid, 8 px tiles), ``jit`` and ``vmap``,
  tiles repeated to about 512 px.
- :func:`xminigrid`: ``xminigrid.rendering.rgb_render.render`` (the whole grid, the agent's view
  highlighted), what ``env.render(params, timestep)`` draws, with tiles of up to 64 px.
- :func:`popgym_arcade`: the game's own image (``get_obs``: what it draws as observations, at its
  ``obs_size``), of the whole state (``partial_obs`` off, CartPole's observation noise off),
  ``jit`` and ``vmap``, pixels repeated to 512 px.
- :func:`pgx`: the game's SVG (``state.to_svg()``) rasterised by cairosvg (2048 at twice its
  size: 500 px; MinAtar 374 px).

A missing library (matplotlib, cairosvg, or libcairo) raises
:class:`~podracer.envs.render.NoRenderer` in one line naming ``pip install 'podracer[video]'``.
The states' leaves may be jax or numpy arrays (a PRNG key leaf stays a jax array).
"""

from __future__ import annotations

import copy
import functools
import inspect
import io
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from podracer.envs.render import NoRenderer

CHUNK = 64
"""The most states drawn by one call of a jitted renderer: ``T`` states are drawn in chunks of
``min(CHUNK, 2 ** ceil(log2(T)))``, the last padded (a few compiled programs per environment,
whatever the episodes' lengths, and bounded memory)."""


def _count(states: Any) -> int:
    return int(jax.tree.leaves(states)[0].shape[0])


def _is_key(x: Any) -> bool:
    return jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key)


def _host(states: Any) -> Any:
    """The states as numpy arrays (a PRNG key leaf stays a jax array)."""
    return jax.tree.map(lambda x: x if _is_key(x) else np.asarray(x), states)


def _at(states: Any, t: int) -> Any:
    """State ``t`` of ``T`` stacked states."""
    return jax.tree.map(lambda x: x[t], states)


def _chunked(draw: Callable[[Any], jax.Array], states: Any) -> np.ndarray:
    """``draw`` (a jitted renderer of stacked states) over the states, a chunk at a time
    (:data:`CHUNK`; the last chunk padded with the last state, the padding's frames dropped)."""
    count = _count(states)
    size = min(CHUNK, 1 << (count - 1).bit_length())
    frames = []
    for start in range(0, count, size):
        index = np.minimum(np.arange(start, start + size), count - 1)
        chunk = jax.tree.map(lambda x, i=index: x[i], states)
        frames.append(np.asarray(draw(chunk))[: count - start])
    return np.concatenate(frames)


def _even(frames: np.ndarray) -> np.ndarray:
    """``frames [..., H, W, C]`` cropped to even sides."""
    height, width = frames.shape[-3:-1]
    return frames[..., : height - height % 2, : width - width % 2, :]


def _enlarge(image: jax.Array, factor: int) -> jax.Array:
    """``image [H, W, 3]`` with each pixel repeated ``factor`` times along both sides."""
    if factor == 1:
        return image
    return jnp.repeat(jnp.repeat(image, factor, axis=0), factor, axis=1)


def _u8(image: jax.Array) -> jax.Array:
    return jnp.clip(jnp.round(image), 0, 255).astype(jnp.uint8)


# Craftax -----------------------------------------------------------------------------------


@functools.cache
def _craftax_draw(classic: bool) -> Callable[[Any], jax.Array]:
    if classic:
        from craftax.craftax_classic import constants, renderer

        block, factor = constants.BLOCK_PIXEL_SIZE_HUMAN, 1  # 9 x 9 blocks of 64 px: 576 px
    else:
        from craftax.craftax import constants, renderer

        block, factor = constants.BLOCK_PIXEL_SIZE_IMG, 2  # 11 x 13 blocks of 16 px, doubled
    render = renderer.make_craftax_pixel_renderer(block)
    return jax.jit(jax.vmap(lambda state: _enlarge(_u8(render(state)), factor)))


def craftax(env: Any, states: Any, params: Any) -> np.ndarray:
    """Craftax's pixels of each state (the player's view above the inventory and status):
    Classic u8 ``[T, 576, 576, 3]``, Craftax u8 ``[T, 416, 352, 3]``."""
    del params
    classic = type(env.unwrapped).__module__.startswith("craftax.craftax_classic")
    return _chunked(_craftax_draw(classic), states)


# Jumanji -----------------------------------------------------------------------------------

JUMANJI_SIDE = 500
"""The longer side of a Jumanji frame, in pixels (the viewer's figure at this many pixels)."""


def _matplotlib(env_id: str) -> Any:
    try:
        import matplotlib  # noqa: F401
        from matplotlib.backends.backend_agg import FigureCanvasAgg
    except ImportError as error:
        raise NoRenderer(
            f"{env_id} draws with matplotlib, which is not installed ({error}): "
            "pip install 'podracer[video]'"
        ) from None
    return FigureCanvasAgg


def _jumanji_drawer(env: Any) -> Callable[[Any], np.ndarray]:
    """One state's frame: the Jumanji environment's ``render`` with a copy of its viewer that
    draws on a figure of its own (not pyplot's, no window) and returns the figure's pixels."""
    canvas_class = _matplotlib(env.id)
    from jumanji.viewer import MatplotlibViewer
    from matplotlib.figure import Figure
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    library_env = env.unwrapped
    game = getattr(library_env, "unwrapped", library_env)
    attribute = next(
        (
            name
            for name in ("_viewer", "_env_viewer")
            if isinstance(getattr(game, name, None), MatplotlibViewer)
        ),
        None,
    )
    if attribute is None:
        raise NoRenderer(f"{env.id} does not render: its Jumanji environment has no viewer")
    viewer = copy.copy(getattr(game, attribute))
    size = tuple(float(side) for side in viewer.figure_size)
    figure = Figure(figsize=size, dpi=JUMANJI_SIDE / max(size))
    canvas_class(figure)
    # The layout of the viewer's own figure (MatplotlibViewer._get_fig_ax).
    pad = 0.05
    figure.set_layout_engine(ConstrainedLayoutEngine(h_pad=pad * size[0], w_pad=pad * size[1]))
    axes = figure.add_subplot(111)

    drawn: list[np.ndarray] = []

    def pixels(fig: Any) -> np.ndarray:
        fig.canvas.draw()
        drawn.append(np.array(fig.canvas.buffer_rgba())[..., :3])
        return drawn[-1]

    viewer._get_fig_ax = lambda *args, **kwargs: (figure, axes)
    viewer._display = pixels
    viewer._clear_display = lambda: None
    drawer = copy.copy(game)
    setattr(drawer, attribute, viewer)

    def draw(state: Any) -> np.ndarray:
        drawer.render(state)  # Snake's returns None: the frame is the viewer's display's
        return drawn.pop()

    return draw


def jumanji(env: Any, states: Any, params: Any) -> np.ndarray:
    """The game's viewer's picture of each state, u8 ``[T, H, W, 3]`` (500 x 500 for the square
    viewers: Snake, Game2048, Maze, PacMan, TSP, CVRP, Knapsack, ...)."""
    del params
    draw = _jumanji_drawer(env)
    count = _count(states)
    host = _host(states)  # numpy: the viewers index the state cell by cell, fast on numpy
    try:
        first = draw(_at(host, 0))
    except (AttributeError, TypeError):  # Maze's and PacMan's viewers call jax's .at
        host = jax.device_put(states)
        first = draw(_at(host, 0))
    return _even(np.stack([first, *(draw(_at(host, t)) for t in range(1, count))]))


# NAVIX -------------------------------------------------------------------------------------

GRID_SIDE = 512
"""About the longer side of a NAVIX or POPGym Arcade frame: the image's pixels repeated the
largest whole number of times that stays within it."""


@functools.cache
def _navix_draw(factor: int) -> Callable[[Any], jax.Array]:
    from navix.observations import rgb

    return jax.jit(jax.vmap(lambda timestep: _enlarge(rgb(timestep.state), factor)))


def navix(env: Any, states: Any, params: Any) -> np.ndarray:
    """NAVIX's RGB picture of the whole grid of each state (``navix.observations.rgb``, 8 px
    tiles), its pixels repeated: u8 ``[T, H * 8 * k, W * 8 * k, 3]`` with ``k`` the largest
    whole number that keeps the longer side within 512 px (at least 1)."""
    del env, params
    from navix.rendering.registry import TILE_SIZE

    side = max(jnp.shape(states.state.grid)[1:3]) * TILE_SIZE
    return _even(_chunked(_navix_draw(max(1, GRID_SIDE // side)), states))


# XLand-MiniGrid ----------------------------------------------------------------------------

XMINIGRID_SIDE = 576
"""The most pixels along an xminigrid frame's longer side (its tiles' even side, at most 64 px,
is the largest that fits)."""


def xminigrid(env: Any, states: Any, params: Any) -> np.ndarray:
    """xminigrid's picture of the whole grid of each state (``xminigrid.rendering.rgb_render``,
    what ``env.render(params, timestep)`` draws: the agent's view highlighted), with square tiles
    of ``min(64, 576 // side)`` px (even): u8 ``[T, H * tile, W * tile, 3]``."""
    del env
    from xminigrid.rendering.rgb_render import render

    grids = np.asarray(states.state.grid)
    agents = _host(states.state.agent)
    tile = max(2, min(64, XMINIGRID_SIDE // max(grids.shape[1:3])) // 2 * 2)
    view_size = int(params.view_size)
    return np.stack(
        [
            render(grids[t], _at(agents, t), view_size=view_size, tile_size=tile)
            for t in range(len(grids))
        ]
    ).astype(np.uint8)


# POPGym Arcade -----------------------------------------------------------------------------


@functools.cache
def _popgym_arcade_draw(game: Any, factor: int) -> Callable[[Any, Any], jax.Array]:
    """The jitted renderer of ``game`` (a POPGym Arcade environment): its ``get_obs`` with
    ``partial_obs`` off and no observation noise (``n_sigma``, the noisy CartPoles)."""
    whole = copy.copy(game)
    whole.partial_obs = False
    if hasattr(whole, "n_sigma"):
        whole.n_sigma = 0.0
    accepted = inspect.signature(whole.get_obs).parameters
    key = jax.random.key(0)  # CartPole's get_obs draws its noise, of scale 0 here, from a key

    def one(state, params):
        extra = {"params": params, "key": key}
        image = whole.get_obs(state, **{k: v for k, v in extra.items() if k in accepted})
        return _enlarge(jnp.asarray(image, jnp.uint8), factor)

    return jax.jit(jax.vmap(one, in_axes=(0, None)))


def popgym_arcade(env: Any, states: Any, params: Any) -> np.ndarray:
    """The game's own picture of each whole state (its observation image with ``partial_obs``
    off, at its ``obs_size``), pixels repeated to 512 px: u8 ``[T, 512, 512, 3]``."""
    game = env.unwrapped
    draw = _popgym_arcade_draw(game, max(1, GRID_SIDE // int(game.obs_size)))
    return _chunked(lambda chunk: draw(chunk, params), states)


# pgx ---------------------------------------------------------------------------------------

PGX_SIDE = 500
"""The longest side a pgx board is enlarged to, by a whole factor (2048's 250 px board twice)."""


def _cairosvg(env_id: str) -> Any:
    _matplotlib(env_id)  # MinAtar's to_svg draws with pyplot (and exits without matplotlib)
    try:
        import cairosvg
        import PIL.Image  # noqa: F401
    except (ImportError, OSError) as error:  # OSError: cairocffi finds no libcairo
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise NoRenderer(
            f"{env_id} draws SVG, which needs cairosvg and the system's libcairo ({message}): "
            "pip install 'podracer[video]' (and libcairo2, e.g. apt-get install libcairo2)"
        ) from None
    return cairosvg


def pgx(env: Any, states: Any, params: Any) -> np.ndarray:
    """The game's SVG of each state (``state.to_svg()``: pgx's board, MinAtar's frame)
    rasterised by cairosvg: u8 ``[T, 500, 500, 3]`` for 2048, ``[T, 374, 374, 3]`` for
    MinAtar."""
    del params
    cairosvg = _cairosvg(env.id)
    from PIL import Image  # cairosvg's dependency

    states = _host(states)
    frames, scale = [], None
    for t in range(_count(states)):
        svg = _at(states, t).to_svg()
        # MinAtar's frame is a 10 x 10 image that says image-rendering: pixelated, which cairosvg
        # does not know (it smooths the image); optimizeSpeed is its nearest-neighbour filter.
        svg = svg.replace("image-rendering:pixelated", "image-rendering:optimizeSpeed").encode()
        if scale is None:
            size = Image.open(io.BytesIO(cairosvg.svg2png(bytestring=svg))).size
            scale = max(1, PGX_SIDE // max(size))
        png = cairosvg.svg2png(bytestring=svg, scale=scale, background_color="white")
        frames.append(np.asarray(Image.open(io.BytesIO(png)).convert("RGB")))
    return _even(np.stack(frames))


__all__ = ["craftax", "jumanji", "navix", "pgx", "popgym_arcade", "xminigrid"]
