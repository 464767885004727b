"""Every wrong value a user can give the command line: exit status 2, one line that names the
culprit, no traceback, nothing written, and (for what needs no run directory) nothing compiled.

The command line runs in this process (``podracer.cli.main.main(argv)``: the same parsing as
``python -m podracer.cli.main``, without a fresh interpreter per case); ``tests/test_cli.py``
runs it as a subprocess. conftest gives this process two devices, so a size that does not split
over two devices is wrong here.
"""

import json
import logging
import os
import re
import shutil
import stat
import sys

import jax
import jax.numpy as jnp
import pytest

from podracer.cli import main as cli

T = ["--total-timesteps", "512"]

# (argv, text the one line must hold). Files named here are made by `user_files`.
STATIC = [
    # selectors
    (["train", "--agent", "sarsa", *T], "--agent='sarsa' is not allowed: choose one of ppo"),
    (["train", "--arch", "podrace", *T], "--arch='podrace' is not allowed"),
    (["train", "--env", "gymnax:Cartpole-v1", *T], "unknown environment id 'gymnax:Cartpole-v1'"),
    (
        ["train", "--env", "user_env_noid:NoId", *T],
        "environment id 'user_env_noid:NoId' made a NoId, which has no id: it must follow "
        "podracer.types.Environment",
    ),
    (
        ["train", "--env", "user_env_noid:NoStep", *T],
        "made a NoStep, which has no step: it must follow podracer.types.Environment",
    ),
    (["train", "--env", "envpool:CartPole-v1", *T], "is a host environment"),
    (["train", "--env", "brax:nothing", *T], "unknown brax environment 'nothing'"),
    (
        ["train", "--arch", "sebulba", "--env", "envpool:CartPol-v1", *T],
        "envpool task 'CartPol-v1'",
    ),
    (["train", "--agent", "nomod:SPEC", *T], "no module named 'nomod'"),
    (["train", "--env", "nomod:ENV", *T], "no module named 'nomod'"),
    (["train", "--agent", "qlambda", "--env", "gymnax:Pendulum-v1", *T], "takes discrete actions"),
    (["train", "--agent", "sac", "--env", "gymnax:CartPole-v1", *T], "needs a BoundedActionSpec"),
    (["train", "--total-timesteps", "-5"], "--total-timesteps=-5 is not allowed"),
    (["train", "--total-timesteps", "abc"], "--total-timesteps/--total_timesteps: invalid int"),
    (["train", "--total-timesteps", str(10**12)], "--total-timesteps is too large for PPOConfig"),
    (["train", "--seed", "abc", *T], "argument --seed: invalid int value: 'abc'"),
    (["train", "--seed", "-1", *T], "--seed=-1 is not allowed: it must be an integer >= 0"),
    (["train", "--frobnicate", *T], "unrecognized argument '--frobnicate'"),
    (["frobnicate"], "unknown command 'frobnicate'"),
    # agent fields
    (["train", "--agent.lr", "abc", *T], "--agent.lr='abc' is not allowed: PPOConfig.lr takes"),
    (["train", "--agent.lr", "-1", *T], "PPOConfig.lr=-1.0 is not allowed"),
    (["train", "--agent", "impala", "--agent.lr", "0", *T], "IMPALAConfig.lr=0.0 is not allowed"),
    (["train", "--agent.gamma", "1.5", *T], "PPOConfig.gamma=1.5 is not allowed"),
    (["train", "--agent.clip-eps", "-0.1", *T], "PPOConfig.clip_eps=-0.1 is not allowed"),
    (["train", "--agent.num-epochs", "0", *T], "PPOConfig.num_epochs=0 is not allowed"),
    (["train", "--agent.anneal-lr", "yes", *T], "PPOConfig.anneal_lr takes True or False"),
    (["train", "--agent.hidden-sizes", "64", "x", *T], "hidden_sizes takes an integer per item"),
    (["train", "--agent.hidden-sizes", *T], "PPOConfig.hidden_sizes=() is not allowed"),
    (["train", "--agent.lrr", "3", *T], "--agent.lrr is not a field of PPOConfig: did you mean"),
    (["train", "--agent.num-minibatches", "3", *T], "num_minibatches=3 does not divide the 256"),
    (
        ["train", "--agent", "dqn", "--agent.buffer-size", "10", *T],
        "DQNConfig.batch_size=128 is not allowed: it must be at most buffer_size=10",
    ),
    (["train", "--agent", "dqn", "--agent.n-step", "0", *T], "DQNConfig.n_step=0 is not allowed"),
    (
        ["train", "--agent", "dqn", "--agent.prioritised", "maybe", *T],
        "DQNConfig.prioritised takes True or False",
    ),
    (
        ["train", "--agent", "sac", "--env", "gymnax:Pendulum-v1", "--agent.replay-ratio", "0", *T],
        "SACConfig.replay_ratio=0.0 is not allowed",
    ),
    # replay, prioritised replay, n-step returns
    (
        ["train", "--agent", "dqn", "--agent.n-step", "20", "--arch.rollout-len", "8", *T],
        "n_step=20 is not allowed: it must be at most the 8 steps its returns are computed over",
    ),
    (
        ["train", "--agent", "dqn", "--agent.buffer-size", "5000", *T],
        "DQNConfig.learning_starts=10000 is not allowed with buffer_size=5000",
    ),
    (
        ["train", "--agent", "dqn", "--agent.importance-exponent", "2", *T],
        "DQNConfig.importance_exponent=2.0 is not allowed: it must be >= 0.0 and <= 1.0",
    ),
    (
        ["train", "--agent", "dqn", "--agent.priority-exponent", "-1", *T],
        "DQNConfig.priority_exponent=-1.0 is not allowed: it must be >= 0.0",
    ),
    (
        ["train", "--agent", "pqn", "--env", "gymnax:Pendulum-v1", *T],
        "pqn takes discrete actions, not BoundedActionSpec (continuous, of shape (1,))",
    ),
    # networks and memory
    (["train", "--agent.torso", "resnet", *T], "PPOConfig.torso='resnet' is not allowed: choose"),
    (
        ["train", "--agent.memory", "transformer", *T],
        "PPOConfig.memory='transformer' is not allowed: choose one of none, gru, lstm",
    ),
    (
        ["train", "--agent.memory", "gru", "--agent.memory-size", "0", *T],
        "PPOConfig.memory_size=0 is not allowed: it must be > 0",
    ),
    (
        ["train", "--agent.sequence-window", "3", *T],
        "PPOConfig.sequence_window=3 is not allowed with memory='none'",
    ),
    # a user's agent that breaks the AgentSpec contract
    (
        ["train", "--agent", "user_agent_bad:SPEC", *T],
        "--agent 'user_agent_bad:SPEC' is not an AgentSpec (it is a object)",
    ),
    (["train", "--agent", "user_agent_bad:NOPE", *T], "module 'user_agent_bad' has no 'NOPE'"),
    (
        ["train", "--agent", "user_agent_bad:NOT_FROZEN", *T],
        "AgentSpec.config_cls=Loose is not allowed: it must be a frozen dataclass",
    ),
    (
        ["train", "--agent", "user_agent_bad:NOT_CALLABLE", *T],
        "AgentSpec.make_optimizer=float is not allowed: it must be callable",
    ),
    (
        ["train", "--agent", "user_agent_bad:OLD_SHAPE", *T],
        "AgentSpec.make_agent=make_agent is not allowed: it must be a function of (config, "
        "action_spec, num_updates)",
    ),
    # a dry run refuses what a run refuses
    (["train", "--agent.gamma", "1.5", "--dry-run", *T], "PPOConfig.gamma=1.5 is not allowed"),
    # trading environments and the backtest
    (["train", "--env", "trading:absent.csv", *T], "absent.csv: no such file"),
    (["train", "--env", "trading:prices.txt", *T], "the trading ids are trading:synthetic and"),
    (["train", "--env", "trading:bad.csv", *T], "bad.csv line 3, column close: 'abc'"),
    (
        ["train", "--env", "trading:synthetic", "--env-param", "hmax=0", *T],
        "trading:synthetic: hmax=0 is not allowed: it must be >= 1",
    ),
    (
        ["train", "--env", "trading:synthetic", "--env-param", "split=tomorrow", *T],
        "split='tomorrow' is not allowed",
    ),
    (
        ["train", "--env", "trading:synthetic", "--env-param", "period=future", *T],
        "period='future' is not allowed: choose one of train, validation, test",
    ),
    (["backtest", "nowhere"], "'nowhere' is not a run directory"),
    (["backtest", "notjson", "--period", "later"], "argument --period: invalid choice: 'later'"),
    # loop fields and devices
    (["train", "--arch.num-envs", "-4", *T], "AnakinConfig.num_envs=-4 is not allowed"),
    (["train", "--arch.num-envs=4.5", *T], "AnakinConfig.num_envs takes an integer"),
    (["train", "--arch.num-envs", "7", *T], "must be a multiple of the device count (2)"),
    (["train", "--arch.num-seeds", "0", *T], "AnakinConfig.num_seeds=0 is not allowed"),
    (["train", "--arch.rollout-len", "0", *T], "AnakinConfig.rollout_len=0 is not allowed"),
    (["train", "--arch.updates-per-call", "-1", *T], "AnakinConfig.updates_per_call=-1"),
    (
        ["train", "--arch", "sebulba", "--arch.actor-device-ids", "5", *T],
        "SebulbaConfig.actor_device_ids has ids [5] but only 2 local devices exist",
    ),
    (
        ["train", "--arch", "sebulba", "--arch.learner-device-ids", "0", "7", *T],
        "SebulbaConfig.learner_device_ids has ids [7]",
    ),
    (
        ["train", "--arch", "sebulba", "--arch.num-actor-threads", "2", *T],
        "--arch.num-actor-threads is not a field of SebulbaConfig",
    ),
    # run options
    (["train", "--checkpoint-interval", "-2", *T], "--checkpoint-interval=-2 is not allowed"),
    (["train", "--eval-interval", "-1", *T], "--eval-interval=-1 is not allowed"),
    (["train", "--eval-episodes", "0", *T], "--eval-episodes=0 is not allowed"),
    (["train", "--keep-checkpoints", "0", *T], "--keep-checkpoints=0 is not allowed"),
    # processes
    (["train", "--num-processes", "2", *T], "--coordinator, --process-id missing"),
    (
        ["train", "--num-processes", "2", "--process-id", "3", "--coordinator", "h:1", *T],
        "--process-id=3 is not allowed",
    ),
    (["train", "--fault-timeout", "-3", *T], "--fault-timeout=-3 is not allowed"),
    # populations
    (
        ["train", "--population", "4", "--population.init", "lr=1:0", *T],
        "PopulationConfig.init entry 'lr=1:0' is not allowed: write NAME=LOW:HIGH with LOW <= HIGH",
    ),
    (
        ["train", "--population", "4", "--population.selection", "best", *T],
        "PopulationConfig.selection='best' is not allowed: choose one of truncation, tournament",
    ),
    (["train", "--population", "4", "--population.fraction", "0.9", *T], "fraction=0.9"),
    (["train", "--population.interval", "3", *T], "--population.FIELD needs --population P"),
    (
        ["train", "--arch", "sebulba", "--population", "4", "--arch.member-loop", "scan", *T],
        "SebulbaConfig.member_loop='scan' is not allowed: choose one of vmap, map",
    ),
    (
        ["train", "--population", "4", "--population.hparams", "lr", "epsilon", *T],
        "names 'epsilon', which ppo cannot carry",
    ),
    # environment options
    (
        ["train", "--env", "gymnax:MemoryChain-bsuite", "--env-param", "memory_lenght=10", *T],
        "--env-param memory_lenght=10 is not allowed: gymnax:MemoryChain-bsuite has no parameter "
        "'memory_lenght' (did you mean memory_length?); its parameters are max_steps_in_episode, "
        "memory_length",
    ),
    (
        ["train", "--env", "gymnax:MemoryChain-bsuite", "--env-param", "memory_length=ten", *T],
        "--env-param memory_length=ten is not allowed: memory_length of "
        "gymnax:MemoryChain-bsuite takes an integer (its default is 5)",
    ),
    (
        ["train", "--arch", "sebulba", "--env", "gymnax:MemoryChain-bsuite", "--env-param", "x=3"],
        "gymnax:MemoryChain-bsuite has no parameter 'x'; its parameters are max_steps_in_episode",
    ),
    (["train", "--env-param", "memory_length", *T], "--env-param memory_length is not allowed"),
    (["train", "--env-param", "a=1", "--env-param", "a=2", *T], "a is given twice"),
    (
        ["train", "--env", "gymnax:Acrobot-v1", "--env-param", "available_torque=1", *T],
        "available_torque of gymnax:Acrobot-v1 is an array of shape (3,); --env-param sets int",
    ),
    (
        ["train", "--arch", "sebulba", "--env", "envpool:CartPole-v1", "--env-param", "fps=3"],
        "envpool:CartPole-v1 has no parameter 'fps'; its parameters are max_episode_steps, "
        "thread_affinity_offset",
    ),
    (
        [
            "train",
            "--arch",
            "sebulba",
            "--env",
            "gymnasium:CartPole-v1",
            "--env-param",
            "sutton_barto_reward=maybe",
            *T,
        ],
        "sutton_barto_reward of gymnasium:CartPole-v1 takes true or false (its default is False)",
    ),
    (
        ["train", "--env-observe", "0,7", *T],
        "--env-observe 0,7 is not allowed: index 7 is outside gymnax:CartPole-v1's observations "
        "of 4 entries; give distinct indices in 0..3",
    ),
    (["train", "--env-observe", "2,2", *T], "--env-observe 2,2 is not allowed: index 2 is given"),
    (["train", "--env-observe", "0,x", *T], "--env-observe 0,x is not allowed: give comma-sep"),
    (
        ["train", "--env", "gymnax:Breakout-MinAtar", "--env-observe", "0,2", *T],
        "--env-observe 0,2 is not allowed: gymnax:Breakout-MinAtar's observations have shape "
        "(10, 10, 4), not a vector's; --env-observe takes environments with 1-D observations",
    ),
    (
        ["train", "--arch", "sebulba", "--env", "envpool:CartPole-v1", "--env-observe", "1,4", *T],
        "--env-observe 1,4 is not allowed: index 4 is outside envpool:CartPole-v1's observations",
    ),
    (
        ["sweep", "--env-param", "frobnicate=1", "--sweep.lr", "1e-3,3e-3", *T],
        "--env-param frobnicate=1 is not allowed: gymnax:CartPole-v1 has no parameter 'frobnicate'",
    ),
    (
        ["train", "--config", "envopts.yaml", *T],
        "env_options: unknown key(s) param; the keys are params, observe",
    ),
    # files and directories given by the user
    (["train", "--config", "nofile.yaml", *T], "--config='nofile.yaml': no such file"),
    (["train", "--config", "list.yaml", *T], "--config='list.yaml' must hold a mapping"),
    (["train", "--config", "broken.yaml", *T], "--config='broken.yaml' cannot be parsed"),
    (["train", "--config", "fields.yaml", *T], "agent_config: unknown field(s) lrr for PPOConfig"),
    (["train", "--config", "keys.yaml", *T], "unknown key(s) colour"),
    (["train", "--run-dir", "afile", *T], "--run-dir='afile' is a file, not a directory"),
    (["train", "--run-dir", "afile/run", *T], "--run-dir='afile/run' cannot be made"),
    (["train", "--run-dir", "locked/run", *T], "--run-dir='locked/run' cannot be written"),
    (["train", "--resume", "nowhere"], "'nowhere' is not a run directory"),
    (["train", "--resume", "notjson"], "notjson/config.json cannot be read as JSON"),
    (["train", "--resume", "notobject"], "notobject/config.json must hold a JSON object"),
    (["eval", "notjson"], "notjson/config.json cannot be read as JSON"),
    (["eval", "nowhere", "--episodes", "0"], "--episodes=0 is not allowed"),
    (["plot", "--out", "x.png"], "the following arguments are required: PATH"),
    (["plot", "nowhere", "--out", "x.png"], "no metrics file at nowhere/metrics.jsonl"),
    # sweeps
    (["sweep", "--sweep.lrr", "1,2", *T], "--sweep.lrr is not allowed"),
    (["sweep", "--sweep.lr", "a,b", *T], "--sweep.lr='a,b' is not allowed"),
    (["sweep", "--seeds", "x", *T], "--seeds needs an integer"),
    (["sweep", "--resume", "nowhere", *T], "--resume is not allowed in a sweep"),
]


