"""Videos of a policy's episodes (:mod:`podracer.runs.video`): ``podracer eval RUN_DIR --video``
and ``--video-interval N``. The frames follow the environment's state, a video file decodes
with a frame per state, videos during training leave the run's params bitwise equal, and a
family that cannot draw (or a missing video extra) stops in one line, writing nothing."""

import json
import os
import sys
from pathlib import Path

import imageio.v3 as iio
import jax
import numpy as np
import pytest

from podracer import envs
from podracer.cli import main as cli
from podracer.envs.jax.catch import Catch
from podracer.envs.render import drawn
from podracer.runs import load_spec
from podracer.runs.media import gif_bytes
from podracer.runs.training import restore_run
from podracer.runs.video import CAPTION_HEIGHT, Episode, caption, record_jax_episode

CELL = drawn.CATCH_CELL  # catch's 10 x 5 board: 320 x 160 pixels
TRAIN = ["train", "--env", "catch", "--total-timesteps", "2048", "--quiet"]


def pixels_of(frame, colour):
    """The (rows, columns) of the pixels of exactly ``colour``."""
    return np.nonzero(np.all(frame == np.asarray(colour, np.uint8), axis=-1))


@pytest.fixture(scope="module")
def catch_run(tmp_path_factory):
    run_dir = str(tmp_path_factory.mktemp("video") / "run")
    assert cli.main([*TRAIN, "--run-dir", run_dir]) == 0
    return run_dir


