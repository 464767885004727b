#!/usr/bin/env bash
# The accelerator suite on a GPU machine, in one call: Python set up, the devices shown, then
# benchmarks/suite.py, then benchmarks/envs.py for Craftax and MuJoCo Playground at 1,024 and
# 4,096 envs, then Sebulba MuZero on Atari (envpool Breakout and Pong: the Podracer paper's
# showcase scaled to one GPU); suite.jsonl, envs.jsonl, the plots, MuZero's run directories and
# this script's log land in $OUT.
#
#   bash benchmarks/gpu_suite.sh                 # OUT defaults to benchmarks/results/suite
#   TOTAL_S=540 OUT=/tmp/x SUITE_ARGS="--only anakin" bash benchmarks/gpu_suite.sh
#
# Python, the first of these that imports JAX, podracer and its dependencies:
#   1. the image's python3 with benchmarks/results/gpu_site.tar.xz unpacked on PYTHONPATH
#      (made by benchmarks/gpu_deps.sh where a registry is reachable: the device machine of
#      this workplace reaches none, and its image already holds JAX with CUDA);
#   2. .venv, if there is one;
#   3. a new .venv (system site packages kept, so an installed CUDA JAX is used), filled from
#      the package registries with `pip install -e .[dev]`, plus `jax[cuda12]` if its JAX sees
#      no GPU.
# TOTAL_S (default 540 s) bounds the whole script: the suite gets what setting up left, less a
# margin for the plots, ENVS_S (default 150 s, envs.py's time; 0 skips it) and MUZERO_S (default
# 160 s, MuZero on Atari, half each game; 0 skips it; a call of its own for longer runs:
# MEMBERS_S (default 0) runs benchmarks/sebulba_throughput.py --members 1,4,8 (Sebulba members
# in one program against members in turn: TOTAL_S=560 ENVS_S=0 MUZERO_S=0 MEMBERS_S=300);
# TOTAL_S=560 ENVS_S=0 MUZERO_S=420 SUITE_ARGS="--only muzero"), as its --budget-s, and is stopped 60 s
# after that if it is still going (what it measured by then stays in suite.jsonl, and the plots
# are drawn from it).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-benchmarks/results/suite}
TOTAL_S=${TOTAL_S:-540}
SITE_ARCHIVE=${SITE_ARCHIVE:-benchmarks/results/gpu_site.tar.xz}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_suite.log") 2>&1
export PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}
unset XLA_FLAGS  # no forced CPU device count: the suite uses the devices it finds

timed() {  # timed NAME COMMAND...: runs it, prints its wall time, keeps its status
  local name=$1 start=$SECONDS status=0
  shift
  echo "== $name"
  "$@" || status=$?
  echo "== $name: $((SECONDS - start)) s, status $status"
  return "$status"
}

imports_ok() {
  "$1" -c "import jax, gymnax, rlax, envpool, tyro, flashbax, matplotlib, podracer" 2>/dev/null
}

setup_python() {
  PY=""
  if [ -f "$SITE_ARCHIVE" ] && command -v python3 >/dev/null; then
    mkdir -p /tmp/podracer_site
    tar -C /tmp/podracer_site -xJf "$SITE_ARCHIVE"
    export PYTHONPATH=/tmp/podracer_site:$ROOT${PYTHONPATH:+:$PYTHONPATH}
    if imports_ok python3; then PY=python3; return; fi
    echo "python3 with $SITE_ARCHIVE does not import everything; trying .venv"
  fi
  export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
  if [ -x .venv/bin/python ] && imports_ok .venv/bin/python; then PY=.venv/bin/python; return; fi
  if [ ! -x .venv/bin/python ]; then python3 -m venv --system-site-packages .venv; fi
  .venv/bin/python -m pip install -q -e ".[dev]"
  if ! .venv/bin/python -c "import jax, sys; sys.exit(jax.default_backend() == 'cpu')"; then
    local jax_version
    jax_version=$(.venv/bin/python -c "import jax; print(jax.__version__)")
    .venv/bin/python -m pip install -q "jax[cuda12]==$jax_version"
  fi
  PY=.venv/bin/python
}

