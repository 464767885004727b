"""MuJoCo Playground's environments (MJX physics) behind podracer's
:class:`~podracer.types.Environment`.

Ids are ``playground:<name>`` with ``<name>`` one of the DeepMind Control Suite or locomotion
environments of Playground's registry (:func:`names`: ``playground:CartpoleBalance``,
``playground:CheetahRun``, ``playground:WalkerWalk``, ``playground:Go1JoystickFlatTerrain``,
...; its manipulation environments are not adapted). Keyword arguments of
:func:`podracer.envs.make`:

- ``episode_length`` (default: the environment's ``config.episode_length``, 1000 for most): the
  time limit, counted in Playground steps as its training wrapper (brax's ``EpisodeWrapper``)
  counts it, ``action_repeat`` per podracer step; reaching it is a truncation.
- ``action_repeat`` (default: the config's, 1 everywhere): each action is applied
  ``action_repeat`` times and the rewards summed. Unlike brax's ``EpisodeWrapper``, which steps on
  past a termination, the repeats stop there: the state stays the terminal one and no more reward
  is added.
- ``config_overrides``: a dict of the environment's config values (flattened keys, as
  ``registry.load`` takes them: ``{"ctrl_dt": 0.02, "reward_config.scales.tracking_lin_vel":
  2.0}``); an unknown key is a :class:`~podracer.errors.ConfigValueError`.
- ``impl`` (default ``"jax"``): MJX's implementation. Playground's configs ask for ``"warp"``
  (NVIDIA Warp kernels, fast on a GPU); podracer uses MJX's pure-JAX one, which runs two orders
  of magnitude faster on a CPU (CartpoleBalance alone, 64 environments under ``jit(vmap)`` on
  2 cores: 180k-400k steps/s against 3k-4k) and compiles without building kernels.
  ``impl="warp"`` (or ``config_overrides={"impl": "warp"}``) is refused on a CPU: there
  (mujoco-mjx 3.17, warp-lang 1.19) a Warp state selected between a fresh reset and a step
  inside one vmapped function, as the same-step auto-reset does, leaks a tracer out of MJX's
  Warp bindings (``UnexpectedTracerError`` when the rollout is traced; Playground's own wrapper
  resets in a separate ``vmap``). On a GPU it is passed on, untried.
- ``observation_key`` (default ``"state"``): for the environments whose observation is a dict
  (the locomotion tasks: ``{"state": ..., "privileged_state": ...}``, the second for an
  asymmetric critic), the entry the agent gets, as an array; ``None`` gives the whole dict
  (a dict observation, :func:`~podracer.envs.jax.base.observation_spec_of`). Environments with an
  array observation ignore it.

Observations are f32 arrays ``[observation_size]`` (or the dict above). Actions are continuous:
f32 ``[action_size]`` within ``[-1, 1]`` (``BoundedActionSpec``), what Playground's own training
feeds them (a tanh-squashed policy). The Control Suite's actuators have ``ctrlrange`` ``[-1, 1]``
and MJX clips the controls to it; the locomotion tasks map ``[-1, 1]`` to motor targets
around a default pose (``default_pose + action_scale * action``), which MJX clips to the
actuators' ranges where they have one. No masks. Playground environments
have no parameters: ``default_params`` is ``()`` (randomness comes from the key).

Termination and truncation: Playground's ``state.done`` is the termination (a Control Suite
task ends only when the physics blows up, a NaN in ``qpos`` or ``qvel``; a locomotion task also
when the robot falls, per task). ``truncated`` is the time limit above reached without a
termination, so never both. Auto-reset is done here, at the step that ends an episode, with a
fresh ``env.reset`` (Playground's ``BraxAutoResetWrapper`` would return to one cached first
state): ``step_key, reset_key = jax.random.split(key)``; Playground's step takes no key (its
randomness is the ``info["rng"]`` kept in the state), the reset gets ``reset_key``, and
``final_obs`` keeps the observation before the reset. The adapter's state is
:class:`PlaygroundState`: Playground's ``State`` and the steps of the episode so far.

Inside ``jax.shard_map`` (Anakin, sweeps, populations): MJX and Playground build loop carries
and ``lax.cond`` branches from fresh constants (the solver's line search starts from
``swap=True``; ``qfrc_gravcomp`` is a new zero array), which a ``shard_map`` that checks varying
manual axes (JAX 0.10's default, ``check_vma=True``) refuses against the per-device state
("cond branches must have equal output types", "scan body function carry input and carry output
must have equal types"). The environment says ``check_vma = False``, so Anakin (and the sweeps
and populations) run their ``shard_map`` unchecked, where reset and step give the values of
``jit`` / ``vmap`` (tested); in a checked ``shard_map`` they raise a one-line
:class:`~podracer.errors.ConfigValueError` that says so.

Locomotion environments need the MuJoCo Menagerie robot models, which Playground clones with
git into its package directory on first use; the adapter does not start that clone: without
them, making such an id is a :class:`~podracer.errors.ConfigValueError` with the command that
fetches them.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from flax import struct

from podracer.envs.jax import base
from podracer.errors import ConfigValueError
from podracer.types import BoundedActionSpec

PREFIX = "playground:"

KNOWN: tuple[str, ...] = (
    "AcrobotSwingup",
    "AcrobotSwingupSparse",
    "BallInCup",
    "CartpoleBalance",
    "CartpoleBalanceSparse",
    "CartpoleSwingup",
    "CartpoleSwingupSparse",
    "CheetahRun",
    "FingerSpin",
    "FingerTurnEasy",
    "FingerTurnHard",
    "FishSwim",
    "HopperHop",
    "HopperStand",
    "HumanoidStand",
    "HumanoidWalk",
    "HumanoidRun",
    "PendulumSwingup",
    "PointMass",
    "ReacherEasy",
    "ReacherHard",
    "SwimmerSwimmer6",
    "WalkerRun",
    "WalkerStand",
    "WalkerWalk",
)
"""The Control Suite environments of Playground 0.2.0, each made and checked here: actuators
within ``[-1, 1]``, reset and step traced inside ``shard_map`` with ``impl="jax"``. The
locomotion ones (:func:`names`) are adapted too but were not run: their robot models
(MuJoCo Menagerie) were not available where the adapter was written."""

DEFAULT_IMPL = "jax"


def names() -> tuple[str, ...]:
    """The Control Suite and locomotion environments of Playground's registry
    (``mujoco_playground`` must be installed)."""
    from mujoco_playground._src import dm_control_suite, locomotion

    return (*dm_control_suite.ALL_ENVS, *locomotion.ALL_ENVS)


def make(env_id: str, **kwargs: Any) -> PlaygroundEnvironment:
    """``playground:<name>`` with the options of the module docstring (``episode_length``,
    ``action_repeat``, ``config_overrides``, ``impl``, ``observation_key``)."""
    base.require("mujoco_playground", env_id)
    name = env_id.removeprefix(PREFIX)
    base.check_name(env_id, name, names(), PREFIX)
    return PlaygroundEnvironment(env_id, **kwargs)


@struct.dataclass
class PlaygroundState:
    """Playground's ``State`` of one environment and the steps of its episode so far (in
    Playground steps: ``action_repeat`` per podracer step)."""

    env_state: Any
    steps: jax.Array  # i32 []


def _select(done: jax.Array, on_done: Any, otherwise: Any) -> Any:
    """:func:`base.select_tree`, each leaf in ``otherwise`` 's dtype."""
    picked = base.select_tree(done, on_done, otherwise)
    return jax.tree.map(
        lambda p, o: p if p.dtype == o.dtype else p.astype(o.dtype), picked, otherwise
    )


