"""gymnasium environments on the host, for Sebulba's actor threads (NumPy in, NumPy out).

:func:`make` builds a :class:`GymnasiumEnvironment` from an id ``"gymnasium:<id>"``: any id in
``gymnasium.registry`` (``gymnasium:CartPole-v1``, ``gymnasium:Pendulum-v1``, ...; an id
``module:Env-v0`` imports ``module`` first to register it) whose observation is one array
(``Box``) and whose actions are ``Discrete`` or ``Box``. Nothing here is traced or jitted; one
object belongs to one thread. Sync mode only: :meth:`GymnasiumEnvironment.reset` and
:meth:`GymnasiumEnvironment.step` over all ``num_envs`` environments, rows in env order.

The environments are ``gymnasium.make_vec(id, num_envs, vectorization_mode="sync", **options)``:
a ``SyncVectorEnv`` that steps ``gymnasium.make(id, **options)`` instances one after the other in
this thread (deterministic, no subprocesses). Every :class:`~podracer.types.TimeStep` means what
it means for podracer's JAX environments:

- **Same-step auto-reset.** The vector env runs with ``AutoresetMode.SAME_STEP`` (gymnasium >=
  1.1): when env ``i``'s episode ends at step ``t``, gymnasium resets it (unseeded, so its random
  stream goes on) within the same call; ``obs[t, i]`` is the next episode's first observation and
  ``final_obs[t, i]`` the ended episode's last one (gymnasium's ``infos["final_obs"]``).
  ``final_obs == obs`` where the episode goes on (then it is the very same array). With an older
  gymnasium (``NEXT_STEP`` only) the adapter steps and resets the vector env's sub-environments
  itself, with the same result.
- **Termination and truncation kept apart**, never both true: gymnasium's ``TimeLimit`` reports
  ``truncated`` on the time limit's last step even when that step is terminal too; such a step
  counts as *terminated* (nothing to bootstrap).
- ``reward`` is f32; ``info = EpisodeInfo(done, episode_return, episode_length)`` is tracked on the
  host per env: where ``done``, the undiscounted return (summed in f64) and the number of steps of
  the episode that ended at this step, 0 elsewhere.
- The first :meth:`~GymnasiumEnvironment.reset` seeds env ``i`` with ``seed + i`` (gymnasium's
  rule), so env ``i`` replays ``gymnasium.make(id).reset(seed=seed + i)`` exactly; later resets
  are unseeded.

**Actions.** ``Discrete(n)``: ints ``[num_envs]`` in ``0..n-1`` (``DiscreteActionSpec(n)``; a
space's ``start`` is added on the way in). ``Box`` (``Pendulum-v1``,
``MountainCarContinuous-v0``, the MuJoCo tasks where ``mujoco`` is installed): ``[num_envs,
*shape]`` finite floats (``BoundedActionSpec(shape, low, high, float32)``; a bound is one float
when it is the same everywhere), clipped to ``[low, high]`` and cast to the space's dtype on the
way in (:func:`podracer.envs.host.checks.continuous_actions`; gymnasium's MuJoCo tasks would
take out-of-bounds actions as they are).

**Observations** come in the space's dtype, except f64 (gymnasium's MuJoCo tasks), which comes as
f32 (what the network computes in); ``observation_spec`` says which.

**Options** are the keyword arguments of ``gymnasium.make``: ``max_episode_steps`` (the
``TimeLimit``) and the environment's own constructor arguments (``g=9.81`` for Pendulum, ...).

**Rendering** (``make(..., render=True)``): the environments are made with
``render_mode="rgb_array"`` and :meth:`GymnasiumEnvironment.render` returns their frames, uint8
``[num_envs, H, W, 3]`` (gymnasium's sizes: classic control 400 x 600, MuJoCo 480 x 480). The
vector env's ``SAME_STEP`` auto-reset would reset an ended env inside its ``step``, before its
last state can be drawn, so with ``render=True`` the adapter steps the sub-environments itself
(the older gymnasium's path above, the same ``TimeStep`` s) and draws an ended env's last state
before resetting it: after a step that ended an episode, that env's frame is its last state
(what ``final_obs`` shows). A MuJoCo task draws through an OpenGL context: ``MUJOCO_GL=egl``
is set where nothing was chosen before mujoco is imported
(:func:`podracer.envs.render.mujoco.prepare`), and where no context can be made ``make``
refuses in one line (:class:`~podracer.envs.render.NoRenderer`).
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

import numpy as np

from podracer.envs.host.checks import check_drawable, continuous_actions, discrete_actions
from podracer.errors import ConfigError, ConfigValueError
from podracer.types import (
    BoundedActionSpec,
    DiscreteActionSpec,
    EpisodeInfo,
    ObservationSpec,
    TimeStep,
)

PREFIX = "gymnasium:"


def _same_step_mode() -> Any:
    """gymnasium's ``AutoresetMode.SAME_STEP``, or None where gymnasium predates it (< 1.1)."""
    import gymnasium

    return getattr(getattr(gymnasium.vector, "AutoresetMode", None), "SAME_STEP", None)


