"""The features every environment has, on a suite with dict observations and legal-action
masks (Jumanji's Snake, whose shard_map runs unchecked): vmapped seeds on two devices with
checkpoints, an exact resume, evaluation, and a population with its tournament."""

import jax
import numpy as np
import pytest
from resume_check import straight_and_resumed

from podracer import runs
from podracer.agents import PPOConfig
from podracer.loops.anakin import AnakinConfig
from podracer.population import ensemble as pop

pytest.importorskip("jumanji")

ENV = "jumanji:Snake-v1"
PPO = PPOConfig(num_epochs=1, num_minibatches=2, hidden_sizes=(32,))
SPEC = runs.RunSpec(
    arch="anakin",
    agent="ppo",
    env=ENV,
    seed=1,
    total_timesteps=4 * 64,
    agent_config=PPO,
    arch_config=AnakinConfig(num_envs=4, rollout_len=16, num_seeds=2, updates_per_call=2),
    options=runs.RunOptions(checkpoint_interval=2, eval_interval=2, eval_episodes=2),
)


@pytest.mark.slow
def test_seeds_on_two_devices_resume_exactly_and_evaluate(tmp_path, two_devices):
    straight, _ = straight_and_resumed(SPEC, tmp_path, two_devices, [2, 4])
    evaluated = runs.evaluate_run(straight, episodes=2)
    assert evaluated["updates"] == 4 and evaluated["episodes"] == 4  # 2 seeds x 2 episodes
    assert 0 <= evaluated["min"] <= evaluated["mean"] <= evaluated["max"]  # fruits eaten


@pytest.mark.slow
def test_population_tournament_on_dict_observations(one_device):
    config = pop.PopulationConfig(size=2, interval=2, fraction=0.5, eval_episodes=1)
    result = pop.train(
        ENV,
        PPO,
        AnakinConfig(num_envs=4, rollout_len=16),
        config,
        seed=0,
        total_timesteps=4 * 64,
        devices=one_device,
    )
    assert len(result.events) == 2
    for event in result.events:
        assert len(event["scores"]) == 2 and all(np.isfinite(event["scores"]))
        assert len(event["replaced"]) == 1  # the weaker member replaced by the stronger's copy
    params = jax.tree.leaves(result.state.learner.params)[0]
    assert params.shape[0] == 2
