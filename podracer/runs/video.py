"""Videos of a policy's episodes: recorded (:func:`record_jax_episode` on device with the
environment's renderer, :func:`record_host_episode` through a host environment that draws
itself), captioned (:func:`caption`) and written (:func:`write_video`, MP4 or GIF with imageio:
``pip install 'podracer[video]'``). :func:`video_of_run` is ``podracer eval RUN_DIR --video``;
:class:`VideoRecorder` is ``--video-interval N``, off the training path.

Frames are the episode's states, its first (the reset) to its last (the state the episode ended
in, before any reset): ``T + 1`` frames for ``T`` steps.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from podracer.core.acting import (
    RolloutState,
    batched_env_step,
    greedy_agent,
    reset_and_act,
    step_and_record,
)
from podracer.core.evaluation import evaluation_params, host_acting
from podracer.core.rollout import reset_envs
from podracer.envs import registry
from podracer.envs.render import NoRenderer, renderer, without_auto_reset
from podracer.errors import ConfigValueError
from podracer.runs import rundir
from podracer.runs.media import FPS, gif_bytes, require_writer, write_video

CAPTION_HEIGHT = 16
"""Pixels of the caption strip above each frame."""

MAX_STEPS = 10_000
"""Steps of an episode a video shows at most (``podracer eval --video --max-steps``): a longer
episode's video stops there."""

DUTY = 0.2
"""The share of its time the video process works while the run trains (it sleeps the rest,
after each chunk of frames it draws and each library it imports): what it does on an idle core
still slows the training through the caches and memory it shares (0.90x steps/s on a 2-core
CPU when it worked without a pause). Once the training ends it works at full speed."""

TRAINED = "trained"
"""The file of ``videos/.jobs`` that tells the video process the training has ended."""

BOOT = """
import contextlib, os, runpy, sys, time
with contextlib.suppress(AttributeError, OSError):
    os.nice(19)
with contextlib.suppress(AttributeError, OSError):
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
trained = TRAINED_FILE
for module in ("numpy", "jax", "podracer.runs"):  # its imports are work too: paced
    start = time.perf_counter()
    __import__(module)
    if not os.path.exists(trained):
        time.sleep((time.perf_counter() - start) * PAUSE)
sys.argv[0] = "podracer.runs.video_worker"
runpy.run_module("podracer.runs.video_worker", run_name="__main__", alter_sys=True)
"""
"""What the video process runs (``python -c BOOT RUN_DIR``): itself at the lowest priority
(Linux's ``SCHED_IDLE``: it runs only where the training leaves a core idle, and a training
thread that wakes takes the core back at once; else the lowest nice value), inherited by its
threads and its ffmpeg; then its imports (JAX and the run's libraries, seconds of work),
paced as its videos are (:data:`DUTY`); then :mod:`podracer.runs.video_worker`."""

JOBS_DIR = ".jobs"
"""The folder of ``videos/`` where ``--video-interval`` hands its jobs to the video process."""

PREVIEW_FRAMES = 150
"""Frames at most of a video's preview in TensorBoard (an animated GIF): every few frames."""

PREVIEW_WIDTH = 320
"""Pixels at most of the preview's width (a wider frame is subsampled)."""

CHUNK = 64
"""Steps of one compiled call while a JAX episode is recorded (it stops at the episode's end)."""


@dataclasses.dataclass(frozen=True)
class Episode:
    """One recorded episode: ``rewards`` ``[T]``, ``success`` the episode's success flag where
    the environment reports one (else None), and its ``T + 1`` frames (the reset's state to the
    last state), drawn :data:`CHUNK` at a time by :meth:`chunks` (a long episode's frames are
    never all in memory at once) or all at once by :attr:`frames`.

    A JAX episode keeps its ``states`` (stacked, on the host) and draws them with ``draw``
    (its renderer) and the environment's ``params``; a host episode keeps its ``drawn`` frames.
    """

    rewards: np.ndarray
    success: bool | None = None
    states: Any = None
    draw: Any = None
    params: Any = None
    drawn: np.ndarray | None = None

    @property
    def num_frames(self) -> int:
        if self.drawn is not None:
            return len(self.drawn)
        return len(jax.tree.leaves(self.states)[0])

    def chunks(self, size: int = CHUNK) -> Iterator[np.ndarray]:
        """The frames, uint8 ``[<= size, H, W, 3]`` at a time, in order."""
        for start in range(0, self.num_frames, size):
            if self.drawn is not None:
                yield self.drawn[start : start + size]
            else:
                part = jax.tree.map(lambda x, s=start: x[s : s + size], self.states)
                yield self.draw(part, self.params)

    @property
    def frames(self) -> np.ndarray:
        return np.concatenate(list(self.chunks()))

    @property
    def steps(self) -> int:
        return len(self.rewards)

    @property
    def episode_return(self) -> float:
        return float(np.sum(self.rewards))