class PlaygroundEnvironment(base.PhysicsAdapter):
    """One Playground environment with podracer's ``TimeStep`` (see the module docstring)."""

    check_vma = False  # MJX's solver and Playground's loops fail a checked shard_map
    library = "MuJoCo Playground"
    state_class = PlaygroundState

    def __init__(
        self,
        env_id: str,
        episode_length: int | None = None,
        action_repeat: int | None = None,
        config_overrides: dict[str, Any] | None = None,
        impl: str | None = None,
        observation_key: str | None = "state",
    ):
        from mujoco_playground import registry

        name = env_id.removeprefix(PREFIX)
        overrides = dict(config_overrides or {})
        if impl is not None and overrides.get("impl", impl) != impl:
            raise ConfigValueError(
                f"{env_id}: impl={impl!r} and config_overrides['impl']="
                f"{overrides['impl']!r} disagree; give one"
            )
        overrides["impl"] = overrides.get("impl", impl or DEFAULT_IMPL)
        config = registry.get_default_config(name).lock()
        try:
            config.update_from_flattened_dict(overrides)
        except (KeyError, AttributeError, TypeError, ValueError) as error:
            reason = str(error.args[0] if error.args else error).split(" Other fields")[0]
            raise ConfigValueError(
                f"{env_id}: config_overrides {overrides!r} do not fit its config: {reason}"
            ) from None
        if str(config.impl) not in ("jax", "warp"):
            raise ConfigValueError(f"{env_id}: impl must be 'jax' or 'warp', not {config.impl!r}")
        if str(config.impl) == "warp" and jax.default_backend() == "cpu":
            raise ConfigValueError(
                f"{env_id}: impl='warp' does not run on a CPU here: MJX's Warp bindings leak a "
                "tracer when podracer's auto-reset selects between a reset and a step inside "
                "one vmapped step; use impl='jax' (the default, and much the faster on a CPU)"
            )
        if episode_length is None:
            episode_length = config.episode_length
        if action_repeat is None:
            action_repeat = config.action_repeat
        self.episode_length, self.action_repeat = int(episode_length), int(action_repeat)
        if self.episode_length < 1 or self.action_repeat < 1:
            raise ConfigValueError(
                f"{env_id}: episode_length and action_repeat must be at least 1 (got "
                f"{self.episode_length} and {self.action_repeat})"
            )
        self.impl = str(config.impl)
        self.observation_key = observation_key
        _check_menagerie(env_id, name)
        super().__init__(env_id, registry.load(name, config_overrides=overrides))

    def _specs(self, params: Any) -> tuple[Any, BoundedActionSpec]:
        obs = jax.eval_shape(self._env.reset, jax.random.key(0)).obs
        size = int(self._env.action_size)
        low, high = np.full(size, -1.0, np.float32), np.full(size, 1.0, np.float32)
        action_spec = BoundedActionSpec((size,), low, high, "float32")
        return base.observation_spec_of(self._observation(obs)), action_spec

    def _observation(self, obs: Any) -> Any:
        """The agent's observation of Playground's (an array, or a dict's entry or whole)."""
        if not isinstance(obs, dict) or self.observation_key is None:
            return dict(obs) if isinstance(obs, dict) else obs
        if self.observation_key not in obs:
            raise ConfigValueError(
                f"{self.id}: observation_key {self.observation_key!r} is not in its "
                f"observation (keys {sorted(obs)}); give one of them, or None for the dict"
            )
        return obs[self.observation_key]

    def _fresh(self, key) -> Any:
        return base.strong(self._traced(self._env.reset, key))

    def _step_once(self, env_state: Any, action: jax.Array) -> Any:
        # A copy of the state's containers: Playground's steps write into state.info and
        # state.metrics, which must stay the previous state's when a repeat is frozen.
        env_state = jax.tree.map(lambda x: x, env_state)
        return base.strong(self._traced(self._env.step, env_state, action))

    def _select(self, done: jax.Array, on_done: Any, otherwise: Any) -> Any:
        return _select(done, on_done, otherwise)


def _check_menagerie(env_id: str, name: str) -> None:
    """A :class:`ConfigValueError` for a locomotion id when the MuJoCo Menagerie models are
    not where Playground looks for them (Playground would start a git clone)."""
    from mujoco_playground._src import locomotion, mjx_env

    if name not in locomotion.ALL_ENVS or mjx_env.MENAGERIE_PATH.exists():
        return
    raise ConfigValueError(
        f"{env_id} needs the MuJoCo Menagerie robot models, which are not at "
        f"{mjx_env.MENAGERIE_PATH}: fetch them once (git and network access) with python -c "
        "'from mujoco_playground._src import mjx_env; mjx_env.ensure_menagerie_exists()'"
    )
