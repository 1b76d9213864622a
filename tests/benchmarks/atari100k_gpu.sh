#!/usr/bin/env bash
# One Atari-100k game on one GPU (target: under 10 minutes on an H200): installs muzero_gym
# into the Python that already has a CUDA build of torch (offline: no isolated build), then
# trains and evaluates one game and prints its figures.
#   bash tests/benchmarks/atari100k_gpu.sh GAME [extra arguments of atari100k_gpu.py]
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
game="${1:?usage: atari100k_gpu.sh GAME}"
shift
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'"
python3 -m pip install -q --no-deps --no-build-isolation -e .
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
timeout 700 python3 tests/benchmarks/atari100k_gpu.py "$game" "$@"
