"""Videos of a policy's episodes: recorded (:func:`record_jax_episode` on device with the
environment's renderer, :func:`record_host_episode` through a host environment that draws
itself), captioned (:func:`caption`) and written (:func:`write_video`, MP4 or GIF with imageio:
``pip install 'podracer[video]'``). :func:`video_of_run` is ``podracer eval RUN_DIR --video``;
:class:`VideoRecorder` is ``--video-interval N``, off the training path.

Frames are the episode's states, its first (the reset) to its last (the state the episode ended
in, before any reset): ``T + 1`` frames for ``T`` steps.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import os
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
from podracer.core.evaluation import eval_key, evaluation_params, host_acting
from podracer.core.rollout import reset_envs
from podracer.envs import registry
from podracer.envs.render import NoRenderer, renderer, without_auto_reset
from podracer.errors import ConfigValueError
from podracer.runs import rundir
from podracer.runs.media import FPS, require_writer, write_video

CAPTION_HEIGHT = 16
"""Pixels of the caption strip above each frame."""

MAX_STEPS = 10_000
"""Steps of an episode a video shows at most (``podracer eval --video --max-steps``): a longer
episode's video stops there."""

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
    (greedy: its largest logit), drawn by the environment's renderer
    (:func:`podracer.envs.render.renderer`; :class:`NoRenderer` before anything is played).

    The environment steps without its auto-reset (:func:`without_auto_reset`), so the last
    frame is the state the episode ended in; an environment that cannot keep it gives ``T``
    frames (its last step's state is already the next episode's)."""
    draw = renderer(env, env_id)
    env_params = evaluation_params(env)
    env, kept = without_auto_reset(env)
    act = reset_and_act(greedy_agent(agent) if greedy else agent)
    env_step = batched_env_step(env, env_params, 1)

    @jax.jit
    def chunk(carry, key):
        def one(carry, key):
            act_key, step_key = jax.random.split(key)
            carry, step, _ = step_and_record(act, env_step, actor_params, carry, act_key, step_key)
            done = step.terminated | step.truncated
            return carry, (carry.env_state, step.reward[0], done[0])

        return jax.lax.scan(one, carry, jax.random.split(key, CHUNK))

    reset_key, key = jax.random.split(key)
    carry: RolloutState = reset_envs(env, reset_key[None], env_params, agent.initial_actor_state)
    states, rewards, dones = [jax.device_get(carry.env_state)], [], []
    for index in range(max(1, -(-max_steps // CHUNK))):
        carry, (env_states, reward, done) = chunk(carry, jax.random.fold_in(key, index))
        env_states, reward, done = jax.device_get((env_states, reward, done))
        states.append(jax.tree.map(lambda x: x[:, 0], env_states))
        rewards.append(reward)
        dones.append(done)
        if done.any():
            break
    rewards, dones = np.concatenate(rewards)[:max_steps], np.concatenate(dones)[:max_steps]
    steps = int(np.argmax(dones)) + 1 if dones.any() else dones.size
    states = jax.tree.map(_concatenate, *states)
    last = steps + 1 if kept or not dones.any() else steps
    states = jax.tree.map(lambda x: x[:last], states)
    draw(jax.tree.map(lambda x: x[:1], states), env_params)  # a renderer's failure: now
    rewards = np.asarray(rewards[:steps], np.float64)
    return Episode(rewards, states=states, draw=draw, params=env_params)


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


def record(system, spec, agent, actor_params, key, *, greedy=True, max_steps=MAX_STEPS) -> Episode:
    """One episode of the run ``spec``'s environment, the JAX or the host way
    (:func:`draws_on_host`), at most ``max_steps`` steps."""
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
    env = system.recipe.make_env()
    return record_jax_episode(
        env, agent, actor_params, key, env_id=spec.env, greedy=greedy, max_steps=max_steps
    )


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


def _lowest_priority() -> None:
    """The calling thread (and the ffmpeg it starts) at the lowest CPU priority (Linux: a
    thread's nice value is its own): the video thread takes the cores the training leaves."""
    with contextlib.suppress(AttributeError, OSError):  # else: an even share of the cores
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


class VideoRecorder:
    """``--video-interval N``: one greedy evaluation episode every ``N`` updates, recorded and
    written by one background thread, off the training path. The training thread only copies
    the member's actor params to the host (:meth:`submit`); the video lands in
    ``RUN_DIR/videos/update<U>.mp4``, TensorBoard and wandb (``logger.video``). A failure in
    the thread stops the run at the next :meth:`submit` or at :meth:`close`, with its cause."""

    def __init__(self, system, spec, run_dir: str, logger, steps_per_update: int):
        check_renders(system, spec)
        self.system, self.spec, self.run_dir = system, spec, run_dir
        self.logger = logger
        self.steps_per_update = steps_per_update
        self.pool = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="podracer-video", initializer=_lowest_priority
        )
        self.pending: list[concurrent.futures.Future] = []

    def submit(self, state, updates: int) -> None:
        self._check()
        agent, actor_params = self.system.policy(state, 0)
        actor_params = jax.tree.map(np.asarray, actor_params)  # a host copy: the state is donated
        self.pending.append(self.pool.submit(self._write, agent, actor_params, updates))

    def _write(self, agent, actor_params, updates: int) -> str:
        key = eval_key(self.spec.seed, updates)
        episode = record(self.system, self.spec, agent, actor_params, key)
        path = os.path.join(self.run_dir, rundir.VIDEO_DIR, f"update{updates}.mp4")
        every = max(1, -(-episode.num_frames // PREVIEW_FRAMES))
        preview: list[np.ndarray] = []

        def kept(chunks):  # the preview: every few frames, at most PREVIEW_WIDTH wide
            t = 0
            for frames in chunks:
                step = max(1, -(-frames.shape[2] // PREVIEW_WIDTH))
                preview.extend(f[::step, ::step] for i, f in enumerate(frames, t) if i % every == 0)
                t += len(frames)
                yield frames

        write_video(path, kept(caption(episode)))
        self.logger.video(
            {
                "kind": "video",
                "step": updates * self.steps_per_update,
                "updates": updates,
                "path": path,
                "frames": np.stack(preview),
                "fps": max(1, FPS // every),
                "return": episode.episode_return,
            }
        )
        return path

    def _check(self) -> None:
        done = [f for f in self.pending if f.done()]
        self.pending = [f for f in self.pending if not f.done()]
        for future in done:
            future.result()  # raises the thread's error here, in the training thread

    def close(self, timeout: float = 600.0) -> None:
        """Waits (at most ``timeout`` seconds) for the videos still being written."""
        try:
            for future in self.pending:
                future.result(timeout=timeout)
            self.pending = []
        finally:
            self.pool.shutdown(wait=False, cancel_futures=True)


__all__ = [
    "CAPTION_HEIGHT",
    "Episode",
    "NoRenderer",
    "VideoRecorder",
    "caption",
    "record_host_episode",
    "record_jax_episode",
]
