"""The pure core shared by every loop: returns, rollout, learner. No threads, devices or I/O."""

from podracer.core.learner.build import make_learner
from podracer.core.returns import gae
from podracer.core.rollout import RolloutState, make_rollout, reset_envs

__all__ = ["RolloutState", "gae", "make_learner", "make_rollout", "reset_envs"]
