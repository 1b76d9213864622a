"""A short Pong training on a CUDA machine: agent steps/s, learner steps/s and GPU memory.

Trains the ``pong`` preset (atari100k protocol) for ``--minutes`` of wall-clock time with the
learner and the self-play inference on the GPU, bfloat16 autocast in the learner, 64 envs in
ale-py's native vector env, and prints throughput and peak GPU memory. Run it unattended through
``tests/benchmarks/atari_gpu.sh`` (installs the package first); it ends within 8 minutes.

    python tests/benchmarks/atari_gpu.py [--minutes 5] [--num-envs 64] [--set section.key=value]
"""

from __future__ import annotations

import argparse
import time

import torch

from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.config import load_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this benchmark needs a GPU")
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    config = load_config("pong", [
        "train.device=cuda", "train.inference_device=cuda", "train.mixed_precision=true",
        f"env.num_envs={args.num_envs}", "train.eval_interval=0", "log.progress=false",
        "train.warmup_transitions=2000", "model.kind=resnet_small", *args.overrides])
    agent = MuZeroAgent(config)
    start = time.perf_counter()
    last_steps, last_train, last_time = 0, 0, start
    while time.perf_counter() - start < args.minutes * 60:
        agent.learn(agent.env_steps + 2000, progress=False)
        now = time.perf_counter()
        span = now - last_time
        print(f"  {agent.env_steps:>7} agent steps ({(agent.env_steps - last_steps) / span:6.1f}"
              f"/s), {agent.training_steps:>6} learner steps "
              f"({(agent.training_steps - last_train) / span:5.1f}/s), "
              f"{(now - start) / 60:4.1f} min", flush=True)
        last_steps, last_train, last_time = agent.env_steps, agent.training_steps, now
    elapsed = time.perf_counter() - start
    selfplay = agent.selfplay_worker.selfplay
    timings = selfplay.timings if selfplay is not None else {}
    print(f"\n{agent.env_steps:,} agent steps in {elapsed / 60:.1f} min: "
          f"{agent.env_steps / elapsed:.1f} agent steps/s, "
          f"{agent.training_steps / elapsed:.1f} learner steps/s "
          f"(batch {config.train.batch_size})")
    if timings:
        total = sum(timings.values())
        print("self-play time split: " + ", ".join(f"{k} {v / total:.0%}"
                                                   for k, v in timings.items()))
    print(f"peak GPU memory: {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    # One learner step alone (sampling in the background thread, as in training).
    agent.train_steps(5)
    torch.cuda.synchronize()
    count, start = 50, time.perf_counter()
    agent.train_steps(count)
    torch.cuda.synchronize()
    print(f"learner step: {(time.perf_counter() - start) / count * 1000:.1f} ms "
          f"(batch {config.train.batch_size}, K = {config.train.num_unroll_steps})")
    agent.close()


if __name__ == "__main__":
    main()
