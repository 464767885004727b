"""The envpool environment on the host (:class:`EnvpoolEnvironment`) and how it talks to envpool's
pool: its low-level ``_send`` / ``_recv`` where their layout is the known one, async mode's table
of rows per env. :mod:`podracer.envs.host.envpool` makes one (``envpool:<task>``) and its
docstring says what the ``TimeStep`` s mean, in sync and async mode."""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, NamedTuple

import numpy as np

from podracer.envs.host.checks import check_drawable, continuous_actions, discrete_actions
from podracer.types import (
    BoundedActionSpec,
    DiscreteActionSpec,
    EpisodeInfo,
    ObservationSpec,
    TimeStep,
)


@contextlib.contextmanager
def quiet_spaces():
    """Silences gymnasium's warning that envpool's float64 Box bounds are cast to float32."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*precision lowered", category=UserWarning)
        yield


def _bounded_action_spec(space: Any) -> BoundedActionSpec:
    """A Box action space as podracer's spec: f32 actions, f32 bounds of the space's shape."""
    with np.errstate(over="ignore"):  # bounds beyond f32's range become +-inf
        low = np.broadcast_to(np.asarray(space.low, np.float32), space.shape).copy()
        high = np.broadcast_to(np.asarray(space.high, np.float32), space.shape).copy()
    return BoundedActionSpec(tuple(int(d) for d in space.shape), low, high, "float32")


class _PoolOutput(NamedTuple):
    """envpool's output for some envs, in the order of ``env_id``."""

    env_id: np.ndarray  # i32 [n]
    obs: np.ndarray  # [n, ...]
    reward: np.ndarray  # f32 [n]
    terminated: np.ndarray  # bool [n]: envpool's done & ~trunc
    truncated: np.ndarray  # bool [n]: envpool's trunc (time limit reached)
    game_over: np.ndarray | None  # bool [n]: Atari's info["terminated"]
    score: np.ndarray  # f32 [n]: what episode returns sum (Atari: unclipped reward)

    def rows(self, index) -> _PoolOutput:
        return _PoolOutput(*(None if x is None else x[index] for x in self))


class _Table(NamedTuple):
    """Async mode's rows per env id (``[num_envs, ...]``): each env's latest result, written
    when envpool returns it and read by the ``recv`` that hands it out. An ended episode's step
    waits here (``final_obs`` its last observation, its reward, flags and statistics) until the
    env's reset observation arrives and is written over ``obs``."""

    obs: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: np.ndarray
    episode_done: np.ndarray
    episode_return: np.ndarray
    episode_length: np.ndarray

    @staticmethod
    def zeros(n: int, observation_spec: ObservationSpec) -> _Table:
        """The table of ``n`` envs, every row zero."""
        obs_shape, obs_dtype = (n, *observation_spec.shape), observation_spec.dtype
        return _Table(
            obs=np.zeros(obs_shape, obs_dtype),
            reward=np.zeros(n, np.float32),
            terminated=np.zeros(n, bool),
            truncated=np.zeros(n, bool),
            final_obs=np.zeros(obs_shape, obs_dtype),
            episode_done=np.zeros(n, bool),
            episode_return=np.zeros(n, np.float32),
            episode_length=np.zeros(n, np.int32),
        )


def _writable(x: np.ndarray) -> np.ndarray:
    """``x`` as a writable C-contiguous array (copied only when it is not one: an action
    fetched from a JAX array is a read-only view)."""
    if x.flags.writeable and x.flags.c_contiguous:
        return x
    return np.array(x, order="C")


class _RawLayout(NamedTuple):
    """Where envpool's low-level ``_recv`` puts the arrays the adapter reads, and the order of
    the arrays its ``_send`` takes (envpool's ``_state_keys`` and ``_action_keys``)."""

    env_id: int
    obs: int
    reward: int
    done: int
    trunc: int
    game_over: int | None  # Atari's info["terminated"]
    score: int | None  # Atari's info["reward"]
    action_keys: tuple[str, ...]


