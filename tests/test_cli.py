"""The ``podracer`` command line, run as a user runs it (a subprocess)."""

import json
import os
import subprocess
import sys

import pytest

from podracer.cli import parse


def parse_train_args(argv):
    """``podracer train ARGV``'s configs: ``argv`` parsed once, as the command line does."""
    return parse.parse_train_args(parse.parse_selectors(argv))


REQUIRED = {"total_steps", "sps", "compile_s", "final_return", "params_checksum"}


def podracer(*args, timeout=240):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    return subprocess.run(
        [sys.executable, "-m", "podracer.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.mark.slow
def test_train_prints_progress_and_a_final_json_line(tmp_path):
    proc = podracer(
        "train",
        "--run-dir",
        str(tmp_path / "run"),
        "--arch",
        "anakin",
        "--agent",
        "ppo",
        "--env",
        "gymnax:CartPole-v1",
        "--total-timesteps",
        "4096",
        "--seed",
        "3",
        "--arch.num-envs",
        "8",
        "--agent.num_minibatches",
        "2",
        "--arch.rollout-len",
        "64",
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(summary) >= REQUIRED
    assert summary["total_steps"] == 4096 and summary["seed"] == 3
    assert isinstance(summary["params_checksum"], float)
    assert "steps" in proc.stderr and "sps" in proc.stderr  # the progress display
    assert summary["run_dir"] == str(tmp_path / "run")
    assert sorted(os.listdir(tmp_path / "run")) == [
        "checkpoints",
        "config.json",
        "metrics.jsonl",
        "tb",
    ]


def test_overrides_reach_the_configs():
    selectors, agent, arch = parse_train_args(
        [
            "--agent",
            "ppo",
            "--agent.lr",
            "3e-4",
            "--agent.num-minibatches",
            "8",
            "--arch.num_envs",
            "64",
            "--agent.hidden-sizes",
            "32",
            "32",
            "32",
            "--seed",
            "5",
        ]
    )
    assert agent.lr == 3e-4 and agent.num_minibatches == 8
    assert agent.hidden_sizes == (32, 32, 32) and arch.num_envs == 64 and selectors.seed == 5
    selectors, agent, arch = parse_train_args(["--agent", "qlambda"])
    assert selectors.env == "catch" and arch.num_envs == 128 and arch.rollout_len == 16


def test_a_bug_keeps_its_traceback(monkeypatch):
    """Only a user's error (ConfigError, CLIError, CheckpointError) becomes one line: a
    ValueError from a bug goes on, with its traceback."""
    from podracer import runs
    from podracer.cli import main as cli

    def bug(*args, **kwargs):
        raise ValueError("operands could not be broadcast together")

    monkeypatch.setattr(runs, "train", bug)
    with pytest.raises(ValueError, match="operands could not be broadcast"):
        cli.main(["train", "--total-timesteps", "512", "--run-dir", "unused"])


def test_help_lists_fields():
    proc = podracer("train", "--agent", "ppo", "--help", timeout=60)
    assert proc.returncode == 0
    for flag in ("--agent.lr", "--agent.num-minibatches", "--arch.num-envs", "--total-timesteps"):
        assert flag in proc.stdout
    for flag in ("--env-param NAME=VALUE", "--env-observe INDICES"):
        assert flag in proc.stdout


@pytest.mark.slow
def test_sebulba_from_the_command_line(tmp_path):
    proc = podracer(
        "train",
        "--run-dir",
        str(tmp_path / "run"),
        "--arch",
        "sebulba",
        "--agent",
        "ppo",
        "--env",
        "envpool:CartPole-v1",
        "--total-timesteps",
        "2048",
        "--arch.envs-per-actor",
        "8",
        "--arch.rollout-len",
        "32",
        "--agent.num-minibatches",
        "2",
        "--quiet",
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(summary) >= REQUIRED and summary["arch"] == "sebulba"
    assert summary["total_steps"] == 2048 and summary["num_updates"] == 8
    bad = podracer("train", "--arch", "sebulba", "--env", "envpool:Cartpole-v1", timeout=60)
    assert bad.returncode == 2 and "envpool:CartPole-v1" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_config_file_then_flags(tmp_path):
    path = tmp_path / "ppo.yaml"
    path.write_text(
        "agent: ppo\nenv: gymnax:Acrobot-v1\nseed: 7\n"
        "agent_config:\n  lr: 0.001\n  hidden_sizes: [16, 16]\n"
        "arch_config:\n  num_envs: 32\noptions:\n  eval_interval: 5\n"
    )
    selectors, agent, arch = parse_train_args(["--config", str(path), "--agent.lr", "3e-4"])
    assert selectors.env == "gymnax:Acrobot-v1" and selectors.seed == 7
    assert agent.lr == 3e-4 and agent.hidden_sizes == (16, 16)  # the flag wins over the file
    assert arch.num_envs == 32 and selectors.options.eval_interval == 5
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"agent_config": {"lr_max": 1.0}}))
    proc = podracer("train", "--config", str(bad), timeout=60)
    assert proc.returncode == 2 and "unknown field(s) lr_max for PPOConfig" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_env_options_from_a_config_file_then_flags(tmp_path):
    path = tmp_path / "memory.yaml"
    path.write_text(
        "env: gymnax:MemoryChain-bsuite\n"
        "env_options:\n  params: {memory_length: 8, max_steps_in_episode: 50}\n"
    )
    selectors, _, _ = parse_train_args(["--config", str(path), "--env-param", "memory_length=3"])
    assert selectors.env_options.param_dict == {"max_steps_in_episode": 50, "memory_length": 3}
    selectors, _, _ = parse_train_args(["--env-observe", "2,0", "--env-param", "gravity=9"])
    assert selectors.env_options.observe == (2, 0)
    assert selectors.env_options.param_dict == {"gravity": 9.0}  # CartPole's gravity is a float


def train_episodes(run_dir):
    """The episodes each ``"train"`` record of ``run_dir/metrics.jsonl`` counts."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    return [r["episodes"] for r in records if r["kind"] == "train"]


@pytest.mark.slow
def test_env_param_run_and_resume_keep_memory_length(tmp_path):
    """``--env-param memory_length=3``: MemoryChain's episodes last 4 steps, so each update of
    4 envs x 32 steps counts exactly 32 episodes (the default's 6 steps would give 21 or 22);
    config.json keeps the option and the resumed run steps the same environment."""
    run = str(tmp_path / "run")
    first = podracer(
        "train",
        "--agent",
        "ppo",
        "--env",
        "gymnax:MemoryChain-bsuite",
        "--env-param",
        "memory_length=3",
        "--total-timesteps",
        "4096",
        "--run-dir",
        run,
        "--quiet",
        "--arch.num-envs",
        "4",
        "--arch.rollout-len",
        "32",
        "--agent.num-minibatches",
        "2",
    )
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout.strip().splitlines()[-1])["num_updates"] == 32
    assert train_episodes(run) == [32] * 32
    with open(os.path.join(run, "config.json")) as f:
        assert json.load(f)["env_options"] == {"params": {"memory_length": 3}, "observe": []}
    resumed = podracer("train", "--resume", run, "--total-timesteps", "4608", "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout.strip().splitlines()[-1])["start_update"] == 32
    assert train_episodes(run) == [32] * 36


@pytest.mark.slow
def test_resume_eval_and_plot_from_the_command_line(tmp_path, capsys):
    """Train and resume as subprocesses (as a user runs them); the refusal, ``eval`` and
    ``plot`` through ``podracer.cli.main.main`` in this process (the same code, without three more
    interpreter start-ups)."""
    from podracer.cli import main as cli

    run = str(tmp_path / "run")
    common = ["--arch.num-envs", "4", "--arch.rollout-len", "32", "--agent.num-minibatches", "2"]
    first = podracer(
        "train",
        "--run-dir",
        run,
        "--total-timesteps",
        "512",
        "--quiet",
        "--agent.anneal-lr",
        "False",
        *common,
    )
    assert first.returncode == 0, first.stderr
    resumed = podracer("train", "--resume", run, "--total-timesteps", "1024", "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert summary["start_update"] == 4 and summary["num_updates"] == 8
    straight = podracer(
        "train",
        "--run-dir",
        str(tmp_path / "straight"),
        "--total-timesteps",
        "1024",
        "--quiet",
        "--agent.anneal-lr",
        "False",
        *common,
    )
    expected = json.loads(straight.stdout.strip().splitlines()[-1])
    assert summary["params_checksum"] == expected["params_checksum"]
    with open(os.path.join(run, "config.json")) as f:
        assert json.load(f)["total_timesteps"] == 1024
    capsys.readouterr()
    assert cli.main(["train", "--resume", run, "--agent.lr", "1e-3"]) == 2
    assert "a resumed run keeps its config.json" in capsys.readouterr().err

    assert cli.main(["eval", run, "--episodes", "3"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["episodes"] == 3 and result["updates"] == 8
    assert result["min"] <= result["mean"] <= result["max"]

    out = tmp_path / "curves.png"
    assert cli.main(["plot", run, str(tmp_path / "straight"), "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000


@pytest.mark.slow
def test_sweep_from_the_command_line(tmp_path):
    run = tmp_path / "sweep"
    proc = podracer(
        "sweep",
        "--agent",
        "ppo",
        "--env",
        "gymnax:CartPole-v1",
        "--seeds",
        "2",
        "--sweep.lr",
        "1e-3,3e-4",
        "--total-timesteps",
        "256",
        "--arch.num-envs",
        "4",
        "--arch.rollout-len",
        "16",
        "--agent.num-minibatches",
        "2",
        "--run-dir",
        str(run),
        "--quiet",
    )
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.strip().splitlines()]
    assert [r["lr"] for r in rows] == [1e-3, 3e-4] and all(r["n"] == 2 for r in rows)
    assert {"mean", "median", "iqm", "iqm_ci_low", "iqm_ci_high"} <= set(rows[0])
    with open(run / "results.json") as f:
        results = json.load(f)
    assert [(m["lr"], m["seed"]) for m in results["members"]] == [
        (1e-3, 0),
        (1e-3, 1),
        (3e-4, 0),
        (3e-4, 1),
    ]
    with open(run / "config.json") as f:
        assert json.load(f)["arch_config"]["num_seeds"] == 4
    bad = podracer("sweep", "--sweep.max-grad-norm", "0.5,1", timeout=60)
    assert bad.returncode == 2 and "--sweep.max-grad-norm is not allowed" in bad.stderr


def test_sweep_refuses_resume_in_one_line(capsys):
    from podracer.cli import main as cli

    assert cli.main(["sweep", "--resume", "somewhere", "--seeds", "2"]) == 2
    err = capsys.readouterr().err
    assert "--resume is not allowed in a sweep" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_population_from_the_command_line(tmp_path):
    run = tmp_path / "pop"
    common = [
        "--arch.num-envs",
        "4",
        "--arch.rollout-len",
        "16",
        "--agent.num-minibatches",
        "2",
        "--agent.hidden-sizes",
        "16",
        "--quiet",
    ]
    proc = podracer(
        "train",
        "--population",
        "4",
        "--population.interval",
        "2",
        "--population.init",
        "lr=1e-4:1e-2",
        "--population.eval-episodes",
        "2",
        "--total-timesteps",
        "384",
        "--run-dir",
        str(run),
        *common,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["population"] == 4 and summary["num_seeds"] == 4
    assert len(summary["final_scores"]) == 4 and summary["num_updates"] == 6
    with open(run / "leaderboard.jsonl") as f:
        boards = [json.loads(line) for line in f]
    assert [b["updates"] for b in boards] == [2, 4, 6]
    for board in boards:
        assert {"step", "best_member", "best_score", "median_score", "members", "replaced"} <= set(
            board
        )
        assert [m["rank"] for m in board["members"]] == [1, 2, 3, 4]
        assert len(board["replaced"]) == 1  # floor(0.25 x 4)
        member = board["members"][0]
        assert set(member) == {
            "member",
            "score",
            "rank",
            "hparams",
            "age",
            "parent",
            "since",
            "copies",
        }
        assert set(member["hparams"]) == {"lr", "ent_coef"}
    assert summary["final_scores"] == boards[-1]["scores"]
    with open(run / "config.json") as f:
        config = json.load(f)
    assert config["population"]["size"] == 4 and config["population"]["init"] == ["lr=1e-4:1e-2"]
    with open(run / "metrics.jsonl") as f:
        assert {json.loads(line)["kind"] for line in f} == {"train"}

    resumed = podracer("train", "--resume", str(run), "--total-timesteps", "512", "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    again = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert again["start_update"] == 6 and again["num_updates"] == 8
    with open(run / "leaderboard.jsonl") as f:
        assert [json.loads(line)["updates"] for line in f] == [2, 4, 6, 8]

    out = tmp_path / "population.png"
    plotted = podracer("plot", str(run), "--population", "--out", str(out), timeout=120)
    assert plotted.returncode == 0, plotted.stderr
    assert out.stat().st_size > 10_000


def test_population_fraction_flag_applies_before_the_size_check():
    """``--population 2`` alone replaces no member (0.25 x 2 < 1) and is refused, naming the
    field; with ``--population.fraction 0.5`` it is allowed (one member replaced per round),
    so the default is checked only once the flags are applied."""
    from podracer.errors import ConfigError

    base = ["--agent", "ppo", "--env", "gymnax:CartPole-v1", "--population", "2"]
    selectors, _, arch = parse_train_args([*base, "--population.fraction", "0.5"])
    assert selectors.population_config.fraction == 0.5
    assert selectors.population_config.num_replaced == 1 and arch.num_seeds == 2
    with pytest.raises(ConfigError, match=r"fraction=0.25 is not allowed with size=2"):
        parse_train_args(base)
