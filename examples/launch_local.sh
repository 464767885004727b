#!/usr/bin/env bash
# Starts N podracer processes on this machine, connected through JAX's distributed runtime on
# 127.0.0.1 (a free port), and waits for all of them. The exit status is 0 when every process
# succeeded; when one fails, the others are stopped and the status is the first failure's.
#
#   examples/launch_local.sh N [podracer train ARGS...]
#
#   # 2 processes x 2 virtual CPU devices = one 4-device mesh
#   XLA_FLAGS=--xla_force_host_platform_device_count=2 \
#       examples/launch_local.sh 2 --agent ppo --env gymnax:CartPole-v1 --arch.num-envs 8
#
# Process 0 prints progress (stderr); every process prints the final JSON line (stdout), with
# its "process" index. PODRACER names the command (default "podracer"; for example
# PODRACER="python -m podracer.cli.main"). The same program runs on a cluster: see docs/scaling.md.
set -u

if [[ $# -lt 1 || ! $1 =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: $0 N [podracer train ARGS...]   (N: the number of processes, >= 1)" >&2
    exit 2
fi
num_processes=$1
shift
read -ra command <<< "${PODRACER:-podracer}"
port=$("${PYTHON:-python3}" -c \
    'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

pids=()
for ((i = 0; i < num_processes; i++)); do
    "${command[@]}" train "$@" --coordinator "127.0.0.1:$port" \
        --num-processes "$num_processes" --process-id "$i" &
    pids+=($!)
done
trap 'kill -TERM "${pids[@]}" 2>/dev/null; exit 130' INT TERM

status=0
for ((left = num_processes; left > 0; left--)); do
    wait -n
    code=$?
    if [[ $code -ne 0 && $status -eq 0 ]]; then
        status=$code
        echo "launch_local.sh: a process exited with status $code; stopping the others" >&2
        kill -TERM "${pids[@]}" 2>/dev/null
    fi
done
exit "$status"
