#!/usr/bin/env bash
# The GPU check in one unattended run (about 6 minutes on one H100/H200): installs muzero_gym
# into the Python that already has a CUDA build of torch (offline: no isolated build), runs the
# learner, reanalyse, agent, network, Atari and segment tests with every agent on CUDA, then
# atari_gpu.py: Pong training at 64 envs with train.cuda_graphs on (agent and learner steps/s,
# the learner step taken apart: the CUDA-graph step against the eager one). Each stage has its
# own time limit; with OUT set, the log goes to $OUT/gpu_check.log too.
# Self-play alone at more envs:
#   python3 tests/benchmarks/atari_gpu.py --minutes 1 --num-envs 256 \
#     --set train.warmup_transitions=1000000000
# Usage: bash tests/benchmarks/gpu_check.sh [minutes of Pong training, default 2]
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
minutes="${1:-2}"
log="${OUT:-/tmp}/gpu_check.log"
{
  python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name(0), torch.__version__)" || exit 1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  lscpu | grep 'Model name'; nproc
  python3 -m pip install -q --no-deps --no-build-isolation -e . || exit 1
  echo "== tests with --device cuda"
  timeout 120 python3 -m pytest -q -p no:cacheprovider --device cuda tests/test_learner.py \
    tests/test_reanalyse.py tests/test_agent.py tests/test_networks.py tests/test_atari.py \
    tests/test_segments.py
  echo "== Pong, 64 envs: training, then the learner step taken apart"
  timeout $(( ${minutes%.*} * 60 + 120 )) python3 tests/benchmarks/atari_gpu.py \
    --minutes "$minutes" --num-envs 64 --set train.cuda_graphs=true
} 2>&1 | tee "$log"
