"""envpool environments on the host, for Sebulba's actor threads (NumPy in, NumPy out).

:func:`make` builds an :class:`EnvpoolEnvironment` from an id ``"envpool:<task>"`` (any envpool
task with discrete or continuous actions and one array observation: ``envpool:CartPole-v1``,
``envpool:Acrobot-v1``, ``envpool:Breakout-v5``, the MuJoCo tasks ``envpool:HalfCheetah-v4``,
``envpool:Hopper-v4``, ``envpool:Walker2d-v4``, ``envpool:Ant-v4``, ``envpool:Humanoid-v4``, ...,
continuous classic control ``envpool:Pendulum-v1`` and ``envpool:MountainCarContinuous-v0``;
``envpool.list_all_envs()`` lists them). Nothing here is traced or jitted; one object belongs to
one thread.

Every :class:`~podracer.types.TimeStep` it returns means what it means for podracer's JAX
environments, which envpool alone does not give:

- **Same-step auto-reset.** envpool resets an environment on the call *after* the one that
  reported ``done`` (and returns the reset observation with reward 0 then). The adapter hides that
  step: when an episode ends at step ``t``, ``obs[t]`` is already the first observation of the
  next episode and ``final_obs[t]`` the last observation of the one that ended
  (``final_obs == obs`` where the episode goes on; then it may be the very same array).
- **Termination and truncation kept apart**, never both true; a terminal state reached on the
  time limit's last step counts as *terminated* (nothing to bootstrap). envpool reports
  ``trunc = True`` at the time limit even when the state is terminal, so:

  * tasks with a ``max_episode_steps`` setting (classic control, ...) get their time limit on the
    host: envpool's own limit is switched off, ``terminated`` is envpool's ``done`` and
    ``truncated`` is "this env's episode reached ``max_episode_steps`` steps and did not
    terminate"; such an environment is reset with envpool's ``reset(env_ids)``;
  * Atari tasks keep envpool's limit (it counts the steps of a whole game, across lives, and a
    host reset would undo ``episodic_life``); envpool's ``info["terminated"]`` (game over) then
    says which time-limit steps are terminal. Their follow-up call is envpool's own auto-reset,
    a step with a dummy action, so ``episodic_life`` goes on with the next life;
  * other tasks (without either) take ``terminated = done & ~trunc`` as envpool reports them.
- ``reward`` is f32; ``info = EpisodeInfo(done, episode_return, episode_length)`` is tracked on the
  host per env id: where ``done``, the undiscounted return and the number of steps of the episode
  that ended at this step, 0 elsewhere. For Atari the "episode" is the *game*: the return sums
  envpool's unclipped ``info["reward"]`` (the score, also with ``reward_clip``) and with
  ``episodic_life`` a game ends at game over or the time limit, not at each lost life (which is a
  ``terminated`` step for the learner).

**Actions.** A ``Discrete(n)`` task takes ints ``[num_envs]`` in ``0..n-1``
(``DiscreteActionSpec(n)``). A ``Box`` task (MuJoCo, ``Pendulum-v1``, ...) takes floats
``[num_envs, *shape]`` (``BoundedActionSpec(shape, low, high, "float32")``, the bounds f32 arrays of
``shape``): they must be finite, values outside ``[low, high]`` are clipped to it (a Gaussian
policy's samples go to the environment within its bounds), and they reach envpool in its own dtype
(f64 for MuJoCo). **Observations** envpool gives in f64 (MuJoCo) come as f32 (the network
computes in f32; half the bytes to the device), and ``observation_spec`` says so; other dtypes
(Atari's uint8, classic control's f32) are as envpool gives them. MuJoCo and classic-control tasks
have a ``max_episode_steps`` (1000 for MuJoCo, 200 for ``Pendulum-v1``), so their time limit is
the host's (above): a MuJoCo task's ``terminated`` is its own termination (Hopper, Walker2d, Ant
and Humanoid falling), never the time limit, which is ``truncated``.

**Sync mode** (``batch_size`` ``None`` or ``num_envs``): :meth:`EnvpoolEnvironment.reset` and
:meth:`EnvpoolEnvironment.step` over all ``num_envs`` environments, rows in env id order. After a
step where the envs ``E`` ended, the adapter calls envpool once more for ``E`` alone
(``step(actions, env_id=E)`` or ``reset(E)``) and writes their reset observations into ``obs``.

**Async mode** (``batch_size < num_envs``): :meth:`~EnvpoolEnvironment.async_reset` once, then
alternate :meth:`~EnvpoolEnvironment.recv` ``-> (TimeStep, env_ids)`` (``batch_size`` rows) and
:meth:`~EnvpoolEnvironment.send` ``(actions, env_ids)`` for those ids. At an episode boundary the
result of the env that ended is held back: the adapter sends that env its follow-up call at once
and emits the step when the reset observation arrives, so async mode yields exactly the sync
semantics above (``obs`` = next episode's first observation, ``final_obs`` = last observation of
the ended one, the ended step's reward and flags); that env's row just comes one envpool call
later. After :meth:`~EnvpoolEnvironment.async_reset` each env's first row is its reset observation
(reward 0, no flags). envpool returns results ``min(batch_size, num_envs - batch_size + 1)`` at a
time, so the held-back envs never leave ``recv`` waiting forever, as long as the ids of every
``recv`` are sent back before the next one (what a Sebulba actor does); otherwise ``recv`` raises
instead of blocking. The ids ``recv`` returns are a read-only array; ``send`` checks other ids
(distinct, returned by the last ``recv``, not sent yet) and skips the checks for that very array.

**Atari options** (``-v5`` tasks; envpool's defaults, ``AtariOptions``): ``frame_stack=4``
(envpool's ``stack_num``), ``img_height=img_width=84``, ``episodic_life=False``,
``reward_clip=False``, ``repeat_action_probability=0.0``, ``full_action_space=False``, and
``sticky_actions=True`` for the protocol of Machado et al. (2018, arXiv 1709.06009): sticky
actions with probability 0.25 and the full action space of 18. Observations are uint8
``[frame_stack, img_height, img_width]``. ``max_episode_steps`` (agent steps; envpool's default
for Atari is 27000, i.e. 108000 frames) is an option of every task that has one. Other settings of
envpool's task config (``noop_max``, ``frame_skip``, MuJoCo's ``frame_skip``, ``frame_stack``,
``ctrl_cost_weight``, ``terminate_when_unhealthy``, ``reset_noise_scale``, ...) are passed through
under envpool's names.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import warnings
from typing import Any, NamedTuple

import numpy as np

from podracer.envs.host.checks import continuous_actions, discrete_actions
from podracer.errors import ConfigError, ConfigValueError
from podracer.types import (
    BoundedActionSpec,
    DiscreteActionSpec,
    EpisodeInfo,
    ObservationSpec,
    TimeStep,
)
from podracer.util.validation import check_positive, check_range

PREFIX = "envpool:"
STICKY_ACTION_PROBABILITY = 0.25  # Machado et al. (2018)
_INT32_MAX = 2**31 - 1

# Settings of envpool's task config that make() sets itself (or that no caller should touch).
_MANAGED = (
    "num_envs",
    "batch_size",
    "num_threads",
    "seed",
    "env_seed",
    "base_path",
    "gym_reset_return_info",
    "max_num_players",
)
# Settings that are not options: the task itself, a score threshold, frames (use frame_stack),
# a discount podracer does not read (terminated says it).
_NOT_OPTIONS = ("task", "reward_threshold", "stack_num", "zero_discount_on_life_loss")


@dataclasses.dataclass(frozen=True)
class AtariOptions:
    """The options of envpool's Atari tasks (``envpool:<Game>-v5``); envpool's defaults."""

    frame_stack: int = 4
    """Frames stacked in one observation (envpool's ``stack_num``)."""
    img_height: int = 84
    img_width: int = 84
    episodic_life: bool = False
    """A lost life ends the (learner's) episode with ``terminated``; the game goes on."""
    reward_clip: bool = False
    """Rewards clipped to their sign; episode returns still report the score."""
    repeat_action_probability: float = 0.0
    """Sticky actions: the probability that the emulator repeats the previous action."""
    full_action_space: bool = False
    """All 18 actions instead of the game's minimal set."""
    sticky_actions: bool = False
    """Machado et al. (2018): ``repeat_action_probability=0.25`` and ``full_action_space=True``."""

    def __post_init__(self):
        for field in ("frame_stack", "img_height", "img_width"):
            _check_int(self, field)
        check_positive(self, "frame_stack", "img_height", "img_width")
        for field in ("episodic_life", "reward_clip", "full_action_space", "sticky_actions"):
            if not isinstance(getattr(self, field), bool | np.bool_):
                raise ConfigError(
                    f"AtariOptions.{field}={getattr(self, field)!r} is not allowed: give True "
                    "or False"
                )
        if isinstance(self.repeat_action_probability, bool) or not isinstance(
            self.repeat_action_probability, int | float
        ):
            raise ConfigError(
                f"AtariOptions.repeat_action_probability={self.repeat_action_probability!r} is "
                "not allowed: give a number >= 0 and < 1"
            )
        check_range(self, "repeat_action_probability", 0.0, 1.0)
        if self.repeat_action_probability >= 1.0:
            raise ConfigError(
                f"AtariOptions.repeat_action_probability={self.repeat_action_probability!r} is "
                "not allowed: it must be < 1 (at 1 the agent never acts)"
            )
        if self.sticky_actions and self.repeat_action_probability not in (
            0.0,
            STICKY_ACTION_PROBABILITY,
        ):
            raise ConfigError(
                f"AtariOptions.sticky_actions=True with repeat_action_probability="
                f"{self.repeat_action_probability!r} is not allowed: sticky_actions sets it to "
                f"{STICKY_ACTION_PROBABILITY}; give one or the other"
            )

    def envpool_kwargs(self) -> dict[str, Any]:
        """The same options under envpool's names."""
        sticky = self.sticky_actions
        return dict(
            stack_num=int(self.frame_stack),
            img_height=int(self.img_height),
            img_width=int(self.img_width),
            episodic_life=bool(self.episodic_life),
            reward_clip=bool(self.reward_clip),
            repeat_action_probability=float(
                STICKY_ACTION_PROBABILITY if sticky else self.repeat_action_probability
            ),
            full_action_space=bool(sticky or self.full_action_space),
        )


ATARI_OPTIONS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(AtariOptions))


