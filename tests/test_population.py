"""Tournament-based ensemble training: the tournament on hand-made scores, the leaderboard,
independence with the tournament off, members against separate runs (bit for bit with
member_loop="map"), explicit hyper-parameters, sharding over devices, and learning on versus
off."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.agents import PPOConfig, SACConfig
from podracer.errors import ConfigError
from podracer.loops.anakin import AnakinConfig, train
from podracer.population import ensemble as pop

PPO = PPOConfig(num_epochs=2, num_minibatches=2, hidden_sizes=(32, 32))
SMALL = AnakinConfig(num_envs=4, rollout_len=16)
ENV = "gymnax:CartPole-v1"


def leaves(tree, i=None):
    out = [np.asarray(jax.random.key_data(x) if _is_key(x) else x) for x in jax.tree.leaves(tree)]
    return out if i is None else [x[i] for x in out]


def _is_key(x):
    return jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


# --- the tournament on hand-made scores ---------------------------------------------------------

SCORES = jnp.asarray([5.0, 1.0, 9.0, 3.0, 7.0, 2.0, 8.0, 0.0])  # bottom 2: 7, 1; top 2: 2, 6


def test_truncation_replaces_the_bottom_with_copies_of_the_top():
    parents_seen = set()
    for seed in range(20):
        src = np.asarray(pop.select_parents(jax.random.key(seed), SCORES, num_replaced=2))
        kept = [i for i in range(8) if i not in (1, 7)]
        np.testing.assert_array_equal(src[kept], kept)
        assert set(src[[1, 7]]) <= {2, 6}
        parents_seen |= set(src[[1, 7]])
    assert parents_seen == {2, 6}  # both top members are drawn
    # Nothing to replace: every member keeps itself.
    np.testing.assert_array_equal(
        pop.select_parents(jax.random.key(0), SCORES, num_replaced=0), np.arange(8)
    )


def test_k_way_tournament_draws_parents_from_all_but_the_bottom():
    src = np.asarray(
        pop.select_parents(
            jax.random.key(0), SCORES, num_replaced=2, selection="tournament", tournament_size=60
        )
    )
    np.testing.assert_array_equal(src[[1, 7]], [2, 2])  # 60 draws from 6: the best one wins
    seen = set()
    for seed in range(30):
        src = pop.select_parents(
            jax.random.key(seed), SCORES, num_replaced=2, selection="tournament", tournament_size=1
        )
        seen |= set(np.asarray(src)[[1, 7]])
    assert seen == {0, 2, 3, 4, 5, 6}  # one draw: any member that is not replaced


def test_nan_scores_count_as_the_lowest():
    scores = jnp.asarray([1.0, jnp.nan, 3.0, 2.0])
    src = np.asarray(pop.select_parents(jax.random.key(0), scores, num_replaced=1))
    assert src[1] == 2 and list(src[[0, 2, 3]]) == [0, 2, 3]


def test_perturbation_stays_within_factors_and_bounds():
    bounds = {"lr": pop.Space(1e-6, 1e-2, log=True), "ent_coef": pop.Space(0.0, 0.05)}
    values = {"lr": jnp.full(400, 1e-3), "ent_coef": jnp.full(400, 0.045)}
    replaced = jnp.arange(400) % 2 == 0
    out = pop.perturb(
        jax.random.key(1), values, replaced, bounds, factors=(0.8, 1.25), resample_prob=0.0
    )
    lr, ent = np.asarray(out["lr"]), np.asarray(out["ent_coef"])
    np.testing.assert_array_equal(lr[1::2], 1e-3 * np.ones(200, np.float32))  # kept
    ratios = lr[::2] / np.float32(1e-3)
    assert np.all(np.isclose(ratios, 0.8) | np.isclose(ratios, 1.25))
    assert 60 < np.sum(np.isclose(ratios, 0.8)) < 140  # both factors drawn
    # 0.045 x 1.25 = 0.05625 is clipped to the upper bound 0.05.
    assert set(np.round(ent[::2], 6)) == {np.float32(0.036), np.float32(0.05)}
    resampled = pop.perturb(
        jax.random.key(2), values, replaced, bounds, factors=(0.8, 1.25), resample_prob=1.0
    )
    drawn = np.asarray(resampled["lr"])[::2]
    assert np.all((drawn >= 1e-6) & (drawn <= 1e-2))
    assert np.mean(drawn < 1e-4) > 0.3  # log-uniform: half the draws below the middle decade


@pytest.fixture(scope="module")
def small_population():
    """A 4-member population's system and initial state (tournament every 2 updates)."""
    config = pop.PopulationConfig(size=4, interval=2, fraction=0.25, init=("lr=1e-4:1e-3",))
    system = pop.build(ENV, PPO, SMALL, config, total_timesteps=64 * 4, devices=jax.devices()[:1])
    return config, system, system.init(0)