timed "nvidia-smi -L" nvidia-smi -L || true
timed "python" setup_python
echo "python: $PY ($("$PY" --version 2>&1)), $(nproc) CPU cores"
timed "jax.devices()" "$PY" -c 'import jax; print(jax.__version__, jax.devices())'

ENVS_S=${ENVS_S:-150}  # benchmarks/envs.py's share of TOTAL_S (0: not run)
MUZERO_S=${MUZERO_S:-160}  # MuZero on Atari's share of TOTAL_S (0: not run)
MEMBERS_S=${MEMBERS_S:-0}  # Sebulba members' share of TOTAL_S (0: not run; 300 measures them)
budget=$((TOTAL_S - SECONDS - 30 - ENVS_S - MUZERO_S - MEMBERS_S))
if [ "$budget" -lt 60 ]; then
  echo "only $budget s left of TOTAL_S=$TOTAL_S after setting up: not running the suite"
  exit 1
fi
status=0
timed "suite.py (budget $budget s)" timeout --signal=TERM $((budget + 60)) \
  "$PY" benchmarks/suite.py --out "$OUT" --budget-s "$budget" ${SUITE_ARGS:-} || status=$?
if [ "$status" -ne 0 ]; then  # stopped or failed: draw what was measured
  timed "plots" "$PY" benchmarks/suite.py --out "$OUT" --plot-only || true
fi
if [ "$ENVS_S" -gt 0 ]; then  # the JAX suites at accelerator sizes (a missing library: skipped)
  timed "envs.py ($ENVS_S s)" timeout --signal=TERM "$ENVS_S" "$PY" benchmarks/envs.py \
    --only craftax,playground --id playground=playground:CheetahRun \
    --num-envs "${ENVS_NUM_ENVS:-1024,4096}" --out "$OUT/envs.jsonl" || true
fi
if [ "$MEMBERS_S" -gt 0 ]; then
  # members on Sebulba: 1, 4 and 8 members in one program against the same members in turn
  # (CartPole's MLP PPO, Breakout's IMPALA ResNet), actors and learner on the one GPU
  timed "sebulba members ($MEMBERS_S s)" timeout --signal=TERM "$MEMBERS_S" \
    "$PY" benchmarks/sebulba_throughput.py --members 1,4,8 --configs cartpole,breakout \
    --out "$OUT/members.jsonl" || true
fi
if [ "$MUZERO_S" -gt 0 ]; then
  # Sebulba MuZero on Atari, actor and learner on the one GPU: 64 envs x 32 steps per rollout,
  # Gumbel search of 16 simulations, the muzero_resnet torso on envpool's [4, 84, 84] frames,
  # a buffer of 1e5 steps (2 x 2.8 GB of uint8 frames: observations and bootstrap ones). Each
  # game gets half of MUZERO_S: stopped by SIGINT 15 s before its end (killed at the end if it
  # has not stopped); its run directory keeps metrics.jsonl (sps, returns) up to the stop.
  for game in Breakout Pong; do
    timed "muzero $game ($((MUZERO_S / 2)) s)" \
      timeout --signal=INT --kill-after=15 $((MUZERO_S / 2 - 15)) \
      "$PY" -m podracer.cli.main train --arch sebulba --agent muzero --env "envpool:$game-v5" \
      --agent.torso muzero_resnet --agent.buffer-size 100000 --agent.learning-starts 4096 \
      --arch.envs-per-actor 64 --arch.rollout-len 32 --arch.actor-device-ids 0 \
      --arch.learner-device-ids 0 --total-timesteps 2000000 --eval-interval 0 --no-tensorboard \
      --run-dir "$OUT/muzero-$game" || true
  done
fi
echo "== total: $SECONDS s, suite status $status; files in $OUT:"
ls -la "$OUT"
exit "$status"
