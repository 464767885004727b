"""The loops' contracts: what a loop is (:class:`Loop`), what it builds (:class:`System`), what a
run returns (:class:`RunResult`), the host work between its calls (:class:`RunHooks`), and the
members and periodic work that sweeps and populations give it (:class:`Members`,
:class:`Periodic`).

Nothing here is jitted; every loop, the registry (:mod:`podracer.loops.registry`) and every
entry point above the loops read these types, and this module imports no loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import jax
import numpy as np

from podracer.loops.recipe import EnvFactory, Recipe
from podracer.parallel import fetch
from podracer.types import Agent, EnvSpec


class RunResult(NamedTuple):
    """What a loop's run returns: the summary printed as JSON, the final state, the history."""

    summary: dict[str, Any]
    state: Any  # the loop's state; ``.learner``, ``.hparams``, ``.periodic`` on every loop
    history: dict[str, np.ndarray]  # per-update metrics [members, updates run by this call]
    events: tuple[dict[str, Any], ...] = ()  # the records of Periodic work (leaderboards)

    @property
    def params(self):
        """The final params as NumPy, with a leading member axis (``state.learner.params``:
        every loop's state holds its members' :class:`~podracer.types.LearnerState` as
        ``learner``)."""
        return jax.device_get(fetch(self.state.learner.params))


class RunHooks:
    """Host work between updates (checkpoints, evaluation, the divergence check): a base class
    whose methods do nothing, so a loop calls every one of them and a subclass overrides what
    it needs.

    ``interval`` (updates; 0 for none) makes Anakin's calls end at its multiples, so that a hook
    acting every ``interval`` updates sees exactly those states and a run resumed from one of them
    calls the same compiled programs as a run that never stopped. Sebulba calls ``after_call``
    after every update, from its learner thread.

    ``after_metrics(metrics, first_update)`` gets the learner's metrics of updates
    ``first_update + 1 ...`` as NumPy (``[members, updates]`` from both loops; Sebulba's one
    update at a time, before that update's ``after_call``; Anakin reports a call's metrics while
    the next call runs, so a checkpoint of that call may come first).

    The ``state`` the hooks get is the loop's, read loop-neutrally: ``state.learner`` (the
    members' :class:`~podracer.types.LearnerState`, ``[members, ...]``), ``state.hparams``,
    ``state.periodic``; a checkpoint saves it whole.
    """

    interval: int = 0

    def after_call(self, state: Any, updates: int, last: bool) -> None:
        """After a call of the loop's step that ends with ``updates`` updates done (``last``:
        the run's last)."""

    def after_metrics(self, metrics: dict[str, np.ndarray], first_update: int) -> None:
        """The learner's metrics of updates ``first_update + 1 ...``."""

    def interrupted(self, state: Any, updates: int) -> None:
        """Ctrl-C (or SIGTERM) stopped the run at ``state``, which holds ``updates`` updates."""


class Members(NamedTuple):
    """Members that differ in hyper-parameters as well as seeds (sweeps, populations).

    ``build(hparams)`` returns ``(agent, optimizer)`` for one member's hyper-parameters (traced
    scalars, e.g. ``{"lr": ..., "ent_coef": ...}``); ``hparams`` holds their initial values
    ``[S]``; member ``i`` starts from seed ``seed + seed_offsets[i]``.
    """

    build: Callable[[dict[str, jax.Array]], tuple[Agent, Any]]
    hparams: dict[str, np.ndarray]
    seed_offsets: np.ndarray


class Periodic(NamedTuple):
    """Work on all members together every ``interval`` updates, inside the compiled step
    (a population's evaluation and tournament, :mod:`podracer.population.ensemble`).

    - ``init(keys [S]) -> state [S, ...]``: its part of the loop's state (``periodic``);
    - ``apply(state) -> (state, events)``: jittable, on the *global* state (every member, whatever
      the mesh), which it scores itself (a population's evaluation on the loop's JAX
      environment: Anakin's, inside its program); ``events`` is a pytree of arrays for the host;
    - ``apply_scored(state, scores [S]) -> (state, events)``: the same given the members' scores
      (Sebulba's: the members' recent training returns, its environments being the host's);
    - ``describe(events, updates) -> records``: host side, the log records of one ``apply``.

    ``state`` is the loop's state; what the work reads of it is loop-neutral: ``learner``
    (:class:`~podracer.types.LearnerState` ``[S, ...]``), ``hparams`` and ``periodic``. The
    loop applies it after every update that is a multiple of ``interval``, so ``apply`` sees
    exactly those states.
    """

    interval: int
    init: Callable[[jax.Array], Any]
    apply: Callable[[Any], tuple[Any, Any]]
    describe: Callable[[Any, int], list[dict[str, Any]]]
    apply_scored: Callable[[Any, jax.Array], tuple[Any, Any]] | None = None