@contextlib.contextmanager
def _quiet_spaces():
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


def _check_int(obj: Any, field: str) -> None:
    value = getattr(obj, field)
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ConfigError(f"{type(obj).__name__}.{field}={value!r} is not allowed: give an integer")


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
    ``action_spec``. Sync mode: :meth:`reset`, :meth:`step`. Async mode: :meth:`async_reset`,
    :meth:`recv`, :meth:`send`. See the module docstring for the semantics.
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
        with _quiet_spaces():
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
            obs_shape, obs_dtype = (n, *self.observation_spec.shape), self.observation_spec.dtype
            self._table = _Table(
                obs=np.zeros(obs_shape, obs_dtype),
                reward=np.zeros(n, np.float32),
                terminated=np.zeros(n, bool),
                truncated=np.zeros(n, bool),
                final_obs=np.zeros(obs_shape, obs_dtype),
                episode_done=np.zeros(n, bool),
                episode_return=np.zeros(n, np.float32),
                episode_length=np.zeros(n, np.int32),
            )

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
        if ended_ids.size:
            final_obs = obs.copy()
            self._send_follow_up(ended_ids)
            obs[ended_ids] = self._recv_in_order(ended_ids).obs
        return TimeStep(obs, out.reward, terminated, truncated, final_obs, info)

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