def user_files(root):
    """The files and directories STATIC names, made under ``root``."""
    (root / "afile").write_text("x")
    (root / "list.yaml").write_text("- 1\n- 2\n")
    (root / "broken.yaml").write_text("agent_config: [1\n")
    (root / "fields.yaml").write_text("agent_config: {lrr: 3}\n")
    (root / "keys.yaml").write_text("colour: red\n")
    (root / "envopts.yaml").write_text("env_options: {param: {memory_length: 3}}\n")
    (root / "bad.csv").write_text("date,tic,close\n2020-01-02,A,10\n2020-01-03,A,abc\n")
    (root / "notjson").mkdir()
    (root / "notjson" / "config.json").write_text("{agent: ppo")
    (root / "notobject").mkdir()
    (root / "notobject" / "config.json").write_text("[1, 2]")
    # A user's environment without an id (every other piece of podracer.types.Environment: a
    # wrapped Catch) and one without a step method.
    (root / "user_env_noid.py").write_text(
        "from podracer.envs import Catch\n\n\n"
        "class NoId:\n"
        "    def __init__(self):\n"
        "        self._env = Catch()\n"
        "        self.default_params = self._env.default_params\n"
        "        self.observation_spec = self._env.observation_spec\n"
        "        self.action_spec = self._env.action_spec\n"
        "        self.reset = self._env.reset\n"
        "        self.step = self._env.step\n\n\n"
        "class NoStep(NoId):\n"
        "    id = 'nostep'\n\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        del self.step\n"
    )
    # A user's AgentSpecs: not one, a config that is not frozen, an optimizer that is a number,
    # a make_agent of the old shape (config, action_spec).
    (root / "user_agent_bad.py").write_text(
        "import dataclasses\n\n"
        "from podracer.agents import AgentSpec, ppo\n\n"
        "SPEC = object()\n\n\n"
        "@dataclasses.dataclass\n"
        "class Loose:\n"
        "    lr: float = 1e-3\n\n\n"
        "NOT_FROZEN = ppo.SPEC._replace(config_cls=Loose)\n"
        "NOT_CALLABLE = ppo.SPEC._replace(make_optimizer=0.001)\n\n\n"
        "def make_agent(config, action_spec):\n"
        "    return ppo.make_agent(config, action_spec)\n\n\n"
        "OLD_SHAPE = ppo.SPEC._replace(make_agent=make_agent)\n"
    )
    (root / "locked").mkdir()
    (root / "locked").chmod(stat.S_IRUSR | stat.S_IXUSR)