@pytest.mark.slow
def test_tournament_step_copies_params_and_optimizer_state_exactly(small_population):
    config, system, state = small_population
    state, _ = system.make_step(1)(jax.tree.map(jnp.copy, state))  # moments are non-zero
    scores = jnp.asarray([3.0, 9.0, 1.0, 5.0])  # member 2 is replaced by a copy of member 1
    bounds = pop.spaces("ppo", config)
    new, events = pop.tournament_step(state, scores, config, bounds, jax.random.key(0))
    np.testing.assert_array_equal(events["src"], [0, 1, 1, 3])
    np.testing.assert_array_equal(events["replaced"], [False, False, True, False])
    for old, copied in zip(leaves(state.learner.params), leaves(new.learner.params), strict=True):
        np.testing.assert_array_equal(copied[2], old[1])
        np.testing.assert_array_equal(copied[[0, 1, 3]], old[[0, 1, 3]])
    for old, copied in zip(
        leaves(state.learner.opt_state), leaves(new.learner.opt_state), strict=True
    ):
        np.testing.assert_array_equal(copied[2], old[1])
    # Its own environments and keys stay; its hyper-parameters are the parent's, perturbed.
    for a, b in zip(leaves(state.rollout), leaves(new.rollout), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(leaves(state.key), leaves(new.key))
    ratio = float(new.hparams["lr"][2]) / float(state.hparams["lr"][1])
    assert np.isclose(ratio, 0.8, rtol=1e-6) or np.isclose(ratio, 1.25, rtol=1e-6)
    kept = np.asarray([0, 1, 3])
    np.testing.assert_array_equal(new.hparams["lr"][kept], state.hparams["lr"][kept])
    # Lineage: whose copy, since when, how many times.
    np.testing.assert_array_equal(new.periodic.parent, [0, 1, 1, 3])
    np.testing.assert_array_equal(new.periodic.born, [0, 0, 1, 0])
    np.testing.assert_array_equal(new.periodic.copies, [0, 0, 1, 0])


def test_leaderboard_record_ranks_and_lineage():
    events = {
        "scores": np.asarray([3.0, 9.0, 1.0, np.nan]),
        "hparams": {"lr": np.asarray([1e-3, 2e-3, 3e-3, 4e-3], np.float32)},
        "parent": np.asarray([0, 1, 1, 3]),
        "born": np.asarray([0, 0, 4, 0]),
        "copies": np.asarray([0, 0, 1, 0]),
        "src": np.asarray([0, 1, 2, 1]),
        "replaced": np.asarray([False, False, False, True]),
        "hparams_after": {"lr": np.asarray([1e-3, 2e-3, 3e-3, 2.5e-3], np.float32)},
    }
    record = pop.leaderboard_record(events, updates=10, tournament=True)
    assert [m["member"] for m in record["members"]] == [1, 0, 2, 3]
    assert [m["rank"] for m in record["members"]] == [1, 2, 3, 4]
    third = record["members"][2]
    assert third == {
        "member": 2,
        "score": 1.0,
        "rank": 3,
        "hparams": {"lr": pytest.approx(3e-3)},
        "age": 6,
        "parent": 1,
        "since": 4,
        "copies": 1,
    }
    assert record["members"][3]["score"] is None
    assert record["replaced"] == [
        {"member": 3, "parent": 1, "hparams": {"lr": pytest.approx(2.5e-3)}}
    ]
    assert record["best_member"] == 1 and record["best_score"] == 9.0
    assert record["median_score"] == 3.0 and record["scores"][3] is None


def test_default_hyper_parameters_are_those_the_agent_has():
    """No ``hparams`` given: lr, and the entropy coefficient where the agent has one (PPO's
    ent_coef, IMPALA's entropy_cost), in that order; given,
    exactly those (an agent without ent_coef refuses it)."""
    names = ("ppo", "impala", "sac", "dqn", "qlambda", "pqn", "muzero")
    carried = {name: list(pop.spaces(name, pop.PopulationConfig())) for name in names}
    assert carried["ppo"] == ["lr", "ent_coef"] and carried["impala"] == ["lr", "entropy_cost"]
    for name in ("sac", "dqn", "qlambda", "pqn", "muzero"):
        assert carried[name] == ["lr"], (name, carried[name])
    explicit = pop.PopulationConfig(hparams=("gamma", "lr"))
    assert list(pop.spaces("sac", explicit)) == ["gamma", "lr"]
    with pytest.raises(ConfigError, match=r"names 'ent_coef', which sac cannot carry"):
        pop.spaces("sac", pop.PopulationConfig(hparams=("lr", "ent_coef")))
    config = pop.PopulationConfig(size=4, init=("lr=1e-4:1e-3",))
    values = pop.initial_hparams(SACConfig(), config, pop.spaces("sac", config))
    assert list(values) == ["lr"]
    np.testing.assert_allclose(values["lr"], [1e-4, 10 ** (-11 / 3), 10 ** (-10 / 3), 1e-3])


def test_config_errors_name_field_and_value():
    with pytest.raises(ConfigError, match=r"PopulationConfig.fraction=0.6 .* \(0, 0.5\]"):
        pop.PopulationConfig(fraction=0.6)
    with pytest.raises(ConfigError, match=r"fraction=0.1 .* size=4: it replaces no member"):
        pop.PopulationConfig(size=4, fraction=0.1)
    with pytest.raises(ConfigError, match=r"PopulationConfig.selection='best' .* truncation"):
        pop.PopulationConfig(selection="best")
    with pytest.raises(ConfigError, match=r"init entry 'lr=1e-2' .* NAME=LOW:HIGH"):
        pop.PopulationConfig(init=("lr=1e-2",))
    with pytest.raises(ConfigError, match=r"init names gamma, which .*hparams=\('lr',\)"):
        pop.PopulationConfig(hparams=("lr",), init=("gamma=0.9:0.99",))
    # With the default hyper-parameters the names are the agent's: checked against them.
    with pytest.raises(ConfigError, match=r"init names gamma, which .*\('lr', 'ent_coef'\)"):
        pop.spaces("ppo", pop.PopulationConfig(init=("gamma=0.9:0.99",)))
    with pytest.raises(ConfigError, match=r"bounds names ent_coef, which .*\('lr',\) does"):
        pop.spaces("sac", pop.PopulationConfig(bounds=("ent_coef=0:1",)))
    with pytest.raises(ConfigError, match=r"names 'epsilon', which ppo cannot carry.*lr, gamma"):
        pop.spaces("ppo", pop.PopulationConfig(hparams=("epsilon",)))
    with pytest.raises(ConfigError, match=r"initial lr values 1e-09..0.001 are outside"):
        pop.initial_hparams(
            PPO,
            pop.PopulationConfig(init=("lr=1e-9:1e-3",)),
            pop.spaces("ppo", pop.PopulationConfig()),
        )
    with pytest.raises(ConfigError, match=r"member_shards=3 is not allowed with 4 members"):
        pop.build(
            ENV,
            PPO,
            dataclasses.replace(SMALL, member_shards=3),
            pop.PopulationConfig(size=4),
            total_timesteps=64,
        )


def test_initial_spreads_are_geometric_on_a_log_scale():
    config = pop.PopulationConfig(size=4, init=("lr=1e-5:1e-2", "ent_coef=0:0.03"))
    values = pop.initial_hparams(PPO, config, pop.spaces("ppo", config))
    np.testing.assert_allclose(values["lr"], [1e-5, 1e-4, 1e-3, 1e-2], rtol=1e-6)
    np.testing.assert_allclose(values["ent_coef"], [0.0, 0.01, 0.02, 0.03], rtol=1e-6)


# --- whole runs -----------------------------------------------------------------------------------

TOTAL = 6 * 64  # 6 updates of 4 envs x 16 steps; leaderboards after updates 2, 4 and 6


def run_population(config, devices, anakin=SMALL, hparams=None, seed=0):
    return pop.train(
        ENV, PPO, anakin, config, seed=seed, total_timesteps=TOTAL, devices=devices, hparams=hparams
    )


@pytest.mark.slow
def test_tournament_off_members_are_independent_runs():
    off = pop.PopulationConfig(size=4, interval=2, tournament=False, eval_episodes=2)
    devices = jax.devices()[:1]
    lrs = [1e-3, 3e-4, 1e-4, 3e-5]
    result = run_population(off, devices, hparams={"lr": lrs})
    assert len(result.events) == 3 and all(e["replaced"] == [] for e in result.events)
    # Member 1 does not depend on the others, bit for bit: other members' hyper-parameters
    # changed, member 1's params, optimizer state, environments and scores stay.
    others = run_population(off, devices, hparams={"lr": [5e-3, 3e-4, 2e-2, 1e-6]})
    for a, b in zip(leaves(result.state, 1), leaves(others.state, 1), strict=True):
        np.testing.assert_array_equal(a, b)
    assert [e["scores"][1] for e in result.events] == [e["scores"][1] for e in others.events]
    assert (
        leaves(result.state.learner.params, 0)[0].tolist()
        != leaves(others.state.learner.params, 0)[0].tolist()
    )
    # Member i against the plain run with seed i and its hyper-parameters: below, to rounding
    # (vmap) and bit for bit (member_loop="map").


@pytest.mark.slow
def test_population_sharded_over_two_devices_equals_unsharded(two_devices):
    config = pop.PopulationConfig(size=4, interval=2, init=("lr=1e-4:1e-2",), eval_episodes=2)
    one = run_population(config, two_devices[:1])
    two = run_population(config, two_devices, dataclasses.replace(SMALL, member_shards=2))
    sharding = jax.tree.leaves(two.state.learner.params)[0].sharding
    assert sharding.spec[0] == "member" and sharding.mesh.shape["member"] == 2
    for a, b in zip(leaves(one.state), leaves(two.state), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for e1, e2 in zip(one.events, two.events, strict=True):
        np.testing.assert_allclose(e1["scores"], e2["scores"])
        assert [(r["member"], r["parent"]) for r in e1["replaced"]] == [
            (r["member"], r["parent"]) for r in e2["replaced"]
        ]
        for r1, r2 in zip(e1["replaced"], e2["replaced"], strict=True):
            assert r1["hparams"] == pytest.approx(r2["hparams"], rel=1e-6)
    assert sum(len(e["replaced"]) for e in one.events) == 3  # one per tournament


@pytest.mark.slow
def test_tournament_rescues_learning_rates_that_fail():
    """8 members with learning rates 1e-6 .. 1e-3 on CartPole: alone, the small ones barely
    learn; with the tournament, their slots are taken over by copies of the good ones."""
    anakin = AnakinConfig(num_envs=4, rollout_len=128)
    finals = {}
    for on in (True, False):
        config = pop.PopulationConfig(
            size=8, interval=5, tournament=on, init=("lr=1e-6:1e-3",), eval_episodes=8
        )
        result = pop.train(
            ENV,
            PPOConfig(),
            anakin,
            config,
            seed=0,
            total_timesteps=40_000,
            devices=jax.devices()[:1],
        )
        finals[on] = result.summary
    on, off = finals[True], finals[False]
    assert on["final_median_score"] >= off["final_median_score"] + 150
    assert on["final_best_score"] >= off["final_best_score"]
    assert on["final_median_score"] >= 400


# --- members against separate runs: bit for bit (member_loop="map") and to rounding (vmap) -----

TINY_PPO = PPOConfig(num_epochs=1, num_minibatches=2, hidden_sizes=(8, 8))
TINY = AnakinConfig(num_envs=2, rollout_len=8)
TINY_TOTAL = 3 * 16  # 3 updates of 2 envs x 8 steps
# Every traced kind of use: the optimizer (lr), the loss (clip_eps, ent_coef), the targets (gamma).
HPARAMS = {
    "lr": [1e-3, 3e-4, 1e-4],
    "clip_eps": [0.1, 0.2, 0.3],
    "gamma": [0.9, 0.95, 0.99],
    "ent_coef": [0.0, 0.01, 0.05],
}


def member_hparams(i):
    return {name: values[i] for name, values in HPARAMS.items()}


@pytest.fixture(scope="module")
def separate_runs():
    """Member i's run on its own: plain Anakin, seed i, member i's values in the PPO config."""
    return [
        train(
            ENV,
            dataclasses.replace(TINY_PPO, **member_hparams(i)),
            TINY,
            seed=i,
            total_timesteps=TINY_TOTAL,
            devices=jax.devices()[:1],
        )
        for i in range(3)
    ]


def tiny_population(member_loop="vmap", hparams=HPARAMS):
    size = len(hparams["lr"])
    config = pop.PopulationConfig(
        size=size,
        interval=3,
        tournament=False,
        hparams=tuple(HPARAMS),
        eval_episodes=1,
        eval_max_steps=50,
    )
    return pop.train(
        ENV,
        TINY_PPO,
        dataclasses.replace(TINY, member_loop=member_loop),
        config,
        seed=0,
        total_timesteps=TINY_TOTAL,
        devices=jax.devices()[:1],
        hparams=hparams,
    )


def assert_member_is_run(result, i, alone, exact):
    """Member i of a population against a separate run: params, optimizer state and update count,
    environments and episode statistics, acting key, and every per-update metric."""
    assert result.history.keys() >= alone.history.keys()
    parts = [
        (result.state.learner, alone.state.learner),
        (result.state.rollout, alone.state.rollout),
        (result.state.key, alone.state.key),
        ({k: result.history[k] for k in alone.history}, alone.history),
    ]
    compared = 0
    for ours, theirs in parts:
        for a, b in zip(leaves(ours, i), leaves(theirs, 0), strict=True):
            if exact or a.dtype.kind not in "fc":
                np.testing.assert_array_equal(a, b)
            else:
                np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
            compared += 1
    assert compared > 20
    # The episode statistics are counted, not rounded: equal either way.
    for name in ("episodes", "return_sum", "length_sum"):
        np.testing.assert_array_equal(result.history[name][i], alone.history[name][0])
    assert alone.history["episodes"][0].sum() > 0


@pytest.mark.slow
def test_member_loop_map_members_equal_separate_runs_bitwise(separate_runs):
    """The issue's exact setting: tournament off, members one after another (lax.map), one
    device — member i IS the run with seed i and its lr, clip_eps, gamma and ent_coef."""
    result = tiny_population("map")
    np.testing.assert_array_equal(result.state.hparams["gamma"], np.float32(HPARAMS["gamma"]))
    for i, alone in enumerate(separate_runs):
        assert_member_is_run(result, i, alone, exact=True)


@pytest.mark.slow
def test_vmapped_members_with_traced_clip_gamma_ent_match_separate_runs(separate_runs):
    """The default (vmap): the same members agree with their separate runs to rounding (the
    batched bias-gradient sums round differently, docs/design.md), and not bitwise."""
    result = tiny_population("vmap")
    for i, alone in enumerate(separate_runs):
        assert_member_is_run(result, i, alone, exact=False)
    differs = [
        not np.array_equal(a, b)
        for a, b in zip(
            leaves(result.state.learner.params, 0),
            leaves(separate_runs[0].state.learner.params, 0),
            strict=True,
        )
    ]
    assert any(differs)  # if this fails, vmap became exact: docs/design.md should say so


@pytest.mark.slow
def test_one_member_population_is_the_single_run_bitwise(separate_runs):
    result = tiny_population("vmap", hparams={k: v[:1] for k, v in HPARAMS.items()})
    assert_member_is_run(result, 0, separate_runs[0], exact=True)


def test_member_loop_is_validated():
    with pytest.raises(ConfigError, match=r"AnakinConfig.member_loop='scan' .* vmap, map"):
        AnakinConfig(member_loop="scan")


def test_explicit_hparams_are_validated_like_initial_ones():
    config = pop.PopulationConfig(size=3, tournament=False, hparams=("lr", "clip_eps"))

    def build(hparams, population=config):
        return pop.build(ENV, PPO, SMALL, population, total_timesteps=64, hparams=hparams)

    with pytest.raises(
        ConfigError, match=r"hparams\['lr'\] member 2: lr=0.5 is not allowed: .* 1e-06..0.1"
    ):
        build({"lr": [1e-3, 1e-4, 0.5]})
    with pytest.raises(ConfigError, match=r"hparams\['clip_eps'\] member 0: clip_eps=nan"):
        build({"clip_eps": [float("nan"), 0.2, 0.2]})
    # Bounds wider than the agent allows: the agent config's own check, naming the member.
    wide = dataclasses.replace(config, bounds=("clip_eps=0:1",))
    with pytest.raises(
        ConfigError, match=r"hparams\['clip_eps'\] member 1: PPOConfig.clip_eps=0.0 .* > 0"
    ):
        build({"clip_eps": [0.2, 0.0, 0.2]}, wide)
    with pytest.raises(ConfigError, match=r"hparams\['gamma'\] is not allowed: .* lr, clip_eps"):
        build({"gamma": [0.9, 0.9, 0.9]})
    with pytest.raises(ConfigError, match=r"with 3 values .* not \(2,\)"):
        build({"lr": [1e-3, 1e-4]})


def test_leaderboard_console_line_shows_age_and_lineage():
    from rich.console import Console

    from podracer.runs.logging import leaderboard_line

    record = {
        "step": 40_960,
        "median_score": 88.5,
        "members": [
            {"member": 5, "score": 412.0, "hparams": {"ent_coef": 0.008, "lr": 0.00125},
             "age": 20, "parent": 2, "since": 60, "copies": 1},
            {"member": 2, "score": 301.25, "hparams": {"ent_coef": 0.01, "lr": 0.001},
             "age": 80, "parent": 2, "since": 0, "copies": 0},
            {"member": 0, "score": None, "hparams": {"ent_coef": 0.01, "lr": 1e-5},
             "age": 10, "parent": 7, "since": 70, "copies": 3},
            {"member": 1, "score": 1.0, "hparams": {"ent_coef": 0.01, "lr": 1e-6},
             "age": 80, "parent": 1, "since": 0, "copies": 0},
        ],
        "replaced": [{"member": 1, "parent": 5, "hparams": {}}],
    }  # fmt: skip
    line = leaderboard_line(record)
    assert line == (
        "[bold]leaderboard[/] steps      40,960  best "
        "#5 412.00 (ent_coef 0.008, lr 0.00125; age 20 <-#2@60)  "
        "#2 301.25 (ent_coef 0.01, lr 0.001; age 80)  "
        "#0 n/a (ent_coef 0.01, lr 1e-05; age 10 <-#7@70)  "
        "median 88.50  replaced 1<-5"
    )
    console = Console(record=True, width=300, highlight=False)
    console.print(line)
    assert "#5 412.00 (ent_coef 0.008, lr 0.00125; age 20 <-#2@60)" in console.export_text()
    no_hparams = {**record, "members": [{**record["members"][1], "hparams": {}}], "replaced": []}
    assert "best #2 301.25 (age 80)  median 88.50  replaced none" in leaderboard_line(no_hparams)