def _task(env_id: str) -> str:
    """The envpool task of ``env_id``; an id that is not ``envpool:<task>`` of an existing task
    is an error (with close matches)."""
    if not isinstance(env_id, str) or not env_id.startswith(PREFIX):
        raise ConfigValueError(
            f"environment id {env_id!r} is not allowed: envpool ids look like "
            f"'{PREFIX}<task>', e.g. '{PREFIX}CartPole-v1' or '{PREFIX}Breakout-v5'"
        )
    import envpool

    task = env_id[len(PREFIX) :]
    all_ids = envpool.list_all_envs()
    if task not in all_ids:
        close = difflib.get_close_matches(task, all_ids, n=5, cutoff=0.6)
        hint = f"close matches: {', '.join(PREFIX + c for c in close)}; " if close else ""
        raise ConfigValueError(
            f"envpool task {task!r} (from {env_id!r}) does not exist: {hint}"
            "envpool.list_all_envs() lists every task id"
        )
    return task


def option_defaults(env_id: str) -> dict[str, Any]:
    """The options :func:`make` takes for ``env_id`` and their defaults (envpool's task config,
    without what ``make`` sets itself; an Atari task's :class:`AtariOptions` in place of
    envpool's names for them): what ``--env-param`` can set on Sebulba."""
    import envpool
    from envpool.registration import registry

    task = _task(env_id)
    config = envpool.make_spec(task).config._asdict()
    out = {k: v for k, v in config.items() if k not in _MANAGED and k not in _NOT_OPTIONS}
    if registry.specs[task][0] == "envpool.atari":
        out.update(dataclasses.asdict(AtariOptions()))
    return dict(sorted(out.items()))


