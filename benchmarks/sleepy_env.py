"""A host environment whose steps wait rather than compute, for ``sebulba_throughput.py``'s
``sleepy`` / ``sleepy-async`` configurations: where envpool's async mode is meant to pay.

Each environment's step sleeps a heavy-tailed random time on a thread of its own, as a
simulator in another process or on another machine does; the host's cores stay free while it
waits. It has CartPole's specs (f32 observations ``[4]``, 2 actions) so that a Sebulba recipe
built for ``envpool:CartPole-v1`` runs on it unchanged, random observations, reward 1 and
episodes of ``episode_len`` steps (truncated). It implements :class:`podracer.types.HostEnvironment`
in both modes: sync (``step`` waits for every environment) and async (``recv`` returns the
first ``batch_size`` that are ready, ``send`` starts their next steps), with the same
``TimeStep`` meaning as podracer's other host environments (same-step auto-reset,
``final_obs``, episode statistics in ``info``).

Step times: ``min_ms * (1 + Pareto(alpha))`` milliseconds (numpy's Lomax draw), a Pareto
distribution with scale ``min_ms`` and shape ``alpha``: mean ``min_ms * alpha / (alpha - 1)``
(3 ms for the defaults), and a tail whose 99th percentile is ``min_ms * 100 ** (1 / alpha)``
(21.5 ms). A sync step of ``n`` environments lasts as long as its slowest one.
"""

from __future__ import annotations

import queue
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from podracer.types import DiscreteActionSpec, EpisodeInfo, ObservationSpec, TimeStep

SPECS_OF = "envpool:CartPole-v1"
"""The environment id whose specs this environment has (what a recipe for it is built on)."""


class SleepyEnvironment:
    """``num_envs`` environments whose steps sleep ``min_ms * (1 + Pareto(alpha))`` ms each, on
    a thread per environment; async mode when ``batch_size < num_envs``."""

    def __init__(
        self,
        num_envs: int,
        batch_size: int | None = None,
        *,
        min_ms: float = 1.0,
        alpha: float = 1.5,
        episode_len: int = 200,
        seed: int = 0,
    ):
        self.id = f"sleepy:pareto(min_ms={min_ms}, alpha={alpha})"
        self.num_envs = num_envs
        self.batch_size = batch_size or num_envs
        self.is_async = self.batch_size < num_envs
        self.observation_spec = ObservationSpec((4,), np.float32)
        self.action_spec = DiscreteActionSpec(2)
        self.min_ms, self.alpha, self.episode_len = min_ms, alpha, episode_len
        n = num_envs
        self._rngs = [np.random.default_rng([seed, i]) for i in range(n)]
        self._obs = np.zeros((n, 4), np.float32)
        self._final_obs = np.zeros((n, 4), np.float32)
        self._truncated = np.zeros(n, bool)
        self._length = np.zeros(n, np.int32)
        self._done_length = np.zeros(n, np.int32)
        self._ready: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="sleepy-env")

    # ---- one environment, on its own thread -------------------------------------------------

    def _reset_one(self, i: int) -> None:
        self._obs[i] = self._rngs[i].standard_normal(4)
        self._length[i] = 0
        self._truncated[i] = False
        self._final_obs[i] = self._obs[i]
        self._ready.put(i)

    def _step_one(self, i: int) -> None:
        rng = self._rngs[i]
        time.sleep(self.min_ms * (1.0 + rng.pareto(self.alpha)) / 1000.0)
        obs = rng.standard_normal(4).astype(np.float32)
        length = self._length[i] + 1
        ended = length >= self.episode_len
        self._final_obs[i] = obs
        self._truncated[i] = ended
        self._done_length[i] = length if ended else 0
        if ended:
            obs = rng.standard_normal(4).astype(np.float32)
            length = 0
        self._obs[i] = obs
        self._length[i] = length
        self._ready.put(i)

    def _timestep(self, ids: np.ndarray, first: bool) -> TimeStep:
        n = len(ids)
        truncated = np.zeros(n, bool) if first else self._truncated[ids]
        lengths = np.where(truncated, self._done_length[ids], 0).astype(np.int32)
        return TimeStep(
            obs=self._obs[ids],
            reward=np.full(n, 0.0 if first else 1.0, np.float32),
            terminated=np.zeros(n, bool),
            truncated=truncated,
            final_obs=self._final_obs[ids],
            info=EpisodeInfo(truncated, lengths.astype(np.float32), lengths),
        )

    def _wait(self, count: int) -> None:
        for _ in range(count):
            self._ready.get()

    # ---- sync mode ---------------------------------------------------------------------------

    def reset(self) -> TimeStep:
        for i in range(self.num_envs):
            self._reset_one(i)
        self._wait(self.num_envs)
        return self._timestep(np.arange(self.num_envs), first=True)

    def step(self, actions) -> TimeStep:
        for i in range(self.num_envs):
            self._pool.submit(self._step_one, i)
        self._wait(self.num_envs)
        return self._timestep(np.arange(self.num_envs), first=False)

    # ---- async mode --------------------------------------------------------------------------

    def async_reset(self) -> None:
        self._first = np.ones(self.num_envs, bool)
        for i in range(self.num_envs):
            self._reset_one(i)

    def recv(self) -> tuple[TimeStep, np.ndarray]:
        ids = np.array([self._ready.get() for _ in range(self.batch_size)], np.int32)
        first = self._first[ids]  # the async_reset observations: reward 0 (no flags either)
        self._first[ids] = False
        ts = self._timestep(ids, first=False)
        return ts._replace(reward=np.where(first, 0.0, 1.0).astype(np.float32)), ids

    def send(self, actions, env_ids) -> None:
        for i in np.asarray(env_ids):
            self._pool.submit(self._step_one, int(i))

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def make_factory(config, **options):
    """``make_env(actor_index)`` (as :func:`podracer.loops.sebulba.env_factory` gives) of
    :class:`SleepyEnvironment` s with ``config.envs_per_actor`` environments, async mode when
    ``config.async_batch_size`` is set."""

    def make_env(actor: int) -> SleepyEnvironment:
        return SleepyEnvironment(
            config.envs_per_actor, config.async_batch_size or None, seed=actor, **options
        )

    return make_env