def test_a_catch_episode_has_a_frame_per_step_plus_one_and_the_ball_falls_a_row_a_frame(
    catch_run,
):
    system, state, _ = restore_run(load_spec(catch_run), catch_run)
    agent, params = system.policy(state, 0)
    episode = record_jax_episode(
        envs.make("catch"), agent, params, jax.random.key(3), env_id="catch"
    )
    assert episode.rewards.shape == (9,)  # the ball falls 9 rows: 9 steps
    assert episode.frames.shape == (10, 10 * CELL, 5 * CELL, 3)
    assert episode.rewards[-1] in (-1.0, 1.0) and not episode.rewards[:-1].any()
    columns = set()
    for t, frame in enumerate(episode.frames):
        rows, cols = pixels_of(frame, drawn.BALL)
        assert len(rows), t
        assert set(rows // CELL) == {t}  # the state's ball_row is t after t steps
        columns |= set(cols // CELL)
    assert len(columns) == 1  # the ball falls straight
    # the last frame is the state the episode ended in: ball and paddle on the bottom row
    paddle_rows, paddle_cols = pixels_of(episode.frames[-1], drawn.PADDLE)
    caught = set(paddle_cols // CELL) == columns
    assert set(paddle_rows // CELL) == {9} and caught == (episode.rewards[-1] == 1.0)


def test_a_long_episode_is_drawn_a_chunk_at_a_time():
    states = np.arange(150)
    drawn_chunks = []

    def draw(part, params):
        drawn_chunks.append(len(part))
        return np.repeat(part.astype(np.uint8)[:, None, None, None], 3, axis=-1)

    episode = Episode(np.zeros(149), states=states, draw=draw, params=None)
    chunks = list(caption(episode))
    assert drawn_chunks == [64, 64, 22] and [len(c) for c in chunks] == [64, 64, 22]
    assert [int(c[0, CAPTION_HEIGHT, 0, 0]) for c in chunks] == [0, 64, 128]


def test_an_environment_renders_through_its_own_render_method(catch_run):
    class Drawn(Catch):
        def render(self, state, params):
            frame = np.zeros((params.rows, params.columns, 3), np.uint8)
            frame[int(state.ball_row), int(state.ball_column)] = 255
            return frame

    system, state, _ = restore_run(load_spec(catch_run), catch_run)
    agent, params = system.policy(state, 0)
    episode = record_jax_episode(Drawn(), agent, params, jax.random.key(0))
    assert episode.frames.shape == (10, 10, 5, 3)
    assert [int(np.argwhere(f[..., 0])[0, 0]) for f in episode.frames] == list(range(10))


def test_the_caption_is_a_strip_above_the_frames_with_the_step_and_return():
    frames = np.full((3, 20, 40, 3), 7, np.uint8)
    out = np.concatenate(list(caption(Episode(np.array([0.0, 1.0]), drawn=frames), member=2)))
    assert out.shape == (3, CAPTION_HEIGHT + 20, 40, 3)
    np.testing.assert_array_equal(out[:, CAPTION_HEIGHT:], frames)
    assert (out[:, :CAPTION_HEIGHT] > 128).any(axis=(1, 2, 3)).all()  # text in every strip
    assert not np.array_equal(out[0, :CAPTION_HEIGHT], out[2, :CAPTION_HEIGHT])  # step, return


@pytest.mark.parametrize("suffix", [".mp4", ".gif"])
def test_eval_video_writes_every_episode_whole_into_a_file_that_decodes(
    catch_run, tmp_path, capsys, suffix
):
    path = str(tmp_path / f"catch{suffix}")
    assert cli.main(["eval", catch_run, "--video", path, "--episodes", "2"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["video"] == path and result["frames"] == 20 and len(result["returns"]) == 2
    frames = iio.imread(path)
    assert frames.shape == (20, CAPTION_HEIGHT + 10 * CELL, 5 * CELL, 3)
    if suffix == ".gif":  # lossless: the ball's cell in the first frame of each episode
        for first in (frames[0], frames[10]):
            rows, _ = pixels_of(first[CAPTION_HEIGHT:], drawn.BALL)
            assert set(rows // CELL) == {0}


def test_eval_video_defaults_to_the_run_directory(catch_run, capsys):
    assert cli.main(["eval", catch_run, "--video"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["video"] == os.path.join(catch_run, "videos", "eval-update4.mp4")
    assert iio.imread(result["video"]).shape[0] == 10


class FakeWandb:
    """A stand-in for the wandb module that keeps what was logged."""

    def __init__(self):
        self.logged = []
        fake = self

        class Run:
            def log(self, values, step):
                fake.logged.append((step, values))

            def finish(self):
                pass

        class Video:
            def __init__(self, path, format):
                self.path, self.format = path, format

        self.Run, self.Video = Run, Video

    def init(self, **kwargs):
        return self.Run()


def test_video_interval_writes_its_videos_and_leaves_the_params_bitwise_equal(
    tmp_path, monkeypatch
):
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    plain, watched = str(tmp_path / "plain"), str(tmp_path / "watched")
    train = [*TRAIN, "--total-timesteps", "4096"]  # 8 updates
    assert cli.main([*train, "--run-dir", plain]) == 0
    assert cli.main([*train, "--run-dir", watched, "--video-interval", "3", "--wandb"]) == 0
    videos = sorted(os.listdir(os.path.join(watched, "videos")))
    assert videos == ["update3.mp4", "update6.mp4"]
    assert all(iio.imread(os.path.join(watched, "videos", v)).shape[0] == 10 for v in videos)
    (_, a, _), (_, b, _) = (restore_run(load_spec(d), d) for d in (plain, watched))
    leaves = jax.tree.leaves(jax.device_get((a.learner.params, a.learner.opt_state)))
    others = jax.tree.leaves(jax.device_get((b.learner.params, b.learner.opt_state)))
    assert len(leaves) == len(others)
    for x, y in zip(leaves, others, strict=True):
        np.testing.assert_array_equal(x, y)
    events = b"".join(f.read_bytes() for f in (Path(watched) / "tb").iterdir())
    assert events.count(b"video/eval") == 2 and b"GIF89a" in events  # TensorBoard's GIFs
    logged = [v["video/eval"] for _, v in fake.logged if "video/eval" in v]
    assert sorted(v.path for v in logged) == [os.path.join(watched, "videos", v) for v in videos]


def test_gif_bytes_decode_to_the_frames():
    frames = np.zeros((4, 8, 6, 3), np.uint8)
    frames[np.arange(4), np.arange(4)] = 255
    decoded = iio.imread(gif_bytes(frames), extension=".gif")
    assert decoded.shape[:3] == (4, 8, 6)
    assert [int(np.argwhere(d[..., 0] > 127)[0, 0]) for d in decoded] == [0, 1, 2, 3]


@pytest.fixture
def undrawn_env():
    envs.register("undrawn-catch", Catch)  # the family row's renderer is catch's id only
    yield "undrawn-catch"
    envs.factory._REGISTRY.pop("undrawn-catch")


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(err) and err[-1].startswith("podracer: error: "), err
    return err[-1]


def test_a_video_of_an_environment_without_a_renderer_is_one_line_and_writes_nothing(
    undrawn_env, tmp_path, capsys
):
    run_dir = str(tmp_path / "run")
    argv = ["train", "--env", undrawn_env, "--total-timesteps", "2048", "--quiet"]
    assert cli.main([*argv, "--run-dir", run_dir, "--video-interval", "2"]) == 2
    assert "undrawn-catch does not render" in one_error_line(capsys)
    assert not os.path.exists(run_dir)
    assert cli.main([*argv, "--run-dir", run_dir, "--video-interval", "2", "--dry-run"]) == 2
    assert "does not render" in one_error_line(capsys)
    assert cli.main([*argv, "--run-dir", run_dir]) == 0
    capsys.readouterr()
    assert cli.main(["eval", run_dir, "--video"]) == 2
    assert "undrawn-catch does not render" in one_error_line(capsys)
    assert not os.path.exists(os.path.join(run_dir, "videos"))


def test_a_video_without_the_video_extra_is_one_line_and_writes_nothing(
    catch_run, tmp_path, monkeypatch, capsys
):
    from test_extras import hide

    hide(monkeypatch, ["imageio", "imageio_ffmpeg"])
    run_dir = str(tmp_path / "run")
    assert cli.main([*TRAIN, "--run-dir", run_dir, "--video-interval", "2"]) == 2
    assert "pip install 'podracer[video]'" in one_error_line(capsys)
    assert not os.path.exists(run_dir)
    before = set(os.listdir(catch_run))
    assert cli.main(["eval", catch_run, "--video", str(tmp_path / "a.mp4")]) == 2
    assert "pip install 'podracer[video]'" in one_error_line(capsys)
    assert set(os.listdir(catch_run)) == before and not os.path.exists(tmp_path / "a.mp4")


def test_a_failure_of_the_video_process_stops_the_run_with_its_cause(tmp_path, monkeypatch):
    tests = os.path.dirname(__file__)
    monkeypatch.syspath_prepend(tests)
    monkeypatch.setenv("PYTHONPATH", tests + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run_dir = str(tmp_path / "run")
    argv = ["train", "--env", "video_envs:FailingDrawing", "--run-dir", run_dir, "--quiet"]
    with pytest.raises(RuntimeError, match="this drawing fails on purpose"):
        cli.main([*argv, "--total-timesteps", "8192", "--video-interval", "2"])
    assert not os.path.exists(os.path.join(run_dir, "videos", "update2.mp4"))


@pytest.mark.slow
def test_a_run_of_several_members_shows_the_member_asked_for_or_the_best(tmp_path, capsys):
    run_dir = str(tmp_path / "members")
    assert (
        cli.main(
            [*TRAIN, "--total-timesteps", "8192", "--arch.num-seeds", "2", "--run-dir", run_dir]
        )
        == 0
    )
    capsys.readouterr()
    assert cli.main(["eval", run_dir, "--episodes", "10"]) == 0
    per_member = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["per_seed_mean"]
    for flags, expected in ((["--member", "1"], 1), (["--best"], int(np.argmax(per_member)))):
        path = str(tmp_path / f"{flags[0][2:]}.gif")
        assert cli.main(["eval", run_dir, "--video", path, *flags]) == 0
        result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert result["member"] == expected
        caption_strip = iio.imread(path)[0, :CAPTION_HEIGHT]
        assert (caption_strip > 128).any()  # the member's caption
    assert cli.main(["eval", run_dir, "--video", "--member", "2"]) == 2
    assert "--member=2 is not allowed: the run has 2 member(s), 0..1" in one_error_line(capsys)
