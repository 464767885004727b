"""Tournament-based ensemble training (ElegantRL-Podracer, arXiv 2112.05923): a population of
learners as one program of either loop, a leaderboard, and a tournament that replaces the weakest
members with perturbed copies of the strongest. The code is :mod:`podracer.population.ensemble`;
this package is its public face."""

from __future__ import annotations

from podracer.population.ensemble import (
    PopulationConfig,
    parse_ranges,
    check_ranges_carried,
    spaces,
    initial_hparams,
    check_explicit_hparams,
    Lineage,
    init_lineage,
    select_parents,
    perturb,
    tournament_step,
    make_periodic,
    tournament,
    leaderboard_record,
    build_system,
    build,
    train,
    final_scores,
    DEFAULT_HPARAMS,
)

__all__ = [
    "PopulationConfig",
    "parse_ranges",
    "check_ranges_carried",
    "spaces",
    "initial_hparams",
    "check_explicit_hparams",
    "Lineage",
    "init_lineage",
    "select_parents",
    "perturb",
    "tournament_step",
    "make_periodic",
    "tournament",
    "leaderboard_record",
    "build_system",
    "build",
    "train",
    "final_scores",
    "DEFAULT_HPARAMS",
]
