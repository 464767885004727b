"""Host environments for Sebulba: NumPy in, NumPy out, stepped by Python actor threads.

``make("envpool:<task>", num_envs=..., batch_size=..., ...)`` builds an
:class:`~podracer.host_envs.envpool.EnvpoolEnvironment` whose ``TimeStep``s mean what they mean
for podracer's JAX environments (same-step auto-reset, ``final_obs``, terminated and truncated
kept apart, episode statistics in ``info``).
"""

from podracer.host_envs.envpool import AtariOptions, EnvpoolEnvironment, make

__all__ = ["AtariOptions", "EnvpoolEnvironment", "make"]