def _bound(values: np.ndarray) -> float | np.ndarray:
    """A Box bound as one float when it is the same everywhere, as an array otherwise."""
    values = np.asarray(values)
    flat = values.reshape(-1)
    if flat.size and np.all(flat == flat[0]):
        return float(flat[0])
    return values.copy()


def _action_spec(env_id: str, space: Any) -> DiscreteActionSpec | BoundedActionSpec:
    import gymnasium

    if isinstance(space, gymnasium.spaces.Discrete):
        return DiscreteActionSpec(int(space.n))
    if isinstance(space, gymnasium.spaces.Box):
        return BoundedActionSpec(
            tuple(int(d) for d in space.shape),
            _bound(space.low),
            _bound(space.high),
            np.dtype(np.float32),  # podracer's actions; cast to the space's dtype on the way in
        )
    raise ConfigValueError(
        f"{env_id} is not allowed: its actions are {space}; podracer's gymnasium adapter takes "
        "Discrete or Box action spaces"
    )


class GymnasiumEnvironment:
    """``num_envs`` gymnasium environments with podracer's ``TimeStep`` semantics; build with
    :func:`make`.

    Attributes: ``id`` (``"gymnasium:<id>"``), ``num_envs``, ``batch_size`` (``num_envs``),
    ``is_async`` (False), ``observation_spec`` (one env's observation), ``action_spec``. Methods:
    :meth:`reset`, :meth:`step`, :meth:`close` (and :meth:`render`, made with ``render=True``).
    See the module docstring for the semantics.

    Args:
      env_id: the id, for messages.
      vector_env: a gymnasium ``SyncVectorEnv``; the adapter owns it (and closes it).
      seed: the first reset's seed (env ``i`` gets ``seed + i``).
      same_step: the vector env auto-resets in the same step (``AutoresetMode.SAME_STEP``);
        False: the adapter steps and resets ``vector_env.envs`` itself.
      render: the sub-environments were made with ``render_mode="rgb_array"``
        (:meth:`render`); the adapter steps them itself.
    """

    def __init__(
        self,
        env_id: str,
        vector_env: Any,
        *,
        seed: int = 0,
        same_step: bool = True,
        render: bool = False,
    ):
        import gymnasium

        self.id = env_id
        self.num_envs = int(vector_env.num_envs)
        self.batch_size = self.num_envs
        self.is_async = False
        self._vec = vector_env
        self._seed = int(seed)
        self._same_step = same_step and not render
        self._render = render
        self._final_frames: dict[int, np.ndarray] = {}  # env -> its ended episode's last frame
        self._closed = False

        obs_space = vector_env.single_observation_space
        if not isinstance(obs_space, gymnasium.spaces.Box):
            raise ConfigValueError(
                f"{env_id} is not allowed: its observation is {obs_space}; podracer's gymnasium "
                "adapter takes environments with one array observation (a Box space)"
            )
        obs_dtype = np.dtype(obs_space.dtype)
        if obs_dtype == np.float64:  # MuJoCo: f32, what the network computes in
            obs_dtype = np.dtype(np.float32)
        self.observation_spec = ObservationSpec(tuple(int(d) for d in obs_space.shape), obs_dtype)
        action_space = vector_env.single_action_space
        self.action_spec = _action_spec(env_id, action_space)
        self._action_dtype = np.dtype(action_space.dtype)  # what the environment takes
        self._action_start = int(getattr(action_space, "start", 0))  # Discrete(n, start)

        self._return = np.zeros(self.num_envs, np.float64)  # running episode's return
        self._length = np.zeros(self.num_envs, np.int64)  # running episode's steps
        self._started = False
        self._seeded = False

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")

    def _check_actions(self, actions: Any) -> np.ndarray:
        actions = np.asarray(actions)
        n = self.num_envs
        spec = self.action_spec
        if isinstance(spec, DiscreteActionSpec):
            actions = discrete_actions(self.id, actions, n, spec.num_actions)
            return actions.astype(np.int64) + self._action_start
        actions = continuous_actions(self.id, actions, n, spec)
        return actions.astype(self._action_dtype, copy=False)

    def reset(self) -> TimeStep:
        """Resets every environment; the first call seeds env ``i`` with ``seed + i``. All fields
        ``[num_envs, ...]``; reward 0, no flags."""
        self._check_open()
        seed = None if self._seeded else self._seed
        obs, _ = self._vec.reset(seed=seed)
        self._seeded = True
        obs = np.asarray(obs, self.observation_spec.dtype)
        self._return[:] = 0.0
        self._length[:] = 0
        self._started = True
        self._final_frames = {}
        n = self.num_envs
        false = np.zeros(n, bool)
        info = EpisodeInfo(false.copy(), np.zeros(n, np.float32), np.zeros(n, np.int32))
        return TimeStep(obs, np.zeros(n, np.float32), false, false.copy(), obs, info)

    def step(self, actions: np.ndarray) -> TimeStep:
        """Steps every environment with ``actions`` (int ``[num_envs]`` for discrete actions,
        ``[num_envs, *shape]`` for Box actions).

        Returns a ``TimeStep`` with fields ``[num_envs, ...]`` in env order; environments whose
        episode ended are already reset (``obs``), ``final_obs`` keeps their last observation.
        """
        self._check_open()
        if not self._started:
            raise RuntimeError(f"{self.id}: call reset() before step()")
        actions = self._check_actions(actions)
        if self._same_step:
            obs, reward, terminated, truncated, infos = self._vec.step(actions)
            obs = np.asarray(obs, self.observation_spec.dtype)
            terminated = np.asarray(terminated, bool)
            truncated = np.asarray(truncated, bool)
            final_obs = obs
            if "_final_obs" in infos:
                ended = np.flatnonzero(infos["_final_obs"])
                final_obs = obs.copy()
                for i in ended:
                    final_obs[i] = np.asarray(infos["final_obs"][i], obs.dtype)
        else:
            obs, final_obs, reward, terminated, truncated = self._step_sub_envs(actions)
        truncated = truncated & ~terminated
        done = terminated | truncated

        self._return += np.asarray(reward, np.float64)
        self._length += 1
        info = EpisodeInfo(
            done=done,
            episode_return=np.where(done, self._return, 0.0).astype(np.float32),
            episode_length=np.where(done, self._length, 0).astype(np.int32),
        )
        self._return[done] = 0.0
        self._length[done] = 0
        reward = np.asarray(reward, np.float32)
        return TimeStep(obs, reward, terminated, truncated, final_obs, info)

    def _step_sub_envs(self, actions: np.ndarray) -> tuple[np.ndarray, ...]:
        """Same-step auto-reset for a gymnasium without ``AutoresetMode.SAME_STEP``: steps the
        sync vector env's sub-environments one by one and resets those that ended."""
        n = self.num_envs
        obs, final_obs = [], []
        reward = np.zeros(n, np.float64)
        terminated = np.zeros(n, bool)
        truncated = np.zeros(n, bool)
        self._final_frames = {}
        for i, env in enumerate(self._vec.envs):
            last, reward[i], terminated[i], truncated[i], _ = env.step(actions[i])
            final_obs.append(np.asarray(last))
            if terminated[i] or truncated[i]:
                if self._render:  # the ended episode's last state, before the reset
                    self._final_frames[i] = self._frame(env)
                last, _ = env.reset()
            obs.append(np.asarray(last))
        obs = np.stack(obs).astype(self.observation_spec.dtype, copy=False)
        final_obs = (
            np.stack(final_obs).astype(obs.dtype, copy=False)
            if (terminated | truncated).any()
            else obs
        )
        return obs, final_obs, reward, terminated, truncated

    def render(self) -> np.ndarray:
        """The frames of the environments (made with ``render=True``): uint8
        ``[num_envs, H, W, 3]``, each environment's ``render()`` in ``rgb_array`` mode. After a
        step that ended an episode, that env's frame is the ended episode's last state (what
        ``final_obs`` shows), not the next episode's first.

        Raises:
          NoRenderer: made without ``render=True`` (one line).
        """
        self._check_open()
        check_drawable(self.id, self._render, self._started)
        return np.stack(
            [
                self._final_frames[i] if i in self._final_frames else self._frame(env)
                for i, env in enumerate(self._vec.envs)
            ]
        )

    def _frame(self, env: Any) -> np.ndarray:
        """``env.render()`` as uint8 ``[H, W, 3]``; a :class:`NoRenderer` where gymnasium
        cannot draw (pygame missing for classic control, ...)."""
        import gymnasium

        try:
            frame = np.asarray(env.render())
        except (ImportError, RuntimeError, gymnasium.error.Error) as error:
            from podracer.envs.render import NoRenderer

            reason = str(error).strip().splitlines()
            raise NoRenderer(
                f"{self.id}: gymnasium cannot draw it "
                f"({reason[0] if reason else type(error).__name__})"
            ) from None
        if frame.ndim == 3 and frame.shape[-1] == 4:
            frame = frame[..., :3]
        return np.ascontiguousarray(frame, np.uint8)

    def close(self) -> None:
        """Closes the gymnasium environments; this object cannot be used afterwards."""
        if not self._closed:
            self._closed = True
            self._vec.close()

    def __repr__(self) -> str:
        return f"GymnasiumEnvironment({self.id!r}, num_envs={self.num_envs})"


