#!/usr/bin/env bash
# Packs what the GPU machine lacks to run benchmarks/suite.py into one archive that the device
# run carries: benchmarks/results/gpu_site.tar.xz (benchmarks/results/ is git-ignored).
#
#   bash benchmarks/gpu_deps.sh             # here, where pip reaches PyPI; about 1 minute
#
# The GPU machine's image has Python 3.12 with JAX (CUDA), flax, optax, chex, orbax,
# matplotlib, numpy, PyYAML and rich, but cannot reach a package registry. This unpacks the
# Python 3.12 x86-64 wheels of the rest (the versions installed here where there are any) into
# one folder, trims envpool to its Atari and classic-control environments (the whole of envpool
# and its assets is far over the 64 MiB a device run may carry), and compresses it.
# benchmarks/gpu_suite.sh unpacks it there and puts it on PYTHONPATH.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PYVER=${PYVER:-3.12}
ARCHIVE=${ARCHIVE:-benchmarks/results/gpu_site.tar.xz}
PACKAGES=(envpool envpool-assets dm-env optree gymnax rlax distrax tfp-nightly dm-tree decorator
  gast tyro docstring-parser typeguard tensorboardX gymnasium farama-notifications flashbax
  craftax imageio)
# Not MuJoCo Playground: mujoco, mujoco-mjx and warp-lang are about 470 MB installed, far over
# what a device run may carry; on a machine that reaches a registry, gpu_suite.sh's own set-up
# installs them (`pip install -e .[dev]`), and benchmarks/envs.py skips a missing family.
specs=()
for name in "${PACKAGES[@]}"; do
  version=$("$PY" -c "import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: pass" "$name")
  specs+=("$name${version:+==$version}")
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
platforms=()
for n in 17 24 27 28 31 34; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
"$PY" -m pip install -q --no-deps --only-binary=:all: --python-version "$PYVER" \
  --implementation cp "${platforms[@]}" --platform manylinux2014_x86_64 \
  --target "$work/site" "${specs[@]}"
# envpool: Atari and classic control only (its entry module imports every family's
# registration, and each family's package loads its compiled library).
find "$work/site/envpool" -mindepth 1 -maxdepth 1 -type d \
  ! -name atari ! -name classic_control ! -name python -exec rm -rf {} +
printf '"""Atari and classic control only (benchmarks/gpu_deps.sh)."""\n\n%s\n%s\n' \
  "import envpool.atari.registration  # noqa: F401" \
  "import envpool.classic_control.registration  # noqa: F401" >"$work/site/envpool/entry.py"
find "$work/site/envpool_assets" -mindepth 1 -maxdepth 1 -type d ! -name atari -exec rm -rf {} +
find "$work/site" -name __pycache__ -type d -exec rm -rf {} +
rm -rf "$work/site/bin"
mkdir -p "$(dirname "$ARCHIVE")"
tar -C "$work/site" -cJf "$ARCHIVE" .
echo "$ARCHIVE: $(du -h "$ARCHIVE" | cut -f1) (${specs[*]})"
