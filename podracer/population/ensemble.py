"""Tournament-based ensemble training on the Anakin loop.

Li et al., 2021, "ElegantRL-Podracer: scalable and elastic library for cloud-native deep
reinforcement learning", https://arxiv.org/abs/2112.05923 (its *training pool*, *leaderboard* and
*tournament*); the exploit / explore steps follow population-based training (Jaderberg et al.,
2017, https://arxiv.org/abs/1711.09846).

A population of ``P`` members, each with its own params, optimizer state, environments, keys and
hyper-parameters, is the vmapped seed axis of one Anakin program (:mod:`podracer.loops.anakin`); its
hyper-parameters are traced values in the state, so members differ without a recompile, and the
member axis can be split over devices and processes (``AnakinConfig.member_shards``). Every
``interval`` updates, at the end of the compiled step and without leaving it:

1. **evaluation** — every member plays ``eval_episodes`` episodes on fresh environments
   (:func:`podracer.core.evaluation.make_evaluator`); its score ``s_i`` is their mean return;
2. **leaderboard** — scores, ranks, hyper-parameters, ages and lineage go to the host as one
   record (``leaderboard.jsonl`` in a run directory);
3. **tournament** — the ``n = floor(fraction * P)`` lowest-scoring members are replaced: each
   takes a copy of the params and optimizer state of a parent drawn from the top ``n``
   (``selection="truncation"``) or the best of ``tournament_size`` members drawn from the
   ``P - n`` others (``selection="tournament"``), and the parent's hyper-parameters, each
   multiplied by a factor drawn from ``perturb_factors`` or, with probability
   ``resample_prob``, drawn afresh within its bounds; then clipped to the bounds. A replaced
   member keeps its own environments and keys, so a copy and its parent diverge at once.

With ``tournament=False`` the members are evaluated and ranked but never replaced: they are
exactly independent runs (the evaluation draws on keys of its own). Member ``i`` equals a
separate run with seed ``seed + i`` and its hyper-parameters to rounding, and bit for bit with
``AnakinConfig.member_loop="map"`` (members one after another; docs/design.md).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer.agents.spec import AgentSpec, Space
from podracer.core.learner.buffers import break_streams
from podracer.core.learner.skeleton import one_device
from podracer.errors import ConfigError
from podracer.loops import Loop, Members, Periodic
from podracer.util.stats import nan_as_lowest
from podracer.util.validation import check_choice, check_positive


@dataclasses.dataclass(frozen=True)
class PopulationConfig:
    """The training pool, its leaderboard and its tournament."""

    size: int = 8
    """Members P, trained in lock-step as one program (the loop's ``num_seeds = P``)."""
    interval: int = 10
    """Updates between two evaluations (and tournaments)."""
    tournament: bool = True
    """Replace the weakest members; off, the members are independent runs that are only ranked."""
    fraction: float = 0.25
    """Fraction of the members replaced (the bottom) and drawn from (the top); at most 0.5."""
    selection: str = "truncation"
    """How a parent is chosen: truncation (uniform over the top fraction) or tournament (the
    best of tournament_size members drawn from all but the bottom fraction)."""
    tournament_size: int = 3
    """Members drawn per k-way tournament (selection=tournament)."""
    perturb_factors: tuple[float, ...] = (0.8, 1.25)
    """A copy's hyper-parameters are its parent's times one of these factors (drawn uniformly)."""
    resample_prob: float = 0.0
    """Probability that a copy's hyper-parameter is drawn afresh within its bounds instead."""
    hparams: tuple[str, ...] = ()
    """The hyper-parameters each member carries (traced) and the tournament perturbs; none
    given: ``lr``, and the entropy coefficient where the agent has one (:data:`DEFAULT_HPARAMS`)."""
    init: tuple[str, ...] = ()
    """Initial spreads NAME=LOW:HIGH (e.g. lr=1e-5:1e-2): member i gets the i-th of P values
    spaced evenly (geometrically for a log-scale parameter); other members' values are the
    agent config's."""
    bounds: tuple[str, ...] = ()
    """Bounds NAME=LOW:HIGH replacing the defaults (the agent spec's search_space)."""
    eval_episodes: int = 8
    """Evaluation episodes per member; their mean return is the member's score."""
    eval_greedy: bool = True
    """Score the greedy policy (largest logit) rather than the sampling one."""
    eval_max_steps: int = 10_000
    """Steps after which an evaluation episode counts with the return so far."""

    def __post_init__(self):
        check_positive(self, "size", "interval", "tournament_size", "eval_episodes")
        check_positive(self, "eval_max_steps")
        if not 0.0 < self.fraction <= 0.5:
            raise ConfigError(
                f"PopulationConfig.fraction={self.fraction!r} is not allowed: it must be in "
                "(0, 0.5], so that the replaced and the copied members are apart"
            )
        if self.tournament and self.size >= 2 and self.num_replaced < 1:
            raise ConfigError(
                f"PopulationConfig.fraction={self.fraction!r} is not allowed with size="
                f"{self.size}: it replaces no member (fraction x size must be >= 1)"
            )
        check_choice(self, "selection", ("truncation", "tournament"))
        if not self.perturb_factors or any(not f > 0 for f in self.perturb_factors):
            raise ConfigError(
                f"PopulationConfig.perturb_factors={self.perturb_factors!r} is not allowed: "
                "give one or more factors > 0, e.g. 0.8 1.25"
            )
        if not 0.0 <= self.resample_prob <= 1.0:
            raise ConfigError(
                f"PopulationConfig.resample_prob={self.resample_prob!r} is not allowed: it "
                "must be in [0, 1]"
            )
        if len(set(self.hparams)) != len(self.hparams):
            raise ConfigError(
                f"PopulationConfig.hparams={self.hparams!r} is not allowed: a name is repeated"
            )
        for field in ("init", "bounds"):
            parse_ranges(self, field)  # the syntax; the names against the agent's: spaces()
        if self.hparams:
            check_ranges_carried(self, self.hparams)

    @property
    def num_replaced(self) -> int:
        """Members replaced per tournament: ``floor(fraction * size)``."""
        return math.floor(self.fraction * self.size + 1e-9)


def parse_ranges(config: PopulationConfig, field: str) -> dict[str, tuple[float, float]]:
    """``NAME=LOW:HIGH`` entries of ``config.<field>`` as ``{name: (low, high)}``."""
    out = {}
    for entry in getattr(config, field):
        name, _, text = entry.partition("=")
        low, _, high = text.partition(":")
        try:
            values = float(low), float(high)
        except ValueError:
            values = None
        if not name or values is None or not values[0] <= values[1]:
            raise ConfigError(
                f"PopulationConfig.{field} entry {entry!r} is not allowed: write NAME=LOW:HIGH "
                "with LOW <= HIGH, e.g. lr=1e-5:1e-2"
            )
        out[name.replace("-", "_")] = values
    return out


DEFAULT_HPARAMS = ("lr", "ent_coef", "entropy_cost")
"""What members carry when ``PopulationConfig.hparams`` is empty: those of these names that the
agent's ``search_space`` has, the learning rate and the entropy bonus's coefficient where the
agent has one (``lr, ent_coef`` for PPO, ``lr, entropy_cost`` for IMPALA, ``lr`` for SAC, DQN,
Q(lambda), PQN and MuZero)."""


def check_ranges_carried(config: PopulationConfig, carried: tuple[str, ...]) -> None:
    """``config.init`` and ``config.bounds`` name only hyper-parameters in ``carried``."""
    for field in ("init", "bounds"):
        extra = sorted(set(parse_ranges(config, field)) - set(carried))
        if extra:
            raise ConfigError(
                f"PopulationConfig.{field} names {', '.join(extra)}, which "
                f"PopulationConfig.hparams={carried!r} does not carry: add it there"
            )


def spaces(agent_spec: AgentSpec | str, config: PopulationConfig) -> dict[str, Space]:
    """The bounds of the carried hyper-parameters (``config.hparams``, else the agent's among
    :data:`DEFAULT_HPARAMS`), in that order: the agent spec's ``search_space`` (a spec or a
    registered agent's name), then ``config.bounds``. An unknown name is an error that lists the
    agent's."""
    if isinstance(agent_spec, str):
        from podracer import agents

        agent_spec = agents.get(agent_spec)
    known = agent_spec.search_space
    carried = config.hparams or tuple(n for n in DEFAULT_HPARAMS if n in known)
    for name in carried:
        if name not in known:
            raise ConfigError(
                f"PopulationConfig.hparams names {name!r}, which {agent_spec.name} cannot carry: "
                f"choose from {', '.join(known)}"
            )
    if not carried:
        raise ConfigError(
            f"PopulationConfig.hparams: {agent_spec.name} has none of {', '.join(DEFAULT_HPARAMS)}"
            f"; name what its members carry, from {', '.join(known) or 'nothing'}"
        )
    check_ranges_carried(config, carried)
    out = {name: known[name] for name in carried}
    for name, (low, high) in parse_ranges(config, "bounds").items():
        if known[name].log and low <= 0:
            raise ConfigError(
                f"PopulationConfig.bounds for {name} must be > 0 ({name} is searched on a log "
                f"scale), not {low}"
            )
        out[name] = Space(low, high, known[name].log)
    return out


def initial_hparams(agent_config: Any, config: PopulationConfig, bounds: dict[str, Space]):
    """``{name: [P] f32}``: the spreads of ``config.init`` (even, or geometric on a log scale),
    else the agent config's value; each value checked against its bounds."""
    spreads = parse_ranges(config, "init")
    out = {}
    for name, space in bounds.items():
        if name in spreads:
            low, high = spreads[name]
            if space.log and low <= 0:
                raise ConfigError(
                    f"PopulationConfig.init for {name} must be > 0 ({name} is spread on a log "
                    f"scale), not {low}"
                )
            spread = np.geomspace if space.log else np.linspace
            values = spread(low, high, config.size)
        else:
            values = np.full(config.size, float(getattr(agent_config, name)))
        if values.min() < space.low or values.max() > space.high:
            raise ConfigError(
                f"initial {name} values {values.min():g}..{values.max():g} are outside its "
                f"bounds {space.low:g}..{space.high:g} (PopulationConfig.bounds)"
            )
        for value in (values.min(), values.max()):  # the agent config validates the value
            dataclasses.replace(agent_config, **{name: float(value)})
        out[name] = values.astype(np.float32)
    return out


def check_explicit_hparams(
    agent_config: Any, hparams: dict[str, Any], bounds: dict[str, Space], size: int
) -> dict[str, np.ndarray]:
    """``{name: [P] f32}`` of explicit initial values (``build(hparams=...)``), checked as
    :func:`initial_hparams` checks its spreads: a carried name (a key of ``bounds``), one finite
    value per member, each within its bounds and valid for the agent config. Errors name the
    member, the field, its value and the allowed range."""
    out = {}
    for name, values in hparams.items():
        if name not in bounds or np.shape(values) != (size,):
            raise ConfigError(
                f"hparams[{name!r}] is not allowed: give one of {', '.join(bounds)} with "
                f"{size} values (one per member), not {np.shape(values)}"
            )
        values = np.asarray(values, np.float64)
        space = bounds[name]
        for i, value in enumerate(values):
            if not (np.isfinite(value) and space.low <= value <= space.high):
                raise ConfigError(
                    f"hparams[{name!r}] member {i}: {name}={value:g} is not allowed: it must be "
                    f"within {space.low:g}..{space.high:g} (the bounds of {name}, "
                    "PopulationConfig.bounds)"
                )
            try:  # the agent config's own checks (bounds given by the user may be wider)
                dataclasses.replace(agent_config, **{name: float(value)})
            except ConfigError as error:
                raise ConfigError(f"hparams[{name!r}] member {i}: {error}") from None
        out[name] = values.astype(np.float32)
    return out


# --- the tournament (pure, on device) ----------------------------------------------------------


class Lineage(NamedTuple):
    """A member's ancestry: the ``periodic`` part of a population's state, ``[P]``."""

    key: jax.Array  # [P] the population's own keys (evaluation, tournament)
    parent: jax.Array  # i32 [P]: the member it was last copied from (itself at the start)
    born: jax.Array  # i32 [P]: the update at which it was last copied (0 at the start)
    copies: jax.Array  # i32 [P]: how many times it has been replaced


def init_lineage(keys: jax.Array) -> Lineage:
    size = keys.shape[0]
    return Lineage(
        key=keys,
        parent=jnp.arange(size, dtype=jnp.int32),
        born=jnp.zeros(size, jnp.int32),
        copies=jnp.zeros(size, jnp.int32),
    )


def select_parents(
    key: jax.Array,
    scores: jax.Array,
    *,
    num_replaced: int,
    selection: str = "truncation",
    tournament_size: int = 3,
) -> jax.Array:
    """``src [P] i32``: member ``i`` becomes a copy of member ``src[i]`` (``src[i] == i``: kept).

    The ``num_replaced`` lowest ``scores [P]`` (NaN counts as the lowest; equal scores are
    ordered at random, so that a population of equals does not always replace the same ids) are
    replaced; each draws its parent from the ``num_replaced`` highest (truncation), or takes the
    best of ``tournament_size`` members drawn with replacement from the ``P - num_replaced``
    that are not replaced (tournament).
    """
    size = scores.shape[0]
    members = jnp.arange(size, dtype=jnp.int32)
    if num_replaced == 0 or size < 2:
        return members
    tie_key, draw_key = jax.random.split(key)
    ranked = jnp.where(jnp.isnan(scores), -jnp.inf, scores)
    ties = jax.random.uniform(tie_key, (size,))
    order = jnp.lexsort((ties, ranked)).astype(jnp.int32)  # ascending score
    losers = order[:num_replaced]
    if selection == "truncation":
        top = order[size - num_replaced :]
        parents = top[jax.random.randint(draw_key, (num_replaced,), 0, num_replaced)]
    else:
        pool = order[num_replaced:]
        shape = (num_replaced, tournament_size)
        drawn = pool[jax.random.randint(draw_key, shape, 0, pool.shape[0])]
        parents = jnp.take_along_axis(drawn, jnp.argmax(ranked[drawn], axis=1)[:, None], axis=1)[
            :, 0
        ]
    return members.at[losers].set(parents)


def perturb(
    key: jax.Array,
    values: dict[str, jax.Array],
    replaced: jax.Array,
    bounds: dict[str, Space],
    *,
    factors: Sequence[float],
    resample_prob: float,
) -> dict[str, jax.Array]:
    """New hyper-parameters ``[P]`` for the ``replaced [P]`` members; the others keep theirs.

    ``values`` are the parents' values (already gathered). Each is multiplied by a factor drawn
    uniformly from ``factors`` or, with probability ``resample_prob``, drawn afresh within its
    bounds (log-uniformly on a log scale); then clipped to the bounds.
    """
    factors = jnp.asarray(factors, jnp.float32)
    out = {}
    for i, name in enumerate(sorted(values)):
        value, space = values[name], bounds[name]
        pick_key, coin_key, draw_key = jax.random.split(jax.random.fold_in(key, i), 3)
        scaled = value * factors[jax.random.randint(pick_key, value.shape, 0, factors.shape[0])]
        u = jax.random.uniform(draw_key, value.shape)
        if space.log:
            drawn = jnp.exp(math.log(space.low) + u * (math.log(space.high) - math.log(space.low)))
        else:
            drawn = space.low + u * (space.high - space.low)
        new = jnp.where(jax.random.bernoulli(coin_key, resample_prob, value.shape), drawn, scaled)
        new = jnp.clip(new, space.low, space.high).astype(value.dtype)
        out[name] = jnp.where(replaced, new, value)
    return out


def _take(tree, src):
    return jax.tree.map(lambda x: jnp.take(x, src, axis=0), tree)


def tournament_step(state, scores: jax.Array, config: PopulationConfig, bounds, key):
    """The tournament on a loop's state (its ``learner``, ``hparams`` and ``periodic``: the
    global view, ``[P]`` leaves) given ``scores [P]``: ``(state, events)``, ``events`` holding
    ``src``, ``replaced`` and the hyper-parameters after."""
    select_key, perturb_key = jax.random.split(key)
    src = select_parents(
        select_key,
        scores,
        num_replaced=config.num_replaced if config.tournament else 0,
        selection=config.selection,
        tournament_size=config.tournament_size,
    )
    replaced = src != jnp.arange(scores.shape[0], dtype=src.dtype)
    learner = state.learner._replace(
        params=_take(state.learner.params, src),
        opt_state=_take(state.learner.opt_state, src),
        agent_state=_take(state.learner.agent_state, src),
        # a replaced member acts on in its own environments: its new buffer's streams break
        replay=break_streams(_take(state.learner.replay, src), replaced),
    )
    hparams = perturb(
        perturb_key,
        _take(state.hparams, src),
        replaced,
        bounds,
        factors=config.perturb_factors,
        resample_prob=config.resample_prob,
    )
    lineage: Lineage = state.periodic
    lineage = lineage._replace(
        parent=jnp.where(replaced, src, lineage.parent),
        born=jnp.where(replaced, state.learner.update_count, lineage.born),
        copies=lineage.copies + replaced.astype(jnp.int32),
    )
    state = state._replace(learner=learner, hparams=hparams, periodic=lineage)
    return state, {"src": src, "replaced": replaced, "hparams_after": hparams}


# --- the Anakin system ---------------------------------------------------------------------------


def make_periodic(env, build, config: PopulationConfig, bounds: dict[str, Space]):
    """The :class:`podracer.loops.Periodic` of a population: evaluation, leaderboard record and
    tournament every ``config.interval`` updates. ``build(hparams) -> (agent, optimizer)``.

    ``env()`` gives the JAX environment ``apply`` evaluates the members on (called once, when a
    loop traces ``apply``: Anakin); ``apply_scored`` takes the members' scores from the loop
    instead (Sebulba: their recent training returns). Both run the one :func:`tournament`.
    """
    from podracer.core.evaluation import make_evaluator

    def evaluate_one(evaluate, params, agent_state, hparams, key):
        agent, _ = build(hparams)
        params = agent.actor_params(params, one_device(agent, agent_state))
        return jnp.mean(evaluate(agent)(params, key))

    def evaluator(agent):
        return make_evaluator(
            env(),
            agent,
            num_episodes=config.eval_episodes,
            greedy=config.eval_greedy,
            max_steps=config.eval_max_steps,
        )

    def apply(state):
        lineage: Lineage = state.periodic
        updates = state.learner.update_count[0]
        eval_keys = jax.vmap(lambda k: jax.random.fold_in(k, updates))(lineage.key)
        learner = state.learner
        scores = jax.vmap(functools.partial(evaluate_one, evaluator))(
            learner.params, learner.agent_state, state.hparams, eval_keys
        )
        return apply_scored(state, scores)

    def apply_scored(state, scores):
        return tournament(state, scores, config, bounds)

    def describe(events, updates: int) -> list[dict[str, Any]]:
        return [leaderboard_record(events, updates, config.tournament)]

    return Periodic(
        interval=config.interval,
        init=init_lineage,
        apply=apply,
        describe=describe,
        apply_scored=apply_scored,
    )


def tournament(state, scores: jax.Array, config: PopulationConfig, bounds):
    """The leaderboard's numbers and the tournament (:func:`tournament_step`) on a loop's state
    (``learner``, ``hparams``, ``periodic``: the global view, ``[P]`` leaves) given the members'
    ``scores [P]``; its key is the population's own (``lineage.key[0]`` folded with the update
    count), so the same state and scores make the same copies on every loop."""
    lineage: Lineage = state.periodic
    updates = state.learner.update_count[0]
    before = {
        "scores": scores,
        "hparams": state.hparams,
        "parent": lineage.parent,
        "born": lineage.born,
        "copies": lineage.copies,
    }
    key = jax.random.fold_in(jax.random.fold_in(lineage.key[0], updates), 1)
    state, after = tournament_step(state, scores, config, bounds, key)
    return state, {**before, **after}


def leaderboard_record(events: dict[str, Any], updates: int, tournament: bool) -> dict[str, Any]:
    """The ``"leaderboard"`` record of one evaluation (and tournament), host side.

    ``members`` is sorted best first; each entry has the member id, its score and rank (1 is the
    best), the hyper-parameters it was trained with, its age (updates since it was last copied),
    and its lineage: ``parent`` (whose copy it is; itself if never copied), ``since`` (the update
    of that copy) and ``copies``. ``replaced`` lists the members the tournament then replaced,
    each with its new parent and hyper-parameters.
    """
    scores = np.asarray(events["scores"], np.float64)
    names = sorted(events["hparams"])
    order = sorted(range(len(scores)), key=lambda i: (-nan_as_lowest(scores[i]), i))
    members = []
    for rank, i in enumerate(order, 1):
        members.append(
            {
                "member": i,
                "score": None if np.isnan(scores[i]) else float(scores[i]),
                "rank": rank,
                "hparams": {n: float(events["hparams"][n][i]) for n in names},
                "age": int(updates - events["born"][i]),
                "parent": int(events["parent"][i]),
                "since": int(events["born"][i]),
                "copies": int(events["copies"][i]),
            }
        )
    replaced = [
        {
            "member": int(i),
            "parent": int(events["src"][i]),
            "hparams": {n: float(events["hparams_after"][n][i]) for n in names},
        }
        for i in np.flatnonzero(np.asarray(events["replaced"]))
    ]
    return {
        "kind": "leaderboard",
        "updates": updates,
        "tournament": tournament,
        **score_summary(scores, order[0]),
        "members": members,
        "replaced": replaced,
    }


def score_summary(scores: np.ndarray, best_member: int) -> dict[str, Any]:
    """A leaderboard record's summary of the members' ``scores`` ``[P]`` (NaN: no score yet):
    the best member, the best, median and mean of the finite scores (None when there is none),
    and every score (None for NaN)."""
    finite = scores[np.isfinite(scores)]
    return {
        "best_member": best_member,
        "best_score": float(finite.max()) if finite.size else None,
        "median_score": float(np.median(finite)) if finite.size else None,
        "mean_score": float(finite.mean()) if finite.size else None,
        "scores": [None if np.isnan(s) else float(s) for s in scores],
    }


def build_system(
    loop: Loop,
    env_id: str,
    agent_spec: AgentSpec,
    agent_config: Any,
    config,
    population: PopulationConfig,
    *,
    total_timesteps: int,
    seed: int = 0,
    devices: Sequence[jax.Device] | None = None,
    hparams: dict[str, Sequence[float]] | None = None,
    env_options: Any = None,
):
    """The system of a population on ``loop`` (one whose members run as one program): the
    recipe's :class:`~podracer.loops.Members` with traced hyper-parameters and this module's
    :class:`~podracer.loops.Periodic`, whose tournament evaluates on the recipe's environment
    (``env_options``: an :class:`~podracer.envs.EnvOptions`, as in training).

    ``config`` is the loop's config; it is given ``population.size`` members (member ``i`` uses
    seed ``seed + i``). ``hparams`` gives members' initial values explicitly
    (``{name: [P values]}``), in place of ``population.init``.
    """
    from podracer import loops

    if not loop.members_in_one_program:
        raise ConfigError(
            f"a population is not allowed with --arch {loop.name}: its members must run as one "
            "program"
        )
    bounds = spaces(agent_spec, population)
    initial = initial_hparams(agent_config, population, bounds)
    initial.update(check_explicit_hparams(agent_config, hparams or {}, bounds, population.size))
    return loops.build_members(
        loop,
        env_id,
        agent_config,
        config,
        population.size,
        agent_spec=agent_spec,
        total_timesteps=total_timesteps,
        seed=seed,
        devices=devices,
        members=lambda recipe: Members(recipe.member, initial, np.arange(population.size)),
        periodic=lambda recipe: make_periodic(recipe.make_env, recipe.member, population, bounds),
        env_options=env_options,
    )


def build(env_id: str, agent_config: Any, config, population: PopulationConfig, **kwargs: Any):
    """:func:`build_system` of a registered agent's config on the Anakin loop.

    Args:
      env_id: a JAX environment's id.
      agent_config: the config of a registered agent; the members' hyper-parameters replace
        its fields.
      config: the loop's config (:class:`~podracer.loops.anakin.AnakinConfig`); it is given
        ``population.size`` members.
      population: the :class:`PopulationConfig` (size, interval, tournament, hyper-parameters).
      **kwargs: :func:`build_system`'s ``total_timesteps`` (required), ``seed``, ``devices``,
        ``hparams``, ``env_options``.

    Returns:
      The Anakin system of the population (:class:`~podracer.loops.anakin.Anakin`).
    """
    from podracer import agents, loops

    spec = agents.spec_of(agent_config)
    return build_system(
        loops.for_config(config), env_id, spec, agent_config, config, population, **kwargs
    )


def train(
    env_id: str,
    agent_config: Any,
    config,
    population: PopulationConfig,
    *,
    seed: int = 0,
    total_timesteps: int,
    devices: Sequence[jax.Device] | None = None,
    progress=None,
    hparams: dict[str, Sequence[float]] | None = None,
    env_options: Any = None,
    **run_options: Any,
):
    """Builds the population on the Anakin loop (:func:`build`) and runs it.

    Args:
      env_id: a JAX environment's id.
      agent_config: the config of a registered agent; the members' hyper-parameters replace
        its fields.
      config: the loop's config (:class:`~podracer.loops.anakin.AnakinConfig`).
      population: the :class:`PopulationConfig`.
      seed: the run seed; member ``i`` starts from seed ``seed + i``.
      total_timesteps: environment steps per member.
      devices: the mesh's devices (default: every device).
      progress: receives every ``"train"`` record.
      hparams: the members' initial hyper-parameters, ``{name: [P values]}``, in place of
        ``population.init``.
      env_options: the environment's :class:`~podracer.envs.EnvOptions`.
      **run_options: the system's ``run`` keywords: ``state``, ``start_update``, ``hooks``.

    Returns:
      The :class:`~podracer.loops.RunResult`: its ``events`` are the leaderboard records, and
      its summary adds the last leaderboard's scores (``final_scores``, ``final_best_score``,
      ``final_median_score``).
    """
    system = build(
        env_id,
        agent_config,
        config,
        population,
        total_timesteps=total_timesteps,
        seed=seed,
        devices=devices,
        hparams=hparams,
        env_options=env_options,
    )
    result = system.run(run_options.pop("state", None), seed=seed, progress=progress, **run_options)
    result.summary.update(population=population.size, **final_scores(result.events))
    return result


def final_scores(events: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The last leaderboard's scores for a run summary (``None`` without a leaderboard)."""
    boards = [e for e in events if e.get("kind") == "leaderboard"]
    if not boards:
        return {"final_scores": None, "final_best_score": None, "final_median_score": None}
    last = boards[-1]
    return {
        "final_scores": last["scores"],
        "final_best_score": last["best_score"],
        "final_median_score": last["median_score"],
    }