def _find_id(env_id: str, name: str) -> str:
    """``name`` checked against gymnasium's registry (``module:Env-v0`` imports ``module``)."""
    import gymnasium

    module, _, short = name.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ConfigValueError(
                f"gymnasium environment {name!r} (from {env_id!r}) is not allowed: its module "
                f"{module!r} cannot be imported ({e})"
            ) from e
    if short in gymnasium.registry:
        return short
    all_ids = list(gymnasium.registry)
    close = difflib.get_close_matches(short, all_ids, n=5, cutoff=0.6)
    hint = f"close matches: {', '.join(PREFIX + c for c in close)}; " if close else ""
    raise ConfigValueError(
        f"gymnasium environment {short!r} (from {env_id!r}) does not exist: {hint}"
        "gymnasium.registry lists every registered id"
    )


def option_defaults(env_id: str) -> dict[str, Any]:
    """The keyword arguments of ``gymnasium.make`` for ``env_id`` that have a default, and the
    defaults: ``max_episode_steps``, the keyword arguments of its registration and those of its
    constructor (what ``--env-param`` can set on Sebulba). A constructor that takes ``**kwargs``
    may take more; name them in ``env_options`` of the library's ``train``."""
    import gymnasium
    from gymnasium.envs.registration import load_env_creator

    from podracer.envs.options import constructor_defaults

    if not isinstance(env_id, str) or not env_id.startswith(PREFIX):
        raise ConfigValueError(
            f"environment id {env_id!r} is not allowed: gymnasium ids look like "
            f"'{PREFIX}<id>', e.g. '{PREFIX}CartPole-v1' or '{PREFIX}Pendulum-v1'"
        )
    spec = gymnasium.spec(_find_id(env_id, env_id[len(PREFIX) :]))
    entry = spec.entry_point
    try:
        creator = load_env_creator(entry) if isinstance(entry, str) else entry
    except (ImportError, AttributeError, gymnasium.error.Error):
        creator = None
    out = {} if creator is None else constructor_defaults(creator)
    out.update(spec.kwargs)
    out["max_episode_steps"] = spec.max_episode_steps
    return dict(sorted(out.items()))


