"""Tournament-based ensemble training (ElegantRL-Podracer, arXiv 2112.05923): a population of
learners as one program of either loop, a leaderboard, and a tournament that replaces the weakest
members with perturbed copies of the strongest. The code is :mod:`podracer.population.ensemble`;
this package is its public face."""

from __future__ import annotations

from podracer.population.ensemble import (
    DEFAULT_HPARAMS,
    Lineage,
    PopulationConfig,
    build,
    build_system,
    check_explicit_hparams,
    check_ranges_carried,
    final_scores,
    init_lineage,
    initial_hparams,
    leaderboard_record,
    make_periodic,
    parse_ranges,
    perturb,
    select_parents,
    spaces,
    tournament,
    tournament_step,
    train,
)

__all__ = [
    "DEFAULT_HPARAMS",
    "Lineage",
    "PopulationConfig",
    "build",
    "build_system",
    "check_explicit_hparams",
    "check_ranges_carried",
    "final_scores",
    "init_lineage",
    "initial_hparams",
    "leaderboard_record",
    "make_periodic",
    "parse_ranges",
    "perturb",
    "select_parents",
    "spaces",
    "tournament",
    "tournament_step",
    "train",
]
