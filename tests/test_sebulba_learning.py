"""Sebulba PPO learns CartPole: through the gymnasium adapter, and with PPO's default lr.

Both run in Sebulba's default (non-deterministic) mode, one actor device and one learner
device, as users run it. The thresholds come from measured runs on 2 CPU cores (wall times
there: about 35-70 s for the gymnasium test, 20-45 s for the default-lr test).
"""

import jax
import pytest

from podracer.agents import PPOConfig
from podracer.loops.sebulba import SebulbaConfig

pytestmark = pytest.mark.slow  # the full tier (docs/design.md, "Tests")


def config():
    return SebulbaConfig(
        actor_device_ids=(0,), learner_device_ids=(1,), envs_per_actor=32, rollout_len=32
    )


def learn(env_id, agent_config, total_timesteps):
    from podracer.loops.sebulba import train

    result = train(
        env_id,
        agent_config,
        config(),
        seed=0,
        total_timesteps=total_timesteps,
        devices=jax.devices()[:2],
    )
    print(result.summary)
    return result


@pytest.mark.slow
def test_sebulba_ppo_learns_gymnasium_cartpole():
    # Measured final_return with this config (800k steps, lr=1e-3 annealed): 500.0 for each of
    # seeds 0-9, and for seed 0 in two more runs (12 of 12 runs). At 500k steps, 1 run in 10
    # ended at 278 (a mid-run collapse that had not recovered), hence 800k.
    result = learn("gymnasium:CartPole-v1", PPOConfig(lr=1e-3), 800_000)
    assert result.summary["final_return"] >= 450.0
    assert 0.0 <= result.summary["policy_lag_mean"] <= 2.0


@pytest.mark.slow
def test_sebulba_ppo_learns_with_its_default_learning_rate():
    # PPOConfig() (lr=2.5e-4, annealed), 500k steps on envpool CartPole; random play scores
    # about 22. Non-deterministic mode, so a seed does not fix the result. Measured final_return
    # with the value clipping centred on the learnt params' value (the code as it is), seeds
    # 0-5: 235.4 and 269.8 (seed 0, twice), 498.8, 495.5, 492.5, 490.1, 492.8; with it centred
    # on the actors' value, seeds 0-3: 460.8, 499.2, 381.2, 469.5. 150 leaves margin.
    result = learn("envpool:CartPole-v1", PPOConfig(), 500_000)
    assert result.summary["final_return"] >= 150.0
    assert 0.0 <= result.summary["policy_lag_mean"] <= 2.0