def listing(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


class Compiled(logging.Handler):
    """The names of the functions XLA compiled while it was attached (``jax.log_compiles``)."""

    def __init__(self):
        super().__init__()
        self.names = []

    def emit(self, record):
        match = re.match(r"Finished XLA compilation of jit\((.+?)\)", record.getMessage())
        if match:
            self.names.append(match.group(1))


def programs(names):
    """The compiled functions that are not one ``jax.numpy`` or ``jax.lax`` operation run eagerly
    (environments make their spaces' bounds so): what a refused run must not compile."""
    return [name for name in names if not hasattr(jnp, name) and not hasattr(jax.lax, name)]


def run_cli(argv, monkeypatch):
    """``(exit status, stderr lines)`` of ``podracer ARGV`` run in this process."""
    errors = []
    monkeypatch.setattr(sys, "stderr", type("E", (), {"write": errors.append, "flush": id})())
    code = cli.main(list(argv))
    return code, "".join(errors).splitlines()


def assert_one_line(code, lines, message):
    """Exit status 2, one ``podracer...error:`` line holding ``message``, no traceback (a preset
    note may come before it); returns the line."""
    errors = [line for line in lines if "error:" in line]
    assert code == 2, lines
    assert len(errors) == 1 and message in errors[0], lines
    assert [line for line in lines if not line.startswith("preset ")] == errors
    assert not any("Traceback" in line for line in lines)
    return errors[0]


# --- docs/errors.md: every case and its whole line, checked by the case itself ---------------

DOC = os.path.join(os.path.dirname(__file__), "..", "docs", "errors.md")
WRITE = os.environ.get("PODRACER_WRITE_ERRORS") == "1"
REGENERATE = "PODRACER_WRITE_ERRORS=1 python -m pytest tests/test_bad_inputs.py -n 0 -p no:randomly"
WRITTEN = {}  # command -> line, when WRITE


def command(argv):
    return "podracer " + " ".join(argv)


def doc_rows() -> dict[str, str]:
    """``{command: line}`` of the table of docs/errors.md."""
    rows = {}
    with open(DOC, encoding="utf-8") as f:
        for row in f:
            if row.startswith("| `podracer "):
                cmd, line = row.strip()[3:-3].split("` | `", 1)
                rows[cmd.replace("\\|", "|")] = line.replace("\\|", "|")
    return rows


def documented(argv, line, root) -> None:
    """The case's whole line (its directory's path taken out) is docs/errors.md's row for it."""
    line = line.replace(f"{root}{os.sep}", "").replace(str(root), ".")
    if WRITE:
        WRITTEN[command(argv)] = line
        return
    assert doc_rows().get(command(argv)) == line, f"docs/errors.md is stale: {REGENERATE}"


@pytest.fixture(scope="module", autouse=True)
def write_errors_doc():
    """With PODRACER_WRITE_ERRORS=1 (and no xdist: one process sees every case), the table of
    docs/errors.md is written from the cases' lines after the module's tests."""
    yield
    if not WRITE:
        return
    assert os.environ.get("PYTEST_XDIST_WORKER") is None, "write docs/errors.md with -n 0"
    with open(DOC, encoding="utf-8") as f:
        head = f.read().split("\n| command |")[0].rstrip("\n")
    rows = [
        f"| `{cmd.replace('|', chr(92) + '|')}` | `{line.replace('|', chr(92) + '|')}` |"
        for cmd, line in WRITTEN.items()
    ]
    with open(DOC, "w", encoding="utf-8") as f:
        f.write(f"{head}\n\n| command | what it prints |\n|---|---|\n" + "\n".join(rows) + "\n")


def test_errors_doc_lists_only_the_cases():
    if WRITE:
        pytest.skip("docs/errors.md is being written")
    cases = {command(argv) for argv, _ in STATIC + WITH_RUN}
    assert set(doc_rows()) <= cases, f"docs/errors.md is stale: {REGENERATE}"
    assert len(doc_rows()) >= 50


def test_there_are_at_least_50_cases():
    assert len(STATIC) + len(WITH_RUN) >= 50 and len({tuple(a) for a, _ in STATIC}) == len(STATIC)


@pytest.mark.parametrize("argv, message", STATIC, ids=[" ".join(a)[:60] for a, _ in STATIC])
def test_bad_input_is_one_line_before_compiling(argv, message, monkeypatch, tmp_path):
    if "locked" in " ".join(argv) and os.geteuid() == 0:
        pytest.skip("root writes into a read-only directory")
    user_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = listing(tmp_path)
    compiled = Compiled()
    logging.getLogger("jax").addHandler(compiled)
    try:
        with jax.log_compiles():
            code, lines = run_cli(argv, monkeypatch)
    finally:
        logging.getLogger("jax").removeHandler(compiled)
    documented(argv, assert_one_line(code, lines, message), tmp_path)
    assert listing(tmp_path) == before  # nothing written for a run that could not start
    assert programs(compiled.names) == []  # refused before compiling anything of the run
    (tmp_path / "locked").chmod(stat.S_IRWXU)


# --- a run directory that exists: checkpoints from another run, steps that do not exist ----


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """A finished 8-update run (4 envs x 16 steps), and copies of it whose config.json names
    another environment, agent or network size than the checkpoint was saved with."""
    root = tmp_path_factory.mktemp("saved")
    flags = ["--arch.num-envs", "4", "--arch.rollout-len", "16", "--agent.num-minibatches", "1"]
    assert cli.main(["train", "--run-dir", str(root / "run"), *T, *flags, "--quiet"]) == 0
    config = json.loads((root / "run" / "config.json").read_text())
    edits = {
        "otherenv": {"env": "gymnax:Acrobot-v1"},
        "otheragent": {"agent": "qlambda", "agent_config": {}},
        "othersize": {"agent_config": {**config["agent_config"], "hidden_sizes": [32]}},
        "otherparam": {"env_options": {"params": {"memory_length": 3}, "observe": []}},
    }
    for name, edit in edits.items():
        shutil.copytree(root / "run", root / name)
        (root / name / "config.json").write_text(json.dumps({**config, **edit}))
    shutil.copytree(root / "run", root / "corrupt")  # a checkpoint whose metadata was cut short
    (root / "corrupt" / "checkpoints" / "8" / "meta" / "metadata").write_text("[")
    return root


WITH_RUN = [
    (["train", "--run-dir", "run", *T], "--run-dir='run' already holds a run (config.json)"),
    (["sweep", "--run-dir", "run", "--sweep.lr", "1e-3,3e-3", *T], "already holds a run"),
    (["train", "--resume", "run", "--agent.lr", "3"], "--resume takes only --total-timesteps"),
    (["train", "--resume", "run", "--resume-step", "7"], "no checkpoint of step 7"),
    (
        ["train", "--resume", "run", "--total-timesteps", "256"],
        "--total-timesteps=256 is not allowed: the run in run has already done 8 updates",
    ),
    (
        ["train", "--resume", "otherenv", "--total-timesteps", "1024"],
        "does not fit this run: its state differs from what the run's config builds (saved by "
        "--agent ppo on --env gymnax:CartPole-v1; .learner.params",
    ),
    (
        ["train", "--resume", "otheragent", "--total-timesteps", "1024"],
        "not in the checkpoint",
    ),
    (["train", "--resume", "othersize", "--total-timesteps", "1024"], "saved (1, 64), not (1, 32)"),
    (["train", "--resume", "run", "--env-param", "x=1"], "not --env-param: a resumed run keeps"),
    (["train", "--resume", "run", "--env-observe", "0"], "not --env-observe: a resumed run keeps"),
    (
        ["eval", "otherparam"],  # its config.json's env_options are what eval builds
        "--env-param memory_length=3 is not allowed: gymnax:CartPole-v1 has no parameter",
    ),
    (["eval", "run", "--step", "7"], "no checkpoint of step 7"),
    (["eval", "run", "--best"], "no checkpoint in"),
    (["eval", "corrupt"], "corrupt/checkpoints cannot be read (JSONDecodeError: Expecting value"),
    (
        ["train", "--resume", "corrupt", "--total-timesteps", "1024"],
        "the checkpoint of step 8 in ",
    ),
    (["train", "--resume", "run", "--resume-step", "7", "--dry-run"], "no checkpoint of step 7"),
]


@pytest.mark.slow
@pytest.mark.parametrize("argv, message", WITH_RUN, ids=[" ".join(a)[:60] for a, _ in WITH_RUN])
def test_bad_input_about_a_saved_run(argv, message, saved_run, monkeypatch):
    monkeypatch.chdir(saved_run)
    before = listing(saved_run)
    code, lines = run_cli(argv, monkeypatch)
    documented(argv, assert_one_line(code, lines, message), saved_run)
    assert listing(saved_run) == before
