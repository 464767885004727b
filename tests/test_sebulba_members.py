"""Members on Sebulba: seeds, sweeps and a population's tournament in one Sebulba program.

Each member has its own environments (its own envpool, seeded as its run alone), the actors act
for every member in one call and the learner updates every member in one call; with
``member_loop="map"`` each member computes exactly what its run alone computes.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from podracer import loops, population, runs
from podracer.agents import IMPALAConfig, PPOConfig
from podracer.envs.host.members import MemberEnvironments
from podracer.loops.anakin import AnakinConfig
from podracer.loops.common import params_checksum
from podracer.loops.sebulba import SebulbaConfig
from podracer.loops.sebulba.actors import member_stats
from podracer.loops.sebulba.learner import recent_scores
from podracer.runs.checkpoint import Checkpointer

PPO = PPOConfig(num_minibatches=2, hidden_sizes=(16,), anneal_lr=False)


def sebulba(**fields) -> SebulbaConfig:
    return SebulbaConfig(
        learner_device_ids=(1,), envs_per_actor=8, rollout_len=16, deterministic=True, **fields
    )


def leaves_equal(a, b) -> bool:
    def raw(x):
        x = np.asarray(
            jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x
        )
        return x

    return all(
        np.array_equal(raw(x), raw(y))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def test_members_are_their_runs_alone_bit_for_bit(two_devices):
    """Two members in one deterministic program (``member_loop="map"``, no tournament) end with
    exactly the params of seed 0 and seed 1 run alone, and report their own returns."""
    steps = 4 * 8 * 16
    both = loops.train(
        "sebulba",
        "envpool:CartPole-v1",
        PPO,
        sebulba(num_seeds=2, member_loop="map"),
        seed=0,
        total_timesteps=steps,
        devices=two_devices,
    )
    assert both.summary["num_seeds"] == 2
    assert both.history["episodes"].shape == (2, 4)
    for member in (0, 1):
        alone = loops.train(
            "sebulba",
            "envpool:CartPole-v1",
            PPO,
            sebulba(),
            seed=member,
            total_timesteps=steps,
            devices=two_devices,
        )
        mine = jax.tree.map(lambda x, m=member: x[m], both.params)
        assert leaves_equal(mine, jax.tree.map(lambda x: x[0], alone.params))
        np.testing.assert_array_equal(
            both.history["episodes"][member], alone.history["episodes"][0]
        )
        assert both.summary["final_return_per_seed"][member] == alone.summary["final_return"]
    # the members differ from each other (their own seeds, their own environments)
    assert not leaves_equal(
        jax.tree.map(lambda x: x[0], both.params), jax.tree.map(lambda x: x[1], both.params)
    )


class FakeEnv:
    """A host environment of ``num_envs`` whose observation is ``offset + env index`` and whose
    step records the actions it was given."""

    def __init__(self, num_envs, offset, batch_size=None):
        self.num_envs, self.offset, self.is_async = num_envs, offset, batch_size is not None
        self.batch_size = batch_size or num_envs
        self.id, self.observation_spec, self.action_spec = "fake", None, None
        self.actions, self.sent, self.closed, self.turn = [], [], False, 0

    def _ts(self, ids):
        from podracer.types import TimeStep

        obs = (self.offset + np.asarray(ids)).astype(np.float32)
        zeros = np.zeros(len(ids), np.float32)
        return TimeStep(obs, zeros, zeros.astype(bool), zeros.astype(bool), obs)

    def reset(self):
        return self._ts(np.arange(self.num_envs))

    def step(self, actions):
        self.actions.append(np.asarray(actions))
        return self._ts(np.arange(self.num_envs))

    def async_reset(self):
        pass

    def recv(self):
        ids = (np.arange(self.batch_size) + self.turn) % self.num_envs
        self.turn += self.batch_size
        return self._ts(ids), ids

    def send(self, actions, env_ids):
        self.sent.append((np.asarray(actions), np.asarray(env_ids)))

    def close(self):
        self.closed = True


def test_member_environments_put_each_members_envs_side_by_side():
    """Sync: member p's environments are rows [p * E, (p + 1) * E) and get those actions; async:
    one batch from each member, ids offset by p * E, each answered with its own part."""
    envs = [FakeEnv(3, 100), FakeEnv(3, 200)]
    both = MemberEnvironments(envs)
    assert (both.num_envs, both.batch_size) == (6, 6)
    np.testing.assert_array_equal(both.reset().obs, [100, 101, 102, 200, 201, 202])
    both.step(np.arange(6))
    np.testing.assert_array_equal(envs[0].actions[0], [0, 1, 2])
    np.testing.assert_array_equal(envs[1].actions[0], [3, 4, 5])
    both.close()
    assert envs[0].closed and envs[1].closed

    envs = [FakeEnv(4, 100, batch_size=2), FakeEnv(4, 200, batch_size=2)]
    both = MemberEnvironments(envs)
    assert both.is_async and (both.num_envs, both.batch_size) == (8, 4)
    ts, ids = both.recv()
    np.testing.assert_array_equal(ids, [0, 1, 4, 5])
    np.testing.assert_array_equal(ts.obs, [100, 101, 200, 201])
    both.send(np.array([7, 8, 9, 10]), ids)
    np.testing.assert_array_equal(envs[0].sent[0][0], [7, 8])
    np.testing.assert_array_equal(envs[0].sent[0][1], [0, 1])
    np.testing.assert_array_equal(envs[1].sent[0][0], [9, 10])
    np.testing.assert_array_equal(envs[1].sent[0][1], [0, 1])


def test_member_stats_and_scores_by_hand():
    """Episode statistics split by member (member-major environments) and a member's score: the
    mean return of its episodes over the last ``interval`` updates."""
    done = np.array([[1, 0, 0, 1], [0, 1, 0, 1]], bool)  # [T=2, 2 members x 2 envs]
    returns = np.array([[5.0, 9.0, 9.0, 7.0], [9.0, 3.0, 9.0, 1.0]])
    lengths = np.array([[5, 9, 9, 7], [9, 3, 9, 1]])
    stats = member_stats(done, returns, lengths, 2)
    np.testing.assert_array_equal(stats.episodes, [2, 2])
    np.testing.assert_array_equal(stats.return_sum, [8.0, 8.0])
    np.testing.assert_array_equal(stats.length_sum, [8, 8])
    history = {
        "episodes": [np.array([9, 9]), np.array([1, 0]), np.array([3, 0])],
        "return_sum": [np.array([99.0, 99.0]), np.array([10.0, 0.0]), np.array([50.0, 0.0])],
    }
    scores = recent_scores(history, 2)
    assert scores[0] == pytest.approx(15.0) and np.isnan(scores[1])


def test_sebulba_tournament_is_anakins(two_devices):
    """Given the same scores, Sebulba's tournament (between updates, on the learner) replaces and
    perturbs the same members as Anakin's (inside its program), copies the parents' params and
    writes the same leaderboard rows."""
    config = population.PopulationConfig(size=4, interval=2)
    scores = np.array([3.0, 1.0, 4.0, 2.0], np.float32)
    systems = [
        population.build_system(
            loops.get("anakin"),
            "gymnax:CartPole-v1",
            *_spec(),
            AnakinConfig(num_envs=4, rollout_len=8),
            config,
            total_timesteps=64,
            seed=0,
            devices=two_devices[:1],
        ),
        population.build_system(
            loops.get("sebulba"),
            "envpool:CartPole-v1",
            *_spec(),
            sebulba(),
            config,
            total_timesteps=8 * 16,
            seed=0,
            devices=two_devices,
        ),
    ]
    rows, copies = [], []
    for system in systems:
        state = system.init(0)
        before = jax.device_get(state.learner.params)
        new, events = jax.jit(system.periodic.apply_scored)(state, scores)
        events = jax.device_get(events)
        src = np.asarray(events["src"])
        after = jax.device_get(new.learner.params)
        for old, now in zip(jax.tree.leaves(before), jax.tree.leaves(after), strict=True):
            np.testing.assert_array_equal(now, old[src])
        copies.append((src, jax.device_get(new.hparams), jax.device_get(new.periodic.parent)))
        rows.append(system.periodic.describe(events, 2))
    # a quarter of 4 is replaced: the lowest (member 1) by a copy of the highest (member 2)
    np.testing.assert_array_equal(copies[0][0], [0, 2, 2, 3])
    np.testing.assert_array_equal(copies[1][0], [0, 2, 2, 3])
    for name in copies[0][1]:
        np.testing.assert_array_equal(copies[0][1][name], copies[1][1][name])
    np.testing.assert_array_equal(copies[0][2], copies[1][2])
    assert rows[0] == rows[1]


def _spec():
    from podracer import agents

    return agents.get("ppo"), PPO


@pytest.mark.slow
def test_sebulba_population_resumes_exactly(tmp_path, two_devices):
    """A 4-member Sebulba population with its tournament (deterministic mode): the state a run
    stopped at update 4 saved is the whole run's state at update 4 (params, hyper-parameters,
    lineage); resumed, it goes on to the end, its leaderboard continuing the first one's."""
    spec = runs.RunSpec(
        arch="sebulba",
        agent="ppo",
        env="envpool:CartPole-v1",
        seed=0,
        total_timesteps=6 * 8 * 16,
        agent_config=PPO,
        arch_config=sebulba(),
        population=population.PopulationConfig(size=4, interval=2),
        options=runs.RunOptions(tensorboard=False, checkpoint_interval=2, keep_checkpoints=8),
    )
    whole = str(tmp_path / "whole")
    summary = runs.train(spec, whole, console=False, devices=two_devices)
    assert summary["num_seeds"] == 4 and len(summary["final_scores"]) == 4
    boards = [r for r in runs_records(whole) if r["kind"] == "leaderboard"]
    assert [b["updates"] for b in boards] == [2, 4, 6]
    assert all(len(b["replaced"]) == 1 for b in boards)
    interrupted = str(tmp_path / "interrupted")
    runs.train(
        dataclasses.replace(spec, total_timesteps=4 * 8 * 16),
        interrupted,
        console=False,
        devices=two_devices,
    )
    template = runs.build_system(spec, two_devices).init(spec.seed)
    with Checkpointer(whole) as checkpointer:
        uninterrupted, _ = checkpointer.restore(template, 4)
    with Checkpointer(interrupted) as checkpointer:
        saved, meta = checkpointer.restore(template)
    assert meta["updates"] == 4 and saved.learner.update_count.tolist() == [4] * 4
    assert leaves_equal(uninterrupted, saved)
    resumed = runs.train(spec, interrupted, resume=True, console=False, devices=two_devices)
    assert resumed["start_update"] == 4 and resumed["num_updates"] == 6
    boards = [r for r in runs_records(interrupted) if r["kind"] == "leaderboard"]
    assert [b["updates"] for b in boards] == [2, 4, 6]
    with Checkpointer(interrupted) as checkpointer:
        final, _ = checkpointer.restore(template)
    assert params_checksum(final.learner.params) == resumed["params_checksum"]