def make(
    env_id: str, *, num_envs: int, seed: int = 0, render: bool = False, **options: Any
) -> GymnasiumEnvironment:
    """Builds ``num_envs`` gymnasium environments of ``env_id = "gymnasium:<id>"`` (sync mode).

    Args:
      env_id: ``"gymnasium:"`` and a registered gymnasium id (``CartPole-v1``, ``Pendulum-v1``,
        ...; ``gymnasium.registry`` lists them), or ``module:Env-v0`` to import ``module`` first.
      num_envs: environments in the vector env.
      seed: the first reset's seed; env ``i`` gets ``seed + i``.
      render: the environments draw themselves: ``render()`` returns uint8
        ``[num_envs, H, W, 3]`` (:meth:`GymnasiumEnvironment.render`); False changes nothing.
      **options: keyword arguments of ``gymnasium.make``: ``max_episode_steps`` or the
        environment's constructor arguments.

    Raises:
      ConfigValueError: (a ``ConfigError`` and a ``ValueError``) an unknown id, an observation
        that is not a Box, actions neither Discrete nor Box.
      ConfigError: a ``num_envs``, ``seed`` or option that is not allowed, or an environment that
        gymnasium cannot build (a missing dependency).
      NoRenderer: ``render=True`` for a MuJoCo task where no OpenGL context can be made (one
        line).
    """
    if not isinstance(env_id, str) or not env_id.startswith(PREFIX):
        raise ConfigValueError(
            f"environment id {env_id!r} is not allowed: gymnasium ids look like "
            f"'{PREFIX}<id>', e.g. '{PREFIX}CartPole-v1' or '{PREFIX}Pendulum-v1'"
        )
    for name, value in (("num_envs", num_envs), ("seed", seed)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise ConfigError(f"{env_id}: {name}={value!r} is not allowed: give an integer")
    if num_envs < 1:
        raise ConfigError(f"{env_id}: num_envs={num_envs} is not allowed: it must be >= 1")
    if seed < 0:
        raise ConfigError(f"{env_id}: seed={seed} is not allowed: gymnasium's seeds are >= 0")
    steps = options.get("max_episode_steps")
    if steps is not None and (
        isinstance(steps, bool) or not isinstance(steps, int | np.integer) or steps < 1
    ):
        raise ConfigError(
            f"{env_id}: option max_episode_steps={steps!r} is not allowed: give an integer >= 1"
        )

    if not isinstance(render, bool | np.bool_):
        raise ConfigError(f"{env_id}: render={render!r} is not allowed: give True or False")

    import gymnasium

    gym_id = _find_id(env_id, env_id[len(PREFIX) :])
    same_step = _same_step_mode()
    vector_kwargs = {} if same_step is None else {"autoreset_mode": same_step}
    kwargs = {k: int(v) if k == "max_episode_steps" else v for k, v in options.items()}
    if render:
        _prepare_render(env_id, gym_id)
        kwargs["render_mode"] = "rgb_array"
    try:
        vector_env = gymnasium.make_vec(
            gym_id,
            num_envs=int(num_envs),
            vectorization_mode="sync",
            vector_kwargs=vector_kwargs,
            **kwargs,
        )
    except (TypeError, ValueError, AssertionError, ImportError, gymnasium.error.Error) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        if options:
            given = ", ".join(f"{k}={v!r}" for k, v in options.items())
            raise ConfigError(
                f"{env_id}: gymnasium does not take the options {given}: {reason}"
            ) from e
        raise ConfigError(f"{env_id}: gymnasium cannot build it: {reason}") from e
    try:
        return GymnasiumEnvironment(
            env_id, vector_env, seed=int(seed), same_step=same_step is not None, render=render
        )
    except Exception:
        vector_env.close()
        raise


def _prepare_render(env_id: str, gym_id: str) -> None:
    """Before a task is made to render: a MuJoCo task (its entry point in a ``mujoco``
    module) checks that an OpenGL context can be made, ``MUJOCO_GL=egl`` where nothing was
    chosen (:func:`podracer.envs.render.mujoco.require_gl`)."""
    import gymnasium

    entry = gymnasium.spec(gym_id).entry_point
    module = entry if isinstance(entry, str) else getattr(entry, "__module__", "")
    if "mujoco" not in module.split(":")[0].split("."):
        return
    from podracer.envs.render.mujoco import require_gl

    require_gl(f"gymnasium's MuJoCo task {env_id}")
