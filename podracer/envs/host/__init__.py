"""Host environments for Sebulba: NumPy in, NumPy out, stepped by Python actor threads.

Every one implements :class:`podracer.types.HostEnvironment` (sync or async, said by
``is_async``), and :func:`make` builds one by id, with the host maker of the id's family
(:mod:`podracer.envs.registry`) or, for a family that has none, as a JAX environment on the host:

- ``envpool:<task>`` — :class:`~podracer.envs.host.envpool_env.EnvpoolEnvironment` (sync and async
  modes, Atari options, MuJoCo and continuous classic control);
- ``gymnasium:<id>`` — :class:`~podracer.envs.host.gymnasium.GymnasiumEnvironment`, a gymnasium
  vector environment (sync mode);
- any JAX environment id (``catch``, ``gymnax:<name>``, a registered id, ``module:attribute``) —
  :class:`~podracer.envs.host.jax_env.JaxHostEnvironment`, the JAX environment stepped on the
  host CPU (sync mode).

Whatever the kind, the ``TimeStep`` s mean what they mean for podracer's JAX environments
(same-step auto-reset, ``final_obs``, terminated and truncated kept apart, episode statistics in
``info``), and actions are checked by the ``action_spec``'s kind
(:mod:`podracer.envs.host.checks`): a ``DiscreteActionSpec`` takes ints ``[num_envs]`` in
``0..num_actions - 1``; a ``BoundedActionSpec`` (``envpool:HalfCheetah-v4`` and the other MuJoCo
tasks, ``envpool:Pendulum-v1``, ``gymnasium:Pendulum-v1``, a continuous JAX environment) takes
finite floats ``[num_envs, *shape]`` and clips them to ``[low, high]``. f64 observations (MuJoCo)
come as f32.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from podracer.envs import registry
from podracer.envs.factory import make_with_options, param_defaults
from podracer.envs.host.envpool import AtariOptions
from podracer.envs.host.envpool_env import EnvpoolEnvironment
from podracer.envs.host.jax_env import JaxHostEnvironment
from podracer.envs.options import EnvOptions, as_options, typed_params
from podracer.errors import ConfigValueError
from podracer.types import HostEnvironment


def make(
    env_id: str,
    *,
    num_envs: int,
    batch_size: int | None = None,
    env_options: EnvOptions | Mapping[str, Any] | None = None,
    evaluation: bool = False,
    **options: Any,
) -> HostEnvironment:
    """THE factory of host environments: ``num_envs`` host environments of ``env_id`` (a
    :class:`HostEnvironment`) with a run's ``env_options``
    (:class:`~podracer.envs.EnvOptions`); ``batch_size < num_envs`` asks for async mode
    (envpool only).

    ``env_options.params`` are keyword arguments of an envpool or gymnasium environment's
    ``make``, typed by their defaults (:func:`podracer.envs.factory.param_defaults`), or the
    ``default_params`` fields of a JAX environment; ``env_options.observe`` masks the
    observations (:class:`~podracer.envs.host.observe.ObservedHostEnvironment`, on device for a
    JAX environment). ``options`` go to the environment kind's own ``make`` as they are:
    ``seed`` for every kind, ``num_threads`` and the task's settings for envpool
    (:func:`podracer.envs.host.envpool.make`), gymnasium's keyword arguments for gymnasium
    (:func:`podracer.envs.host.gymnasium.make`).

    Args:
      env_id: ``"envpool:<task>"``, ``"gymnasium:<id>"`` or a JAX environment's id.
      num_envs: environments in the batch.
      batch_size: envpool's async batch (``recv`` returns this many); None or ``num_envs``:
        sync mode.
      env_options: the run's :class:`~podracer.envs.EnvOptions` (or a mapping of its
        ``params``).
      evaluation: a JAX environment steps with its evaluation params
        (:func:`podracer.core.evaluation.evaluation_params`).
      **options: the kind's own ``make`` keywords (``seed``, ``num_threads``, a task's
        settings).

    Returns:
      The :class:`~podracer.types.HostEnvironment`.

    Raises:
      ConfigValueError: async mode for a kind that has none, or options a JAX environment
        does not take.
    """
    env_options = as_options(env_options)
    family = registry.family_of(env_id)
    if family is not None and family.host:
        if env_options.params:
            params = typed_params(env_id, env_options.param_dict, param_defaults(env_id))
            options = {**options, **params}
        if family.host_async:
            options["batch_size"] = batch_size
        else:
            _check_sync(env_id, num_envs, batch_size)
            options.pop("num_threads", None)  # an async kind's; the others step on one thread
        env = registry.load(family.host)(env_id, num_envs=num_envs, **options)
        return _observed(env, env_options)
    _check_sync(env_id, num_envs, batch_size)
    seed = options.pop("seed", 0)
    options.pop("num_threads", None)
    if options:
        raise ConfigValueError(
            f"environment options {sorted(options)} are not allowed for {env_id!r}: they apply "
            "to envpool and gymnasium ids; a JAX environment's parameters are "
            "env_options.params (--env-param)"
        )
    env = make_with_options(env_id, env_options)
    return JaxHostEnvironment(env, num_envs, seed=seed, evaluation=evaluation)


def _check_sync(env_id: str, num_envs: int, batch_size: int | None) -> None:
    """A :class:`ConfigValueError` for async mode asked of a kind that has none."""
    if batch_size is not None and batch_size != num_envs:
        raise ConfigValueError(
            f"async mode (batch_size={batch_size} < num_envs={num_envs}) needs an envpool "
            f"environment, not {env_id!r}"
        )


def _observed(env: HostEnvironment, env_options: EnvOptions) -> HostEnvironment:
    """``env`` with ``env_options.observe``'s mask, if any (closed when the mask is refused)."""
    if not env_options.observe:
        return env
    from podracer.envs.host.observe import ObservedHostEnvironment

    try:
        return ObservedHostEnvironment(env, env_options.observe)
    except Exception:
        env.close()
        raise


__all__ = ["AtariOptions", "EnvpoolEnvironment", "make"]
