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

**Rendering** (``render=True``, sync mode): :meth:`EnvpoolEnvironment.render` returns envpool's
frames of every env, uint8 ``[num_envs, H, W, 3]`` (classic control 400 x 600, Atari the full
210 x 160 screen whatever ``img_height`` / ``img_width``, MuJoCo 480 x 480); after a step that
ended an episode, that env's frame is its last state, drawn before the follow-up call resets
it. envpool draws its MuJoCo tasks with MuJoCo but makes no OpenGL context (without one the
process ends): the adapter makes one current in the drawing thread
(:func:`podracer.envs.render.mujoco.make_current`, EGL on a headless machine) or refuses at
``make`` with a one-line :class:`~podracer.envs.render.NoRenderer`.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

import numpy as np

from podracer.envs.host.envpool_env import EnvpoolEnvironment, quiet_spaces
from podracer.errors import ConfigError, ConfigValueError
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


def _check_int(obj: Any, field: str) -> None:
    value = getattr(obj, field)
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ConfigError(f"{type(obj).__name__}.{field}={value!r} is not allowed: give an integer")


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
    render: bool = False,
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
      render: the environments draw themselves (sync mode): ``render()`` returns uint8
        ``[num_envs, H, W, 3]`` (:meth:`EnvpoolEnvironment.render`); False changes nothing.
      **options: ``max_episode_steps`` (tasks with a time limit), the Atari options of
        :class:`AtariOptions` (``-v5`` tasks only), or other settings of the task's envpool
        config under envpool's names (a MuJoCo task's ``frame_skip``, ``frame_stack``, ...).

    Raises:
      ConfigValueError: (a ``ConfigError`` and a ``ValueError``) an unknown id, a task with
        actions neither Discrete nor Box or a non-array observation, an unknown option or one
        the task does not take.
      ConfigError: a value that is not allowed.
      NoRenderer: ``render=True`` for a MuJoCo task where no OpenGL context can be made, or
        in async mode (one line).
    """
    import envpool
    from envpool.registration import registry

    task = _task(env_id)
    spec = envpool.make_spec(task)
    config = spec.config._asdict()
    _check_spaces(env_id, spec)
    batch_size = _check_sizes(env_id, num_envs, batch_size, seed, num_threads)
    atari = registry.specs[task][0] == "envpool.atari"
    _check_options(env_id, task, config, atari, options)
    kwargs, episodic_life, time_limit = _task_kwargs(env_id, config, atari, options)
    needs_gl = _check_render(env_id, registry.specs[task][0], render, batch_size < num_envs)
    if render:
        kwargs["render_mode"] = "rgb_array"

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
        render=render,
        needs_gl=needs_gl,
    )


def _check_render(env_id: str, module: str, render: Any, is_async: bool) -> bool:
    """Whether drawing the task needs an OpenGL context of this thread (its MuJoCo tasks,
    which envpool draws with MuJoCo but makes no context for); a :class:`NoRenderer` where
    ``render`` cannot be had, a :class:`ConfigError` for a ``render`` that is not a bool."""
    if not isinstance(render, bool | np.bool_):
        raise ConfigError(f"{env_id}: render={render!r} is not allowed: give True or False")
    if not render:
        return False
    from podracer.envs.render import NoRenderer

    if is_async:
        raise NoRenderer(
            f"{env_id}: render=True is for sync mode (batch_size None or num_envs): an async "
            "pool's environments step while others are drawn"
        )
    if not module.startswith("envpool.mujoco"):
        return False
    from podracer.envs.render.mujoco import require_gl

    require_gl(f"envpool's MuJoCo task {env_id}")
    return True


def _check_spaces(env_id: str, spec: Any) -> None:
    """A :class:`ConfigValueError` for a task whose actions are neither Discrete nor Box, or
    whose observation is not one array."""
    with quiet_spaces():
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


def _check_sizes(
    env_id: str, num_envs: int, batch_size: int | None, seed: int, num_threads: int
) -> int:
    """The sizes and the seed checked (a :class:`ConfigError` for one not allowed); the batch
    size (``num_envs`` for None: sync mode)."""
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
    return batch_size


def _check_options(
    env_id: str, task: str, config: dict[str, Any], atari: bool, options: dict[str, Any]
) -> None:
    """A :class:`ConfigValueError` for an option the task does not take."""
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


def _task_kwargs(
    env_id: str, config: dict[str, Any], atari: bool, options: dict[str, Any]
) -> tuple[dict[str, Any], bool, int | None]:
    """``(kwargs, episodic_life, time_limit)``: the options under envpool's names (an Atari
    task's :class:`AtariOptions` translated), whether a lost life ends the learner's episode,
    and the host's time limit (None: envpool's flags as they are; the module docstring)."""
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
    return kwargs, episodic_life, time_limit