def make(
    env_id: str,
    *,
    num_envs: int,
    batch_size: int | None = None,
    seed: int = 0,
    num_threads: int = 0,
    **options: Any,
) -> EnvpoolEnvironment:
    """Builds ``num_envs`` envpool environments of the task in ``env_id = "envpool:<task>"``.

    Args:
      env_id: ``"envpool:"`` and an envpool task id with discrete or continuous (Box) actions
        (``CartPole-v1``, ``Acrobot-v1``, ``Breakout-v5``, ``HalfCheetah-v4``, ``Pendulum-v1``,
        ...; ``envpool.list_all_envs()`` lists them all).
      num_envs: environments in the pool.
      batch_size: ``None`` or ``num_envs`` for sync mode (``reset`` / ``step``); fewer for async
        mode (``async_reset`` / ``recv`` / ``send``), each ``recv`` returning that many envs.
      seed: envpool's seed (int32) for the whole pool.
      num_threads: envpool's worker threads (0: envpool's default).
      **options: ``max_episode_steps`` (tasks with a time limit), the Atari options of
        :class:`AtariOptions` (``-v5`` tasks only), or other settings of the task's envpool
        config under envpool's names (a MuJoCo task's ``frame_skip``, ``frame_stack``, ...).

    Raises:
      ConfigValueError: (a ``ConfigError`` and a ``ValueError``) an unknown id, a task with
        actions neither Discrete nor Box or a non-array observation, an unknown option or one
        the task does not take.
      ConfigError: a value that is not allowed.
    """
    import envpool
    from envpool.registration import registry

    task = _task(env_id)
    spec = envpool.make_spec(task)
    config = spec.config._asdict()
    with _quiet_spaces():
        action_space, observation_space = spec.action_space, spec.observation_space
    if type(action_space).__name__ not in ("Discrete", "Box"):
        raise ConfigValueError(
            f"{env_id} is not allowed: its actions are {action_space}; podracer's envpool "
            "adapter takes tasks with discrete (Discrete) or continuous (Box) actions"
        )
    if type(observation_space).__name__ != "Box":
        raise ConfigValueError(
            f"{env_id} is not allowed: its observation is {observation_space}; podracer's "
            "envpool adapter takes tasks with one array observation"
        )

    for name, value in (("num_envs", num_envs), ("seed", seed), ("num_threads", num_threads)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise ConfigError(f"{env_id}: {name}={value!r} is not allowed: give an integer")
    if num_envs < 1:
        raise ConfigError(f"{env_id}: num_envs={num_envs} is not allowed: it must be >= 1")
    if batch_size is None:
        batch_size = num_envs
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, int | np.integer)
        or not 1 <= batch_size <= num_envs
    ):
        raise ConfigError(
            f"{env_id}: batch_size={batch_size!r} is not allowed: it must be None or "
            f"num_envs={num_envs} (sync mode), or between 1 and {num_envs - 1} (async mode)"
        )
    if not -(2**31) <= seed <= _INT32_MAX:
        raise ConfigError(f"{env_id}: seed={seed} is not allowed: it must fit in int32")
    if num_threads < 0:
        raise ConfigError(f"{env_id}: num_threads={num_threads} is not allowed: it must be >= 0")

    atari = registry.specs[task][0] == "envpool.atari"
    allowed = {k for k in config if k not in _MANAGED and k not in _NOT_OPTIONS}
    allowed = sorted(allowed | set(ATARI_OPTIONS)) if atari else sorted(allowed)
    for name, value in options.items():
        if name in ATARI_OPTIONS and not atari and name not in config:
            raise ConfigValueError(
                f"{env_id}: option {name}={value!r} is not allowed: it is an option of "
                f"envpool's Atari tasks ('{PREFIX}<Game>-v5'); {task} takes: "
                f"{', '.join(allowed) or 'no options'}"
            )
        if name == "stack_num":
            raise ConfigValueError(f"{env_id}: option stack_num is not allowed: use frame_stack")
        if name in _MANAGED or name not in allowed:
            raise ConfigValueError(
                f"{env_id}: option {name}={value!r} is not allowed: {task} takes: "
                f"{', '.join(allowed) or 'no options'} (and make's num_envs, batch_size, seed, "
                "num_threads)"
            )

    kwargs = {k: v for k, v in options.items() if not (atari and k in ATARI_OPTIONS)}
    episodic_life = False
    if atari:
        atari_options = AtariOptions(**{k: v for k, v in options.items() if k in ATARI_OPTIONS})
        kwargs.update(atari_options.envpool_kwargs())
        episodic_life = atari_options.episodic_life

    time_limit = None
    if "max_episode_steps" in config:
        steps = kwargs.get("max_episode_steps", config["max_episode_steps"])
        if isinstance(steps, bool) or not isinstance(steps, int | np.integer) or steps < 1:
            raise ConfigError(
                f"{env_id}: max_episode_steps={steps!r} is not allowed: give an integer >= 1"
            )
        if not atari and "episodic_life" not in config:
            time_limit = int(steps)
            kwargs["max_episode_steps"] = _INT32_MAX  # envpool's own limit, off

    is_async = batch_size < num_envs
    # envpool returns async results this many at a time; see the module docstring
    pool_batch_size = min(batch_size, num_envs - batch_size + 1) if is_async else num_envs
    try:
        pool = envpool.make(
            task,
            env_type="gymnasium",
            num_envs=int(num_envs),
            batch_size=int(pool_batch_size),
            seed=int(seed),
            num_threads=int(num_threads),
            **kwargs,
        )
    except (TypeError, ValueError, AssertionError, RuntimeError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"{env_id}: envpool does not take the options {options}: {reason}") from e
    return EnvpoolEnvironment(
        env_id,
        pool,
        num_envs=int(num_envs),
        batch_size=int(batch_size),
        pool_batch_size=int(pool_batch_size),
        time_limit=time_limit,
        atari=atari,
        episodic_life=episodic_life,
    )
