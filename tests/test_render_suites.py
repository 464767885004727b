"""The JAX suites' renderers (podracer.envs.render.suites): a short episode of random legal
actions of each family, drawn by its row's renderer (podracer.envs.render.renderer): one frame
a state, u8, of the family's fixed size, and frames that follow the state: frames of different
states differ, a state drawn again (alone, or among others) gives the same frame, and where it
is easy a position: NAVIX's and XLand-MiniGrid's agent (red) is drawn in the cell the state
puts it in; POPGym Arcade's frame is the game's own observation image, enlarged. A missing
library is one line naming the video extra."""

import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer import envs
from podracer.envs.render import renderer, without_auto_reset
from podracer.types import ACTION_MASK

STEPS = 6
# XLA's cheaper CPU passes: the episode's programs compile in half the time.
FAST = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def stack(*leaves):
    """Stacked leaves: numpy, but a PRNG key leaf (which numpy cannot hold) as a jax array."""
    if jax.dtypes.issubdtype(getattr(leaves[0], "dtype", None), jax.dtypes.prng_key):
        return jnp.stack(leaves)
    return np.stack([np.asarray(leaf) for leaf in leaves])


def episode(env_id, steps=STEPS, seed=0, **kwargs):
    """``(env, states, params, observations)``: ``steps + 1`` stacked states of random legal
    actions (the reset's first), the episode kept where it ends, and their observations."""
    env, kept = without_auto_reset(envs.make(env_id, **kwargs))
    assert kept
    params = env.default_params
    key = jax.random.key(seed)
    state, ts = jax.jit(env.reset, compiler_options=FAST)(key, params)
    step = jax.jit(env.step, compiler_options=FAST)
    states, observations = [state], [ts.obs]
    for index in range(steps):
        action_key, step_key = jax.random.split(jax.random.fold_in(key, index))
        mask = ts.obs.get(ACTION_MASK) if isinstance(ts.obs, dict) else None
        if mask is None:
            mask = jnp.ones(env.action_spec.num_actions, bool)
        action = jax.random.choice(action_key, len(mask), p=mask / mask.sum())
        state, ts = step(step_key, state, action, params)
        states.append(state)
        observations.append(ts.obs)
    return env, jax.tree.map(stack, *states), params, jax.tree.map(stack, *observations)


def draw(env_id, env, states, params):
    return renderer(env, env_id)(states, params)


def plain(x):
    """A leaf as numpy (a PRNG key's data)."""
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(x))
    return np.asarray(x)


def equal_states(states, a, b):
    return all(np.array_equal(plain(x[a]), plain(x[b])) for x in jax.tree.leaves(states))


def check(env_id, shape, steps=STEPS, **kwargs):
    """An episode drawn: ``steps + 1`` frames u8 ``shape``, that differ from state to state
    (equal where the states are equal), and a state drawn again alone gives its frame. Returns
    ``(states, observations, frames)``."""
    env, states, params, observations = episode(env_id, steps, **kwargs)
    frames = draw(env_id, env, states, params)
    count = steps + 1
    assert frames.shape == (count, *shape) and frames.dtype == np.uint8
    assert frames.shape[1] % 2 == 0 and frames.shape[2] % 2 == 0 and max(shape[:2]) <= 600
    assert frames.std() > 0
    distinct = 0
    for t in range(1, count):
        same_state = equal_states(states, t - 1, t)
        same_frame = np.array_equal(frames[t - 1], frames[t])
        assert same_state <= same_frame  # an equal state, an equal frame
        distinct += not same_frame
    assert distinct >= 1
    last = jax.tree.map(lambda x: x[-1:], states)
    np.testing.assert_array_equal(draw(env_id, env, last, params)[0], frames[-1])
    return states, observations, frames


def cell_of_red(frame, rows, cols):
    """The ``(row, col)`` of the grid cell with the most red pixels (an agent)."""
    cell_h, cell_w = frame.shape[0] // rows, frame.shape[1] // cols
    r, g, b = (frame[..., c].astype(int) for c in range(3))
    red = (r > 150) & (g < 80) & (b < 80)
    counts = red[: rows * cell_h, : cols * cell_w].reshape(rows, cell_h, cols, cell_w).sum((1, 3))
    assert counts.max() > 0
    return np.unravel_index(np.argmax(counts), counts.shape)


@pytest.mark.slow
def test_craftax_classic():
    pytest.importorskip("craftax")
    check("craftax:Craftax-Classic-Symbolic-v1", (576, 576, 3))


@pytest.mark.slow
def test_craftax():
    pytest.importorskip("craftax")
    check("craftax:Craftax-Symbolic-v1", (416, 352, 3), steps=3)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["Snake-v1", "Game2048-v1"])
def test_jumanji(name):
    pytest.importorskip("jumanji")
    pytest.importorskip("matplotlib")
    check(f"jumanji:{name}", (500, 500, 3))


@pytest.mark.slow
def test_navix_agent_cell():
    pytest.importorskip("navix")
    states, _, frames = check("navix:Navix-Empty-8x8-v0", (512, 512, 3), steps=12)
    positions = np.asarray(states.state.entities["player"].position)[:, 0]
    rows, cols = np.asarray(states.state.grid).shape[1:3]
    moved = {tuple(p) for p in positions}
    assert len(moved) > 1  # the agent moved in the episode
    for frame, position in zip(frames, positions, strict=True):
        assert cell_of_red(frame, rows, cols) == tuple(position)


@pytest.mark.slow
def test_xminigrid_agent_cell():
    pytest.importorskip("xminigrid")
    states, _, frames = check("xminigrid:MiniGrid-Empty-8x8", (512, 512, 3), steps=24)
    positions = np.asarray(states.state.agent.position)
    assert len({tuple(p) for p in positions}) > 1
    rows, cols = np.asarray(states.state.grid).shape[1:3]
    for frame, position in zip(frames, positions, strict=True):
        assert cell_of_red(frame, rows, cols) == tuple(position)


@pytest.mark.slow
def test_popgym_arcade_is_its_observation():
    pytest.importorskip("popgym_arcade")
    _, observations, frames = check("popgym_arcade:CountRecallEasy", (512, 512, 3))
    np.testing.assert_array_equal(frames, observations.repeat(4, axis=1).repeat(4, axis=2))


@pytest.mark.slow
@pytest.mark.parametrize(("name", "side"), [("2048", 500), ("minatar-breakout", 374)])
def test_pgx(name, side):
    pytest.importorskip("pgx")
    pytest.importorskip("cairosvg")
    check(f"pgx:{name}", (side, side, 3))


@pytest.mark.parametrize(
    ("family", "module"), [("pgx", "cairosvg"), ("jumanji", "matplotlib.backends.backend_agg")]
)
def test_missing_library_is_one_line(monkeypatch, family, module):
    from podracer.envs.render import NoRenderer, suites

    monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    env = types.SimpleNamespace(id=f"{family}:Game")
    with pytest.raises(NoRenderer) as raised:
        getattr(suites, family)(env, None, ())
    message = str(raised.value)
    assert "\n" not in message and "pip install 'podracer[video]'" in message
