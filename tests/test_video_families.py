"""``podracer eval RUN_DIR --video`` for a run of every family that draws: one episode becomes a
file that decodes with a frame per state (the episode's steps + 1) of the family's frame size
under the caption. The run directories hold an untrained state's checkpoint (what ``train``
writes; training it would only make the episode longer), and ``--max-steps`` bounds the
episodes of the families whose untrained policy plays long."""

import json

import imageio.v3 as iio
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer import envs, runs
from podracer.cli import main as cli
from podracer.cli.parse import parse_selectors, run_spec
from podracer.envs.render import renderer
from podracer.runs.checkpoint import Checkpointer
from podracer.runs.training import build_system
from podracer.runs.video import CAPTION_HEIGHT

pytestmark = pytest.mark.slow

JAX_FAMILIES = [
    ("catch", []),
    ("gymnax:CartPole-v1", []),
    ("gymnax:Breakout-MinAtar", []),
    ("trading:synthetic", []),
    ("brax:inverted_pendulum", []),
    ("playground:CartpoleBalance", []),
    ("craftax:Craftax-Classic-Symbolic-v1", []),
    ("jumanji:Snake-v1", []),
    ("navix:Navix-Empty-5x5-v0", []),
    ("xminigrid:MiniGrid-Empty-5x5", []),
    ("popgym_arcade:CountRecallEasy", []),
    ("pgx:2048", ["--agent", "dqn"]),
]
HOST_FAMILIES = [
    "envpool:CartPole-v1",
    "envpool:Pong-v5",
    "envpool:HalfCheetah-v4",
    "gymnasium:CartPole-v1",
    "gymnasium:HalfCheetah-v5",
]
LIBRARIES = {
    "brax": "brax",
    "playground": "mujoco_playground",
    "craftax": "craftax",
    "jumanji": "jumanji",
    "navix": "navix",
    "xminigrid": "xminigrid",
    "popgym_arcade": "popgym_arcade",
    "pgx": "pgx",
}


def saved_run(run_dir: str, argv: list[str]) -> None:
    """A run directory as ``podracer train`` leaves it, with the initial state's checkpoint."""
    spec, _ = run_spec(parse_selectors([*argv, "--total-timesteps", "4096"]))
    state = build_system(spec).init(spec.seed)
    runs.save_spec(run_dir, spec)
    with Checkpointer(run_dir) as checkpointer:
        checkpointer.save(1, state, {"updates": 1, "step": 1}, None)


def one_video(run_dir: str, tmp_path, capsys) -> tuple[dict, np.ndarray]:
    path = str(tmp_path / "episode.mp4")
    assert cli.main(["eval", run_dir, "--video", path, "--max-steps", "40"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return result, iio.imread(path)


def even(n: int) -> int:
    return n + n % 2


@pytest.mark.parametrize(("env_id", "flags"), JAX_FAMILIES, ids=[f[0] for f in JAX_FAMILIES])
def test_a_jax_family_run_becomes_a_video(env_id, flags, tmp_path, capsys):
    prefix = env_id.split(":")[0]
    if prefix in LIBRARIES:
        pytest.importorskip(LIBRARIES[prefix])
    run_dir = str(tmp_path / "run")
    saved_run(run_dir, ["--env", env_id, *flags])
    result, frames = one_video(run_dir, tmp_path, capsys)
    env = envs.make(env_id)
    state, _ = env.reset(jax.random.key(0), env.default_params)
    first = renderer(env, env_id)(
        jax.tree.map(lambda x: jnp.expand_dims(x, 0), state), env.default_params
    )
    height, width = first.shape[1:3]
    (steps,) = result["steps"]
    assert 1 <= steps <= 40
    assert frames.shape == (steps + 1, even(CAPTION_HEIGHT + height), even(width), 3)
    assert frames[:, CAPTION_HEIGHT:].std() > 0  # something drawn


@pytest.mark.parametrize("env_id", HOST_FAMILIES)
def test_a_host_family_run_on_sebulba_becomes_a_video(env_id, tmp_path, capsys):
    from podracer.envs import host

    run_dir = str(tmp_path / "run")
    flags = ["--arch", "sebulba", "--env", env_id, "--arch.envs-per-actor", "2"]
    saved_run(run_dir, flags)
    result, frames = one_video(run_dir, tmp_path, capsys)
    env = host.make(env_id, num_envs=1, render=True)
    try:
        env.reset()
        height, width = np.asarray(env.render()).shape[1:3]
    finally:
        env.close()
    (steps,) = result["steps"]
    assert 1 <= steps <= 40
    assert frames.shape == (steps + 1, even(CAPTION_HEIGHT + height), even(width), 3)
    assert frames[:, CAPTION_HEIGHT:].std() > 0
