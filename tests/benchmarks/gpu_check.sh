#!/usr/bin/env bash
# The GPU check in one unattended run (under 10 minutes on one H100/H200): installs muzero_gym
# into the Python that already has a CUDA build of torch (offline: no isolated build), runs the
# agent, learner, network, Atari and segment tests with every agent on CUDA, then
# atari_gpu.py twice: Pong training at 64 envs (agent and learner steps/s, the learner step
# taken apart, a torch.compile probe) and self-play alone at 256 envs. Each stage has its own
# time limit and the next one runs whatever the last one did; with OUT set, the log goes to
# $OUT/gpu_check.log too.
#   bash tests/benchmarks/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
log="${OUT:-/tmp}/gpu_check.log"
{
  python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name(0), torch.__version__)" || exit 1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  lscpu | grep 'Model name'; nproc
  python3 -m pip install -q --no-deps --no-build-isolation -e . || exit 1
  echo "== tests with --device cuda"
  timeout 100 python3 -m pytest -q -x -p no:cacheprovider --device cuda tests/test_agent.py \
    tests/test_learner.py tests/test_networks.py tests/test_atari.py tests/test_segments.py
  echo "== Pong, 64 envs: training, the learner step, torch.compile(mode='reduce-overhead')"
  timeout 330 python3 tests/benchmarks/atari_gpu.py --minutes 2.5 --num-envs 64 \
    --compile reduce-overhead
  echo "== Pong, 256 envs: self-play alone (no learning)"
  timeout 100 python3 tests/benchmarks/atari_gpu.py --minutes 1 --num-envs 256 \
    --set train.warmup_transitions=1000000000
} 2>&1 | tee "$log"
