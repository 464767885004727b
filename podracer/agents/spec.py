"""What an agent file exports: one :class:`AgentSpec`, and the registry that finds it.

An agent is one file: its frozen config dataclass, ``make_agent(config, action_spec,
num_updates) -> Agent``, ``make_optimizer(config, num_updates)`` and one ``SPEC =
AgentSpec(...)`` that ties them to the rest (default environment, loop sizes that suit it, the
hyper-parameters sweeps and populations may trace). :func:`register` adds a spec; :func:`get`
finds one by name, or imports it from a ``module:attribute`` path (a user's agent,
``podracer train --agent my_agents:SPEC``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import optax

from podracer.agents.optim import constant_adam
from podracer.errors import ConfigError, ConfigValueError
from podracer.types import ActionSpec, Agent, DiscreteActionSpec, Learner, ObservationSpec
from podracer.util.imports import load_attribute


class Space(NamedTuple):
    """Where a traced hyper-parameter may go: ``[low, high]``, searched on a log scale when
    ``log``: populations spread, perturb and clip their members' values within it (sweeps take
    any value the config accepts)."""

    low: float
    high: float
    log: bool = False


def epochs_learner(agent: Agent, optimizer, config: Any, **layout: Any) -> Learner:
    """The learner of :func:`podracer.core.learner.make_learner`: ``config.num_epochs`` passes
    of ``config.num_minibatches`` minibatches over each trajectory, or, for an agent with a
    replay (``Agent.replay``), gradient steps on batches from its buffer.

    Args:
      agent: the :class:`~podracer.types.Agent`.
      optimizer: its optax transformation.
      config: the agent's config (``num_epochs`` and ``num_minibatches``, 1 where absent).
      **layout: the loop's ``axis_name``, ``unroll``, ``microbatch_steps``,
        ``envs_per_device`` (:func:`podracer.core.learner.make_learner`).

    Returns:
      The :class:`~podracer.types.Learner`.
    """
    from podracer.core.learner.build import make_learner

    return make_learner(
        agent,
        optimizer,
        num_epochs=getattr(config, "num_epochs", 1),
        num_minibatches=getattr(config, "num_minibatches", 1),
        **layout,
    )


class AgentSpec(NamedTuple):
    """Everything the rest of podracer needs to know of an agent.

    - ``name``: the command line's ``--agent`` name;
    - ``config_cls``: a frozen dataclass, validated in ``__post_init__``; its fields become the
      ``--agent.FIELD`` flags;
    - ``make_agent(config, action_spec, num_updates) -> Agent``, called with three positional
      arguments: ``num_updates`` is the run's number of updates, the length of a schedule over
      the run such as an exploration rate (an agent without one ignores it);
    - ``make_optimizer(config, num_updates) -> optax transformation`` (default:
      :func:`~podracer.agents.optim.constant_adam`, Adam at ``config.lr`` after clipping to
      ``config.max_grad_norm``);
    - ``default_env``: the environment id used when none is given (Anakin; Sebulba's default is
      the loop's own);
    - ``loop_defaults``: loop sizes that suit the agent, loop-neutral
      (``{"envs": 16, "rollout_len": 128}``, :data:`podracer.loops.SIZES`: each loop maps
      them to its own config fields); a section under a loop's name (``{"anakin": {...}}``)
      applies to that loop alone, its keys neutral sizes or that loop's own fields
      (:func:`podracer.loops.loop_values`);
    - ``search_space``: ``{field: Space}`` of the config fields that may be traced (used only in
      ``jnp`` / ``optax`` arithmetic): the sweepable fields and a population's hyper-parameters;
    - ``make_learner(agent, optimizer, config, **layout) -> Learner``: the learner core it
      trains with (default: :func:`epochs_learner`, epochs of minibatches, or replay for an
      agent that asks for one in ``Agent.replay``);
    - ``presets``: ``{family: {"agent": {field: value}, "loop": {size: value}}}``, defaults
      for a preset family of the environment registry's rows (:mod:`podracer.envs.registry`:
      ``"mujoco"``, ``"brax"``, ...), which the command line applies under the user's values;
      ``"loop"`` holds loop-neutral sizes, as ``loop_defaults`` does, and a section under a
      loop's name applies to that loop alone.
    """

    name: str
    config_cls: type
    make_agent: Callable[[Any, ActionSpec, int], Agent]
    make_optimizer: Callable[[Any, int], optax.GradientTransformation] = constant_adam
    default_env: str = "gymnax:CartPole-v1"
    loop_defaults: Mapping[str, Any] = {}
    search_space: Mapping[str, Space] = {}
    make_learner: Callable[..., Learner] = epochs_learner
    presets: Mapping[str, Mapping[str, Any]] = {}

    def build(
        self,
        config: Any,
        action_spec: ActionSpec,
        num_updates: int,
        observation_spec: ObservationSpec | None = None,
    ):
        """``(agent, optimizer)`` for ``config`` and an environment's ``action_spec``; a config
        with :class:`~podracer.core.normalisation.NormalisationFields` gets the normalisation it
        asks for (which needs the ``observation_spec``)."""
        from podracer.core.normalisation import NormalisationFields, normalised

        agent = self.make_agent(config, action_spec, num_updates)
        if isinstance(config, NormalisationFields):
            agent = normalised(agent, config, observation_spec, getattr(config, "gamma", 0.99))
        return agent, self.make_optimizer(config, num_updates)


AGENTS: dict[str, AgentSpec] = {}
"""The registered agents by name (built in: ppo, impala, qlambda, pqn, dqn, sac)."""

_BY_CONFIG: dict[type, AgentSpec] = {}  # the registered specs by config class


def register(spec: AgentSpec) -> AgentSpec:
    """Adds ``spec`` under ``spec.name`` (``--agent NAME``, :func:`get`, :func:`spec_of` by its
    config class), checked as :func:`check_spec` checks a user's; a name already taken by
    another spec is an error. Returns ``spec``."""
    if not isinstance(spec, AgentSpec):
        raise TypeError(f"register takes an AgentSpec, not {type(spec).__name__}")
    check_spec(spec, f"register({spec.name!r})")
    if spec.name in AGENTS and AGENTS[spec.name] is not spec:
        raise ValueError(f"register: an agent named {spec.name!r} is already registered")
    AGENTS[spec.name] = spec
    _BY_CONFIG.setdefault(spec.config_cls, spec)
    return spec


def check_spec(spec: AgentSpec, where: str) -> None:
    """A user's :class:`AgentSpec` checked when it is loaded, before anything is built: a
    :class:`ConfigValueError` naming the first field that breaks the contract."""
    import dataclasses

    def wrong(field: str, what: str) -> ConfigValueError:
        value = getattr(spec, field)
        shown = getattr(value, "__name__", None) or type(value).__name__
        return ConfigValueError(
            f"{where}: AgentSpec.{field}={shown} is not allowed: it must be {what} (docs/agents.md)"
        )

    if not (isinstance(spec.config_cls, type) and dataclasses.is_dataclass(spec.config_cls)):
        raise wrong("config_cls", "a dataclass (its fields are the --agent.FIELD flags)")
    if not spec.config_cls.__dataclass_params__.frozen:
        raise wrong("config_cls", "a frozen dataclass (@dataclasses.dataclass(frozen=True))")
    required = [
        f.name
        for f in dataclasses.fields(spec.config_cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if required:
        raise wrong("config_cls", f"a dataclass with a default for every field, not {required[0]}")
    for field in ("make_agent", "make_optimizer", "make_learner"):
        if not callable(getattr(spec, field)):
            raise wrong(field, "callable")
    if not takes_positional(spec.make_agent, 3):
        raise wrong(
            "make_agent",
            "a function of (config, action_spec, num_updates); a make_agent(config, "
            "action_spec) written for an earlier podracer takes a third argument, num_updates, "
            "the run's updates (unused where the agent has no schedule over the run)",
        )
    if not isinstance(spec.default_env, str):
        raise wrong("default_env", "an environment id (a str)")
    for field in ("loop_defaults", "search_space", "presets"):
        if not isinstance(getattr(spec, field), Mapping):
            raise wrong(field, "a mapping")


def get(name: str) -> AgentSpec:
    """The spec of a registered agent, or of ``module:attribute`` (an :class:`AgentSpec`, which
    is registered under its ``module:attribute`` path, so config files can name it).

    Args:
      name: a registered name (``"ppo"``, ``"impala"``, ``"qlambda"``, ``"pqn"``, ``"dqn"``,
        ``"sac"``, or one added with :func:`register`) or ``"module:attribute"``.

    Returns:
      The :class:`AgentSpec`.

    Raises:
      ConfigValueError: an unknown name, a module or attribute that does not exist, or an
        attribute that is not an :class:`AgentSpec`.
    """
    if name in AGENTS:
        return AGENTS[name]
    if ":" in name:
        spec = load_attribute(name, "--agent")
        if not isinstance(spec, AgentSpec):
            raise ConfigValueError(
                f"--agent {name!r} is not an AgentSpec (it is a {type(spec).__name__}): export "
                "podracer.agents.AgentSpec(...) (docs/agents.md)"
            )
        check_spec(spec, f"--agent {name!r}")
        AGENTS[name] = spec._replace(name=name)
        _BY_CONFIG.setdefault(spec.config_cls, AGENTS[name])
        return AGENTS[name]
    raise ConfigValueError(
        f"unknown agent {name!r}: choose one of {', '.join(AGENTS)}, or give module:attribute "
        "of an AgentSpec"
    )


def spec_of(config: Any) -> AgentSpec:
    """The registered spec whose config class is ``config``'s (the exact class).

    Args:
      config: an agent config (``PPOConfig()``, ...).

    Returns:
      The :class:`AgentSpec` registered with that config class.

    Raises:
      ConfigValueError: no registered agent takes that class.
    """
    if type(config) in _BY_CONFIG:
        return _BY_CONFIG[type(config)]
    raise ConfigValueError(
        f"no registered agent takes a config of type {type(config).__name__}: register its "
        "AgentSpec (podracer.agents.register)"
    )


def num_actions(action_spec: ActionSpec | int, agent: str) -> int:
    """The number of actions of a discrete ``action_spec`` (an int is taken as it is); a
    continuous spec is an error naming the agent."""
    if isinstance(action_spec, int):
        return action_spec
    if not isinstance(action_spec, DiscreteActionSpec):
        raise ConfigError(
            f"{agent} takes discrete actions, not {type(action_spec).__name__} (continuous, "
            f"of shape {tuple(action_spec.shape)}): choose an environment with discrete actions"
        )
    return action_spec.num_actions


def takes_positional(function: Callable, count: int) -> bool:
    """Whether ``function`` can be called with ``count`` positional arguments (True where its
    signature cannot be read: the call will tell)."""
    import inspect

    try:
        inspect.signature(function).bind(*range(count))
    except TypeError:
        return False
    except ValueError:  # no signature to read (some builtins)
        return True
    return True