class System(Protocol):
    """A loop's built system: what :class:`Loop.build_system` returns."""

    recipe: Recipe
    config: Any

    @property
    def envs_per_device(self) -> int:
        """The environments of one member in one learner device's share of an update (what a
        recurrent learner cuts into sequences)."""

    def init(self, seed: int) -> Any:
        """The initial state of the run ``seed`` (also the template a checkpoint restores into);
        a size that does not divide fails here, before anything is written."""

    def run(
        self,
        state: Any,
        *,
        seed: int,
        start_update: int = 0,
        hooks: RunHooks | None = None,
        progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> RunResult:
        """Trains from ``state`` (which holds ``start_update`` updates) to the recipe's
        ``num_updates``; the summary names the run (env, arch, seed, devices, processes)."""

    def evaluator(
        self, *, seed: int, episodes: int, greedy: bool
    ) -> Callable[[Any, int], np.ndarray]:
        """``evaluate(state, updates) -> returns [members, episodes]`` on fresh environments,
        with keys of its own (:data:`podracer.util.seeding.EVAL_SEED_OFFSET`)."""

    @property
    def num_members(self) -> int:
        """The members the system trains in one program (1 for a single run)."""

    def policy(self, state: Any, member: int) -> tuple[Any, Any]:
        """``(agent, actor_params)`` of member ``member`` in ``state``, on the host: what acts
        in an evaluation or a video (the agent with the member's hyper-parameters)."""


class Loop(NamedTuple):
    """A training loop, as the registry knows it.

    - ``name``: the ``--arch`` name; ``config_cls``: its frozen config dataclass (``--arch.FIELD``);
    - ``default_env(agent_spec) -> env id`` when none is given;
    - ``probe(env_factory, config, seed) -> EnvSpec``: the specs of the environment the run's
      :class:`~podracer.loops.recipe.EnvFactory` (id and options) builds, as the loop's systems
      build theirs (an unknown id or option fails);
    - ``steps_per_update(config)``: environment steps per update and member, every process;
    - ``build_system(recipe, config, *, devices, members, periodic) -> System``;
    - ``members_in_one_program``: sweeps and populations run their members as one program
      (Anakin's and Sebulba's ``num_seeds``); otherwise a sweep runs them in turn and a
      population is refused;
    - ``with_members(config, n)``: the config that runs ``n`` members;
    - ``sizes``: ``{neutral size: config field}`` for the loop-neutral sizes (:data:`SIZES`)
      an agent's ``loop_defaults`` and presets give (:func:`loop_values`);
    - ``place_members(config, recipe) -> (config, devices)``: where the members run when
      :func:`podracer.parallel.use_cpu_cores` gave a CPU one device per core and no devices are
      given (:func:`podracer.parallel.spread_members`): Anakin puts them on as many cores as
      divide them, and splits each member's environments over the cores left over where its
      batch is large enough;
    - ``runs_in_pods``: the elastic tournament's pods (:mod:`podracer.experiments.elastic`) can
      run it: a pod drives its population one compiled segment of ``interval`` updates at a time and
      reads the members' scores from the program's own evaluation (Anakin). Sebulba's
      populations are driven by their actor threads and scored on training returns, so its
      pods are not built.
    """

    name: str
    config_cls: type
    default_env: Callable[[Any], str]
    probe: Callable[[EnvFactory, Any, int], EnvSpec]
    steps_per_update: Callable[[Any], int]
    build_system: Callable[..., System]
    members_in_one_program: bool = False
    with_members: Callable[[Any, int], Any] | None = None
    place_members: Callable[..., tuple[Any, Sequence[jax.Device] | None]] | None = None
    sizes: Mapping[str, str] = {}
    runs_in_pods: bool = False


SIZES = ("envs", "rollout_len")
"""The loop-neutral sizes an agent's ``loop_defaults`` and presets set: ``envs``, the
environments a member steps in one batch (Anakin's ``num_envs`` over all its devices, each
Sebulba actor's ``envs_per_actor``), and ``rollout_len``, the steps of each environment between
two updates. Each loop maps them to its config's fields (:attr:`Loop.sizes`)."""
