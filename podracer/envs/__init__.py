"""On-device environments: ``make(id)`` builds one by its id.

Ids: ``"catch"`` (the Podracer paper's demo), ``"gymnax:<name>"`` for every environment of
gymnax, discrete (``gymnax:CartPole-v1``, ``gymnax:Breakout-MinAtar``, ...) or continuous
(``gymnax:Pendulum-v1``, ``gymnax:MountainCarContinuous-v0``, ...), ``"brax:<name>"`` for brax's
environments (``brax:ant``, ``brax:halfcheetah``, ...; options in the id as a query string,
``brax:ant?backend=positional&episode_length=100``, see :mod:`podracer.envs.jax.brax`; brax is
an optional extra), ``"trading:synthetic"`` and ``"trading:PATH.csv"`` (a portfolio of stocks,
:mod:`podracer.trading.environment`), the JAX suites' ``"<family>:<name>"`` (``playground:``,
``craftax:``, ``jumanji:``, ``navix:``, ``xminigrid:``, ``popgym_arcade:``, ``pgx:``; each an
optional extra), an id added with :func:`register`, and ``"module:attribute"``: a user's
environment class or factory, imported from ``sys.path`` or the current directory and called
with the keyword arguments (``podracer train --env my_envs:make_env``). The families, and the
adapter that makes each, are one table: :mod:`podracer.envs.registry`.

A run's environment options (``--env-param``, ``--env-observe``: :class:`EnvOptions`) are
applied by :func:`make_with_options`, the one factory every loop builds its JAX environments
with (:mod:`podracer.envs.factory`; the options themselves: :mod:`podracer.envs.options`).
"""

from __future__ import annotations

from podracer.envs.factory import KNOWN_IDS, make, make_with_options, register
from podracer.envs.jax.brax import BraxEnvironment  # brax itself: when a brax: id is made
from podracer.envs.jax.catch import Catch
from podracer.envs.jax.gymnax import GymnaxEnvironment
from podracer.envs.options import EnvOptions
from podracer.envs.wrappers import EpisodeStatistics, ObservationMask, WithParams

__all__ = [
    "KNOWN_IDS",
    "BraxEnvironment",
    "Catch",
    "EnvOptions",
    "EpisodeStatistics",
    "GymnaxEnvironment",
    "ObservationMask",
    "WithParams",
    "make",
    "make_with_options",
    "register",
]