class JaxEpisodes:
    """Records episodes of a JAX environment played by ``agent`` (greedy: its largest logit):
    ``episodes(actor_params, key) -> Episode``. Its two programs (the reset, and
    :data:`CHUNK` steps) are compiled once, for every episode it records (the videos of a run).

    The environment steps without its auto-reset (:func:`without_auto_reset`), so the last
    frame is the state the episode ended in; an environment that cannot keep it gives ``T``
    frames (its last step's state is already the next episode's). The renderer is found when
    it is built (:func:`podracer.envs.render.renderer`: :class:`NoRenderer` before anything is
    played)."""

    def __init__(self, env, agent, *, env_id: str | None = None, greedy: bool = True):
        self.draw = renderer(env, env_id)
        self.env_params = env_params = evaluation_params(env)
        env, self.kept = without_auto_reset(env)
        act = reset_and_act(greedy_agent(agent) if greedy else agent)
        env_step = batched_env_step(env, env_params, 1)

        def chunk(actor_params, carry, key):
            def one(carry, key):
                act_key, step_key = jax.random.split(key)
                carry, step, _ = step_and_record(
                    act, env_step, actor_params, carry, act_key, step_key
                )
                done = step.terminated | step.truncated
                return carry, (carry.env_state, step.reward[0], done[0])

            return jax.lax.scan(one, carry, jax.random.split(key, CHUNK))

        def reset(key):
            return reset_envs(env, key[None], env_params, agent.initial_actor_state)

        self.chunk, self.reset = jax.jit(chunk), jax.jit(reset)

    def __call__(self, actor_params, key: jax.Array, *, max_steps: int = MAX_STEPS) -> Episode:
        """The first episode from a reset with ``key``, at most ``max_steps`` steps."""
        reset_key, key = jax.random.split(key)
        carry: RolloutState = self.reset(reset_key)
        states, rewards, dones = [jax.device_get(carry.env_state)], [], []
        for index in range(max(1, -(-max_steps // CHUNK))):
            carry, out = self.chunk(actor_params, carry, jax.random.fold_in(key, index))
            env_states, reward, done = jax.device_get(out)
            states.append(jax.tree.map(lambda x: x[:, 0], env_states))
            rewards.append(reward)
            dones.append(done)
            if done.any():
                break
        rewards, dones = np.concatenate(rewards)[:max_steps], np.concatenate(dones)[:max_steps]
        steps = int(np.argmax(dones)) + 1 if dones.any() else dones.size
        states = jax.tree.map(_concatenate, *states)
        last = steps + 1 if self.kept or not dones.any() else steps
        states = jax.tree.map(lambda x: x[:last], states)
        self.draw(jax.tree.map(lambda x: x[:1], states), self.env_params)  # a failure: now
        rewards = np.asarray(rewards[:steps], np.float64)
        return Episode(rewards, states=states, draw=self.draw, params=self.env_params)


def record_jax_episode(
    env,
    agent,
    actor_params,
    key: jax.Array,
    *,
    env_id: str | None = None,
    greedy: bool = True,
    max_steps: int = MAX_STEPS,
) -> Episode:
    """The first episode of a JAX environment played by ``agent`` with ``actor_params``
    (:class:`JaxEpisodes`, for one episode)."""
    episodes = JaxEpisodes(env, agent, env_id=env_id, greedy=greedy)
    return episodes(actor_params, key, max_steps=max_steps)


def _concatenate(*parts):
    """The parts of a state's leaf joined on their leading axis (a key array stays one)."""
    if jax.dtypes.issubdtype(parts[0].dtype, jax.dtypes.prng_key):
        return jax.numpy.concatenate(parts)
    return np.concatenate(parts)


def record_host_episode(
    env_id: str,
    agent,
    actor_params,
    key: jax.Array,
    *,
    env_options=None,
    seed: int = 0,
    greedy: bool = True,
    max_steps: int = MAX_STEPS,
) -> Episode:
    """The first episode of one host environment of ``env_id`` (made with ``render=True``: the
    environment draws itself), played by ``agent``; the frame after each step is the state it
    reached (the ended episode's last state after the last step)."""
    from podracer.envs import host

    env = host.make(env_id, num_envs=1, env_options=env_options, seed=seed, render=True)
    try:
        act, env_step = host_acting(env, agent, greedy=greedy)
        carry = RolloutState((), env.reset(), agent.initial_actor_state(1))
        frames, rewards, success = [np.asarray(env.render())[0]], [], None
        for t in range(max_steps):
            carry, step, info = step_and_record(act, env_step, actor_params, carry, (key, t), None)
            frames.append(np.asarray(env.render())[0])
            rewards.append(float(np.asarray(step.reward)[0]))
            flag = getattr(info, "success", None)
            success = None if flag is None else bool(np.asarray(flag)[0])
            if bool(np.asarray(step.terminated | step.truncated)[0]):
                break
    finally:
        env.close()
    return Episode(np.asarray(rewards, np.float64), success, drawn=np.stack(frames))


def caption(episode: Episode, *, member: int | None = None) -> Iterator[np.ndarray]:
    """The episode's frames under a caption strip (:data:`CAPTION_HEIGHT` pixels), a chunk at a
    time (:meth:`Episode.chunks`): the step, the return so far and, where they exist, the
    success flag (on the last frame) and the member; uint8 ``[n, CAPTION_HEIGHT + H, W, 3]``."""
    from PIL import Image, ImageDraw

    returns = np.concatenate([[0.0], np.cumsum(episode.rewards)])
    last = episode.num_frames - 1
    t = 0
    for frames in episode.chunks():
        height, width = frames.shape[1:3]
        out = np.zeros((len(frames), CAPTION_HEIGHT + height, width, 3), np.uint8)
        out[:, CAPTION_HEIGHT:] = frames
        for i in range(len(frames)):
            parts = [f"step {t}", f"return {returns[min(t, len(returns) - 1)]:.4g}"]
            if episode.success is not None and t == last:
                parts.append("success" if episode.success else "no success")
            if member is not None:
                parts.append(f"member {member}")
            strip = Image.new("RGB", (width, CAPTION_HEIGHT), (0, 0, 0))
            ImageDraw.Draw(strip).text((2, 2), "  ".join(parts), fill=(255, 255, 255))
            out[i, :CAPTION_HEIGHT] = np.asarray(strip)
            t += 1
        yield out


def draws_on_host(env_id: str) -> bool:
    """Whether ``env_id``'s family steps on the host only (envpool, gymnasium): its videos
    come from the host environment; every other id is recorded as a JAX environment."""
    family = registry.family_of(env_id)
    return family is not None and family.host is not None and family.jax is None


def record(
    system, spec, agent, actor_params, key, *, greedy=True, max_steps=MAX_STEPS, recorders=None
) -> Episode:
    """One episode of the run ``spec``'s environment, the JAX or the host way
    (:func:`draws_on_host`), at most ``max_steps`` steps; ``recorders`` (a dict) keeps the
    JAX recorder of each agent for the next episodes (compiled once)."""
    if draws_on_host(spec.env):
        return record_host_episode(
            spec.env,
            agent,
            actor_params,
            key,
            env_options=spec.env_options,
            greedy=greedy,
            max_steps=max_steps,
        )
    recorders = {} if recorders is None else recorders
    which = (id(agent), greedy)  # the agent is kept with it: its id stays its own
    if which not in recorders:
        env = system.recipe.make_env()
        recorders[which] = agent, JaxEpisodes(env, agent, env_id=spec.env, greedy=greedy)
    return recorders[which][1](actor_params, key, max_steps=max_steps)


def check_renders(system, spec) -> None:
    """Fails in one line, before anything is played or written, when the run's environment
    cannot draw (:class:`NoRenderer`) or the video extra is missing."""
    require_writer("check.mp4")
    if draws_on_host(spec.env):
        return  # a host family draws itself; its maker refuses in one line where it cannot
    renderer(system.recipe.make_env(), spec.env)


def choose_member(system, state, seed: int, updates: int, member: int | None, best: bool):
    """The member a video shows: ``member``, the best by a greedy evaluation (``best``), or
    the only one."""
    count = system.num_members
    if member is not None:
        if not 0 <= member < count:
            raise ConfigValueError(
                f"--member={member} is not allowed: the run has {count} member(s), 0..{count - 1}"
            )
        return member
    if best and count > 1:
        returns = system.evaluator(seed=seed, episodes=10, greedy=True)(state, updates)
        return int(np.argmax(np.asarray(returns).mean(axis=1)))
    return 0


def write_episode(
    path: str, episode: Episode, *, member: int | None = None, pace=None
) -> dict[str, Any]:
    """Writes ``episode`` (captioned) to ``path`` and its preview beside it (``path`` with
    ``.preview.gif``: every few frames, at most :data:`PREVIEW_WIDTH` wide, at most
    :data:`PREVIEW_FRAMES` frames: what TensorBoard shows); returns what a ``"video"`` record
    says of them. ``pace()``, where given, is called after each chunk of frames is drawn."""
    every = max(1, -(-episode.num_frames // PREVIEW_FRAMES))
    preview: list[np.ndarray] = []

    def kept(chunks):
        t = 0
        for frames in chunks:
            step = max(1, -(-frames.shape[2] // PREVIEW_WIDTH))
            preview.extend(f[::step, ::step] for i, f in enumerate(frames, t) if i % every == 0)
            t += len(frames)
            yield frames
            if pace is not None:
                pace()

    count = write_video(path, kept(caption(episode, member=member)))
    preview_path = os.path.splitext(path)[0] + ".preview.gif"
    fps = max(1, FPS // every)
    with open(preview_path, "wb") as file:
        file.write(gif_bytes(np.stack(preview), fps))
    height, width = preview[0].shape[:2]
    return {
        "path": path,
        "frames": count,
        "steps": episode.steps,
        "return": episode.episode_return,
        "preview": preview_path,
        "preview_height": height,
        "preview_width": width,
    }


class VideoRecorder:
    """``--video-interval N``: one greedy episode every ``N`` updates, recorded, drawn and
    written by a process of its own (:mod:`podracer.runs.video_worker`, on the CPU, at the
    lowest priority), off the training path: a thread of the training process would take
    the interpreter's lock from the training loop for every frame it draws in Python.

    :meth:`submit` (the training thread) only writes the member's actor params to
    ``videos/.jobs/update<U>.npz`` (NumPy arrays, loaded without pickle) and names the update
    to the process; the video lands in ``RUN_DIR/videos/update<U>.mp4``, and a reader thread
    logs it to TensorBoard (the preview GIF) and wandb (``logger.video``). A failure of the
    process stops the run at the next :meth:`submit` or at :meth:`close`, with its cause."""

    def __init__(self, system, spec, run_dir: str, logger, steps_per_update: int):
        check_renders(system, spec)
        self.system, self.logger = system, logger
        self.steps_per_update = steps_per_update
        self.jobs = os.path.join(run_dir, rundir.VIDEO_DIR, JOBS_DIR)
        os.makedirs(self.jobs, exist_ok=True)
        self.log_path = os.path.join(self.jobs, "worker.log")
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", self._boot(), run_dir],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=env,
            )
        self.pending: set[int] = set()
        self.error: str | None = None
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, name="podracer-video", daemon=True)
        self.reader.start()

    def _boot(self) -> str:
        """:data:`BOOT` with this run's pause and file of the training's end."""
        trained = repr(os.path.join(self.jobs, TRAINED))
        return BOOT.replace("PAUSE", repr(1 / DUTY - 1)).replace("TRAINED_FILE", trained)

    def submit(self, state, updates: int) -> None:
        self._check()
        _, actor_params = self.system.policy(state, 0)
        leaves = [np.asarray(x) for x in jax.tree.leaves(actor_params)]
        path = os.path.join(self.jobs, f"update{updates}.npz")
        np.savez(path + ".tmp.npz", *leaves)
        os.replace(path + ".tmp.npz", path)
        with self.lock:
            self.pending.add(updates)
        try:
            self.process.stdin.write(f"{updates}\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            self._check(stopped=True)

    def _read(self) -> None:
        """The process's answers, one JSON line a video (or its error), as they come."""
        for line in self.process.stdout:
            answer = json.loads(line)
            if "error" in answer:
                self.error = answer["error"]
                return
            with open(answer["preview"], "rb") as file:
                preview = file.read()
            os.remove(answer["preview"])
            updates = answer["updates"]
            self.logger.video(
                {
                    **answer,
                    "kind": "video",
                    "step": updates * self.steps_per_update,
                    "preview": preview,
                }
            )
            with self.lock:
                self.pending.discard(updates)

    def _check(self, stopped: bool = False) -> None:
        """Raises the process's failure, if any, here (the training thread)."""
        if self.error is None and (stopped or self.process.poll() not in (None, 0)):
            self.reader.join(timeout=10)
        if self.error is None and self.process.poll() not in (None, 0):
            self.error = f"it stopped (exit status {self.process.returncode})"
        if self.error is not None:
            raise RuntimeError(
                f"--video-interval: the video process failed: {self.error} "
                f"(its log: {self.log_path})"
            )

    def close(self, timeout: float = 600.0) -> None:
        """Waits (at most ``timeout`` seconds) for the videos still being written, then stops
        the process."""
        try:
            open(os.path.join(self.jobs, TRAINED), "w").close()  # the worker: full speed now
            self.process.stdin.close()
            self.process.wait(timeout=timeout)
            self.reader.join(timeout=timeout)
            self._check()
            if self.pending:
                raise RuntimeError(
                    f"--video-interval: the videos of updates {sorted(self.pending)} were not "
                    f"written (the video process's log: {self.log_path})"
                )
            shutil.rmtree(self.jobs, ignore_errors=True)  # its log too: nothing went wrong
        finally:
            self.stop()

    def stop(self) -> None:
        """Stops the process now (a run that ends with an error or Ctrl-C)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


__all__ = [
    "CAPTION_HEIGHT",
    "Episode",
    "NoRenderer",
    "VideoRecorder",
    "caption",
    "record_host_episode",
    "record_jax_episode",
    "write_episode",
]