def runs_records(run_dir: str) -> list[dict]:
    import json
    import os

    with open(os.path.join(run_dir, "leaderboard.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_a_sweep_on_sebulba_is_one_program(two_devices):
    """A sweep's grid runs as one Sebulba program: four members, each learning with its
    combination's learning rate (1e-12 leaves a member's params within 1e-9 of where they
    started; 1e-3 moves them)."""
    from podracer.experiments import sweep

    grid = sweep.Grid({"lr": (1e-12, 1e-3)}, seeds=2)
    agent = IMPALAConfig(hidden_sizes=(16,))
    system = sweep.sweep_system(
        loops.get("sebulba"),
        "envpool:CartPole-v1",
        _spec_of(agent),
        agent,
        sebulba(),
        grid,
        total_timesteps=2 * 8 * 16,
        seed=0,
        devices=two_devices,
    )
    assert system.config.num_seeds == 4
    start = jax.device_get(system.init(0).learner.params)
    result = system.run(None, seed=0)
    assert result.summary["num_seeds"] == 4 and result.history["episodes"].shape == (4, 2)
    for member, lr in enumerate([1e-12, 1e-12, 1e-3, 1e-3]):
        moved = max(
            float(np.max(np.abs(last[member] - first[member])))
            for first, last in zip(
                jax.tree.leaves(start), jax.tree.leaves(result.params), strict=True
            )
        )
        assert (moved < 1e-9) if lr < 1e-6 else (moved > 1e-5), (member, moved)


def _spec_of(agent_config):
    from podracer import agents

    return agents.spec_of(agent_config)
