#!/usr/bin/env bash
# Unattended GPU check (under 8 minutes): installs muzero_gym into the Python that already has a
# CUDA build of torch (nothing is downloaded when the other dependencies are present too), then
# trains Pong for 5 minutes on the GPU and prints agent steps/s, learner steps/s and GPU memory.
#   bash tests/benchmarks/atari_gpu.sh [extra arguments of atari_gpu.py]
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name(0))"
# --no-build-isolation: an offline GPU machine cannot fetch setuptools into an isolated build
python3 -m pip install -q --no-deps --no-build-isolation -e .
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
timeout 470 python3 tests/benchmarks/atari_gpu.py --minutes 5 "$@"