def _raw_layout(pool: Any, atari: bool) -> _RawLayout | None:
    """The layout of ``pool``'s low-level calls, or None (use its public ``send`` / ``recv``)
    where it is not the single-player one this adapter knows: one ``action`` array and the
    env ids (``players.env_id`` is the env ids with one player per env)."""
    state_keys = list(getattr(pool, "_state_keys", ()))
    action_keys = tuple(getattr(pool, "_action_keys", ()))
    needed = ["info:env_id", "obs", "reward", "done", "trunc"]
    needed += ["info:terminated", "info:reward"] if atari else []
    if (
        not all(hasattr(pool, name) for name in ("_send", "_recv", "config"))
        or any(k not in state_keys for k in needed)
        or sorted(action_keys) != ["action", "env_id", "players.env_id"]
        or pool.config.get("max_num_players", 1) != 1
    ):
        return None
    return _RawLayout(
        *(state_keys.index(k) for k in needed[:5]),
        game_over=state_keys.index("info:terminated") if atari else None,
        score=state_keys.index("info:reward") if atari else None,
        action_keys=action_keys,
    )


class EnvpoolEnvironment:
    """``num_envs`` envpool environments with podracer's ``TimeStep`` semantics; build with
    :func:`make`.

    Attributes: ``id`` (``"envpool:<task>"``), ``num_envs``, ``batch_size`` (rows per ``recv``;
    ``num_envs`` in sync mode), ``is_async``, ``observation_spec`` (one env's observation),
    ``action_spec``. Sync mode: :meth:`reset`, :meth:`step` (and :meth:`render`, made with
    ``render=True``). Async mode: :meth:`async_reset`, :meth:`recv`, :meth:`send`. See the
    module docstring for the semantics.
    """

    def __init__(
        self,
        env_id: str,
        pool: Any,
        *,
        num_envs: int,
        batch_size: int,
        pool_batch_size: int,
        time_limit: int | None,
        atari: bool,
        episodic_life: bool,
        render: bool = False,
        needs_gl: bool = False,
    ):
        self.id = env_id
        self.num_envs = num_envs
        self.batch_size = batch_size
        self.is_async = batch_size < num_envs
        self._pool = pool
        self._pool_batch_size = pool_batch_size
        self._time_limit = time_limit  # host-side limit; None: envpool's flags as they are
        self._atari = atari
        self._episodic_life = episodic_life
        with quiet_spaces():
            obs_space, action_space = pool.observation_space, pool.action_space
        self._discrete = type(action_space).__name__ == "Discrete"
        if self._discrete:
            self.action_spec = DiscreteActionSpec(int(action_space.n))
        else:  # a Box: f32 actions for the agent, envpool's dtype (f64 for MuJoCo) for envpool
            self.action_spec = _bounded_action_spec(action_space)
            self._pool_action_dtype = np.dtype(action_space.dtype)
        # f64 observations (MuJoCo) come as f32: what the network computes in, half the bytes
        obs_dtype = np.dtype(obs_space.dtype)
        self._cast_obs = obs_dtype == np.float64
        if self._cast_obs:
            obs_dtype = np.dtype(np.float32)
        self.observation_spec = ObservationSpec(tuple(obs_space.shape), obs_dtype)
        self._all_ids = np.arange(num_envs, dtype=np.int32)
        self._closed = False
        self._raw = _raw_layout(pool, atari)
        self._render = render  # envpool made with render_mode="rgb_array"
        self._needs_gl = needs_gl  # a MuJoCo task: an OpenGL context of this thread first
        self._final_frames: dict[int, np.ndarray] = {}  # env id -> its ended episode's last

        n = num_envs
        self._elapsed = np.zeros(n, np.int64)  # steps of each env's episode (host time limit)
        self._return = np.zeros(n, np.float64)  # running episode's return (Atari: game score)
        self._length = np.zeros(n, np.int64)  # running episode's steps (Atari: game steps)
        self._started = False

        # async book-keeping
        self._in_flight = 0  # envs envpool is stepping or resetting
        self._held = np.zeros(n, bool)  # returned by recv, not yet sent back
        self._first = np.zeros(n, bool)  # next result is the async_reset observation
        self._pending = np.zeros(n, bool)  # ended; next result is its follow-up (reset) call
        self._ready = np.zeros(0, np.int32)  # ids whose row in the table is ready, in order
        self._last_ids: np.ndarray | None = None  # the ids the last recv returned, until sent
        if self.is_async:
            self._table = _Table.zeros(n, self.observation_spec)

    # ---- shared ------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")

    def _require(self, asynchronous: bool, method: str) -> None:
        self._check_open()
        if self.is_async != asynchronous:
            mode, use = (
                ("async", "async_reset(), recv() and send(actions, env_ids)")
                if self.is_async
                else ("sync", "reset() and step(actions)")
            )
            raise RuntimeError(
                f"{self.id}: {method} is not available in {mode} mode (num_envs="
                f"{self.num_envs}, batch_size={self.batch_size}); use {use}"
            )

    def _check_actions(self, actions: Any, n: int) -> np.ndarray:
        if not self._discrete:
            actions = continuous_actions(self.id, actions, n, self.action_spec)
            return actions.astype(self._pool_action_dtype, copy=False)
        num_actions = self.action_spec.num_actions
        actions = discrete_actions(self.id, actions, n, num_actions)
        return actions.astype(np.int32, copy=False)

    def _dummy_actions(self, n: int) -> np.ndarray:
        """Actions for envpool's auto-reset call, which ignores them."""
        if self._discrete:
            return np.zeros(n, np.int32)
        return np.zeros((n, *self.action_spec.shape), self._pool_action_dtype)

    def _recv_pool(self) -> _PoolOutput:
        if self._raw is not None:  # envpool's arrays without its Python wrapper
            state = self._pool._recv()
            raw = self._raw
            env_id, obs, done = state[raw.env_id], state[raw.obs], state[raw.done]
            reward, truncated = state[raw.reward], state[raw.trunc]
            terminated = done & ~truncated  # what envpool's gymnasium wrapper reports
            game_over = state[raw.game_over] if self._atari else None
            score = state[raw.score] if self._atari else None
        else:
            obs, reward, terminated, truncated, info = self._pool.recv()
            env_id = info["env_id"]
            game_over = info["terminated"] if self._atari else None
            score = info["reward"] if self._atari else None
        if self._cast_obs:
            obs = obs.astype(np.float32)
        reward = np.asarray(reward, np.float32)
        return _PoolOutput(
            np.asarray(env_id, np.int32),
            obs,
            reward,
            np.asarray(terminated, bool),
            np.asarray(truncated, bool),
            None if game_over is None else np.asarray(game_over, bool),
            reward if score is None else np.asarray(score, np.float32),
        )

    def _pool_send(self, actions: np.ndarray, env_ids: np.ndarray) -> None:
        """envpool's ``send(actions, env_ids)``; ``actions`` in envpool's dtype, ``env_ids``
        i32. Its Python wrapper rebuilds the task's config dict at every call (tens of
        microseconds, as much as a whole CartPole step of 32 envs), so the arrays go straight
        to envpool's own ``_send`` where their layout is the known one."""
        if self._raw is None:
            self._pool.send(actions, env_ids)
            return
        actions, env_ids = _writable(actions), _writable(env_ids)  # what _send takes
        self._pool._send([actions if k == "action" else env_ids for k in self._raw.action_keys])

    def _send_follow_up(self, env_ids: np.ndarray) -> None:
        """Starts the call that resets the envs ``env_ids``, whose episodes just ended."""
        if self._time_limit is not None:
            self._pool._reset(env_ids)  # envpool's reset(env_ids) without its recv (async safe)
        else:  # envpool's own auto-reset: the step after done (Atari: next life or new game)
            self._pool_send(self._dummy_actions(len(env_ids)), env_ids)

    def _account(self, out: _PoolOutput) -> tuple[np.ndarray, np.ndarray, EpisodeInfo]:
        """Flags and episode statistics of one envpool step of the envs ``out.env_id``.

        Returns ``(terminated, truncated, EpisodeInfo)``, each ``[n]``, and advances the host
        counters of those envs (their episodes start over where they ended). One gather and one
        scatter per counter: this runs at every step of every env.
        """
        ids = out.env_id
        terminated = out.terminated
        if out.game_over is not None:  # a game over on the time limit's step is terminal
            terminated = terminated | (out.truncated & out.game_over)
        truncated = out.truncated & ~terminated
        if self._time_limit is not None:
            elapsed = self._elapsed[ids] + 1
            truncated |= (elapsed >= self._time_limit) & ~terminated
            elapsed[terminated | truncated] = 0
            self._elapsed[ids] = elapsed
        # with episodic_life a lost life is terminal for the learner, but the game goes on
        ended = terminated | truncated
        episode_done = (out.game_over | truncated) if self._episodic_life else ended
        returns = self._return[ids] + out.score
        lengths = self._length[ids] + 1
        info = EpisodeInfo(
            done=episode_done,
            episode_return=np.where(episode_done, returns, 0.0).astype(np.float32),
            episode_length=np.where(episode_done, lengths, 0).astype(np.int32),
        )
        returns[episode_done] = 0.0
        lengths[episode_done] = 0
        self._return[ids] = returns
        self._length[ids] = lengths
        return terminated, truncated, info

    def _zero_info(self, n: int) -> EpisodeInfo:
        return EpisodeInfo(np.zeros(n, bool), np.zeros(n, np.float32), np.zeros(n, np.int32))

    def _reset_counters(self) -> None:
        self._elapsed[:] = 0
        self._return[:] = 0.0
        self._length[:] = 0
        self._started = True

    # ---- sync mode ---------------------------------------------------------------------------

    def _recv_in_order(self, env_ids: np.ndarray) -> _PoolOutput:
        out = self._recv_pool()
        if not np.array_equal(out.env_id, env_ids):
            out = out.rows(np.argsort(out.env_id, kind="stable"))
            assert np.array_equal(out.env_id, env_ids), (out.env_id, env_ids)
        return out

    def reset(self) -> TimeStep:
        """Resets every environment (sync mode). All fields ``[num_envs, ...]``; reward 0."""
        self._require(False, "reset()")
        obs, info = self._pool.reset()
        if self._cast_obs:
            obs = obs.astype(np.float32)
        env_id = np.asarray(info["env_id"])
        if not np.array_equal(env_id, self._all_ids):
            obs = obs[np.argsort(env_id, kind="stable")]
        self._reset_counters()
        self._final_frames = {}
        n = self.num_envs
        false = np.zeros(n, bool)
        return TimeStep(obs, np.zeros(n, np.float32), false, false.copy(), obs, self._zero_info(n))

    def step(self, actions: np.ndarray) -> TimeStep:
        """Steps every environment with ``actions`` (int ``[num_envs]``, or float
        ``[num_envs, *action_spec.shape]`` for continuous actions), sync mode.

        Returns a ``TimeStep`` with fields ``[num_envs, ...]`` in env id order; environments
        whose episode ended are already reset (``obs``), ``final_obs`` keeps their last
        observation.
        """
        self.step_begin(actions)
        return self.step_end()

    def step_begin(self, actions: np.ndarray) -> None:
        """The first half of :meth:`step`: the actions go to envpool's workers, which step
        while the caller does something else (another member's environments:
        :class:`~podracer.envs.host.members.MemberEnvironments`); :meth:`step_end` returns what
        :meth:`step` would have."""
        self._require(False, "step()")
        if not self._started:
            raise RuntimeError(f"{self.id}: call reset() before step()")
        actions = self._check_actions(actions, self.num_envs)
        self._pool_send(actions, self._all_ids)

    def step_end(self) -> TimeStep:
        """The second half of :meth:`step` (after :meth:`step_begin`)."""
        out = self._recv_in_order(self._all_ids)
        terminated, truncated, info = self._account(out)
        obs = final_obs = out.obs
        ended_ids = self._all_ids[terminated | truncated]
        self._final_frames = {}
        if ended_ids.size:
            final_obs = obs.copy()
            if self._render:  # the ended episodes' last frames, before their reset
                drawn = self._draw(ended_ids)
                self._final_frames = dict(zip(ended_ids.tolist(), drawn, strict=True))
            self._send_follow_up(ended_ids)
            obs[ended_ids] = self._recv_in_order(ended_ids).obs
        return TimeStep(obs, out.reward, terminated, truncated, final_obs, info)

    def render(self) -> np.ndarray:
        """The frames of the environments (sync mode, made with ``render=True``): uint8
        ``[num_envs, H, W, 3]``, envpool's own drawing (classic control 400 x 600, Atari the
        full 210 x 160 screen, MuJoCo 480 x 480). After a step that ended an episode, that
        env's frame is the ended episode's last state (what ``final_obs`` shows), not the
        next episode's first.

        Raises:
          NoRenderer: made without ``render=True``, or envpool cannot draw the task (one
            line).
        """
        self._check_open()
        check_drawable(self.id, self._render, self._started)
        frames = self._draw(self._all_ids)
        for i, frame in self._final_frames.items():
            frames[i] = frame
        return frames

    def _draw(self, env_ids: np.ndarray) -> np.ndarray:
        """envpool's frames of the envs ``env_ids``, uint8 ``[n, H, W, 3]``."""
        from podracer.envs.render import NoRenderer

        if self._needs_gl:  # envpool's MuJoCo ends the process when no context is current
            from podracer.envs.render.mujoco import make_current

            make_current(f"envpool's MuJoCo task {self.id}", 640, 480)
        try:
            frames = self._pool.render(env_ids=np.asarray(env_ids, np.int32))
        except (RuntimeError, ValueError, NotImplementedError) as error:
            reason = str(error).strip().splitlines()
            raise NoRenderer(
                f"{self.id}: envpool cannot draw this task "
                f"({reason[0] if reason else type(error).__name__})"
            ) from None
        frames = np.asarray(frames)
        if frames.shape[-1] == 4:
            frames = frames[..., :3]
        return np.ascontiguousarray(frames, np.uint8)

    # ---- async mode --------------------------------------------------------------------------

    def async_reset(self) -> None:
        """Starts resetting every environment (async mode); their observations come from
        :meth:`recv` (reward 0, no flags). Call it once, before the first :meth:`recv`."""
        self._require(True, "async_reset()")
        if self._in_flight:
            raise RuntimeError(
                f"{self.id}: async_reset() while {self._in_flight} environments are still "
                "stepping is not allowed; make a new environment to start over"
            )
        self._pool.async_reset()
        self._in_flight = self.num_envs
        self._held[:] = False
        self._pending[:] = False
        self._first[:] = True
        self._ready = np.zeros(0, np.int32)
        self._last_ids = None
        self._reset_counters()

    def recv(self) -> tuple[TimeStep, np.ndarray]:
        """The next ``batch_size`` environments that are ready (async mode).

        Returns ``(TimeStep, env_ids)``: fields ``[batch_size, ...]`` and the i32
        ``[batch_size]`` ids of the environments of each row (read-only); send their next
        actions with :meth:`send` before the next ``recv``.
        """
        self._require(True, "recv()")
        if not self._started:
            raise RuntimeError(f"{self.id}: call async_reset() before recv()")
        b = self.batch_size
        while len(self._ready) < b:
            if self._in_flight < self._pool_batch_size:
                raise RuntimeError(
                    f"{self.id}: recv() would wait forever: {self._in_flight} environments are "
                    f"stepping and envpool returns them {self._pool_batch_size} at a time; send "
                    "actions for the env ids of every recv() before the next one"
                )
            out = self._recv_pool()
            self._in_flight -= len(out.env_id)
            self._absorb(out)
        ids, self._ready = self._ready[:b], self._ready[b:]
        self._held[ids] = True
        ids.flags.writeable = False  # what send() sees again is what recv() returned
        self._last_ids = ids
        t = self._table
        ts = TimeStep(
            obs=t.obs[ids],
            reward=t.reward[ids],
            terminated=t.terminated[ids],
            truncated=t.truncated[ids],
            final_obs=t.final_obs[ids],
            info=EpisodeInfo(t.episode_done[ids], t.episode_return[ids], t.episode_length[ids]),
        )
        return ts, ids

    def _absorb(self, out: _PoolOutput) -> None:
        """Writes one envpool batch into the table and queues the ids whose rows are ready;
        an ended episode's step waits there for the env's reset observation."""
        ids = out.env_id
        first, follow_up = self._first[ids], self._pending[ids]
        t = self._table
        ready = [self._ready]
        if first.any():  # the async_reset observations: reward 0, no flags
            fid = ids[first]
            self._first[fid] = False
            t.obs[fid] = t.final_obs[fid] = out.obs[first]
            zeroed = (t.reward, t.terminated, t.truncated)
            for x in (*zeroed, t.episode_done, t.episode_return, t.episode_length):
                x[fid] = 0
            ready.append(fid)
        if follow_up.any():  # reset observations after an ended step that waits in the table
            pid = ids[follow_up]
            self._pending[pid] = False
            t.obs[pid] = out.obs[follow_up]
            ready.append(pid)
        fresh = ~(first | follow_up)
        if fresh.all():  # the usual batch: steps of running episodes only
            ready.append(self._absorb_steps(out))
        elif fresh.any():
            ready.append(self._absorb_steps(out.rows(fresh)))
        self._ready = np.concatenate(ready)

    def _absorb_steps(self, out: _PoolOutput) -> np.ndarray:
        """Steps of running episodes into the table; returns the ids that are ready (the
        others ended: their follow-up call starts now)."""
        ids = out.env_id
        terminated, truncated, info = self._account(out)
        t = self._table
        t.obs[ids] = t.final_obs[ids] = out.obs
        t.reward[ids] = out.reward
        t.terminated[ids] = terminated
        t.truncated[ids] = truncated
        t.episode_done[ids] = info.done
        t.episode_return[ids] = info.episode_return
        t.episode_length[ids] = info.episode_length
        ended = terminated | truncated
        if not ended.any():
            return ids
        eid = ids[ended]
        self._pending[eid] = True
        self._send_follow_up(eid)
        self._in_flight += len(eid)
        return ids[~ended]

    def send(self, actions: np.ndarray, env_ids: np.ndarray) -> None:
        """Sends ``actions`` (int ``[n]``, or float ``[n, *action_spec.shape]`` for continuous
        actions) to the environments ``env_ids`` (``[n]``, from :meth:`recv`), async mode."""
        self._require(True, "send()")
        if env_ids is self._last_ids:  # the ids of the last recv, all of them, unchanged
            self._last_ids = None
        else:
            self._last_ids = None
            env_ids = np.asarray(env_ids)
            if (
                env_ids.ndim != 1
                or env_ids.dtype.kind not in "iu"
                or len(np.unique(env_ids)) != len(env_ids)
                or not np.all(self._held[np.clip(env_ids, 0, self.num_envs - 1)])
                or np.any((env_ids < 0) | (env_ids >= self.num_envs))
            ):
                raise ValueError(
                    f"{self.id}: send to env_ids={env_ids} is not allowed: give distinct ids "
                    "that the last recv() returned and that have not been sent yet "
                    f"(waiting: {np.flatnonzero(self._held)})"
                )
        actions = self._check_actions(actions, len(env_ids))
        if not len(env_ids):
            return
        env_ids = env_ids.astype(np.int32, copy=False)
        self._pool_send(actions, env_ids)
        self._held[env_ids] = False
        self._in_flight += len(env_ids)

    # ---- lifetime ----------------------------------------------------------------------------

    def close(self) -> None:
        """Stops envpool's threads; the environment cannot be used afterwards."""
        if not self._closed:
            self._closed = True
            close = getattr(self._pool, "close", None)
            if close is not None:
                close()

    def __repr__(self) -> str:
        return (
            f"EnvpoolEnvironment({self.id!r}, num_envs={self.num_envs}, "
            f"batch_size={self.batch_size})"
        )
