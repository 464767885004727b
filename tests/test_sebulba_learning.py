"""Sebulba PPO learns CartPole: through the gymnasium adapter, and with PPO's default lr.

Both run in Sebulba's default (non-deterministic) mode, one actor device and one learner
device, as users run it. The thresholds come from measured runs on 2 CPU cores (wall times
there: about 35-70 s for the gymnasium test, 20-45 s for the default-lr test).
"""

import jax
import pytest

from podracer.agents import PPOConfig
from podracer.sebulba import SebulbaConfig


def config():
    return SebulbaConfig(
        actor_device_ids=(0,), learner_device_ids=(1,), envs_per_actor=32, rollout_len=32
    )


@pytest.mark.slow
def test_sebulba_ppo_learns_gymnasium_cartpole():
    from podracer.sebulba import train

    # Measured final_return with this config (800k steps, lr=1e-3 annealed): 500.0 for each of
    # seeds 0-9, and for seed 0 in two more runs (12 of 12 runs). At 500k steps, 1 run in 10
    # ended at 278 (a mid-run collapse that had not recovered), hence 800k.
    result = train(
        "gymnasium:CartPole-v1",
        PPOConfig(lr=1e-3),
        config(),
        seed=0,
        total_timesteps=800_000,
        devices=jax.devices()[:2],
    )
    print(result.summary)
    assert result.summary["final_return"] >= 450.0
    assert 0.0 <= result.summary["policy_lag_mean"] <= 2.0


@pytest.mark.slow
def test_sebulba_ppo_learns_with_its_default_learning_rate():
    from podracer.sebulba import train

    # PPOConfig() (lr=2.5e-4, annealed), 500k steps on envpool CartPole; random play scores
    # about 22. Measured final_return, seeds 0-9: 470.1, 491.4, 439.1, 467.7, 426.2, 474.4,
    # 430.9, 382.6, 462.3, 465.1; seed 0 again: 429.1, 460.8 (min 382.6). 250 leaves margin.
    result = train(
        "envpool:CartPole-v1",
        PPOConfig(),
        config(),
        seed=0,
        total_timesteps=500_000,
        devices=jax.devices()[:2],
    )
    print(result.summary)
    assert result.summary["final_return"] >= 250.0
    assert 0.0 <= result.summary["policy_lag_mean"] <= 2.0
