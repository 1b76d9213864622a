"""A short Pong training on a CUDA machine: agent steps/s, learner steps/s and GPU memory.

Trains the ``pong`` preset (atari100k protocol) for ``--minutes`` of wall-clock time with the
learner and the self-play inference on the GPU, bfloat16 autocast in the learner, 64 envs in
ale-py's native vector env, and prints throughput and peak GPU memory; then where one learner
step's time goes (sampling; the step replayed as a CUDA graph and launched eagerly; the CUDA
kernels of an eager step). Run it unattended through
``tests/benchmarks/atari_gpu.sh`` (installs the package first); it ends within 8 minutes.

    python tests/benchmarks/atari_gpu.py [--minutes 5] [--num-envs 64] [--set section.key=value]
        [--device cpu]  (--device cpu: a smoke test of the script)
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
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = parser.parse_args()
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this benchmark needs a GPU")
    print(f"device: {torch.cuda.get_device_name(0) if cuda else 'cpu'}, torch {torch.__version__}")
    config = load_config("pong", [
        f"train.device={args.device}", f"train.inference_device={args.device}",
        f"train.mixed_precision={str(cuda).lower()}",
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
    if cuda:
        print(f"peak GPU memory: {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    if agent.training_steps == 0:
        print("no learner step: the warm-up was not reached")
    else:
        # One learner step alone (sampling in the background thread, as in training).
        agent.train_steps(5)
        _sync(cuda)
        count, start = 50 if cuda else 3, time.perf_counter()
        agent.train_steps(count)
        _sync(cuda)
        print(f"learner step: {(time.perf_counter() - start) / count * 1000:.1f} ms "
              f"(batch {config.train.batch_size}, K = {config.train.num_unroll_steps}, "
              f"CUDA graph: {agent.learner_worker.learner.uses_cuda_graphs})")
        learner_breakdown(agent, cuda, count)
    agent.close()


def _sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


def _timed_steps(agent: MuZeroAgent, batch, cuda: bool, count: int) -> float:
    """Mean ms of ``learner.train_step`` on one batch (the copy to the device included)."""
    learner = agent.learner_worker.learner
    learner.train_step(batch)
    _sync(cuda)
    start = time.perf_counter()
    for _ in range(count):
        learner.train_step(batch)
    _sync(cuda)
    return (time.perf_counter() - start) / count * 1000


def learner_breakdown(agent: MuZeroAgent, cuda: bool, count: int) -> None:
    """Sampling and the step apart, each timed alone, and the CUDA kernels of one step."""
    worker = agent.learner_worker
    start = time.perf_counter()
    for _ in range(count):
        batch = worker._sample(worker.learner.training_step, pinned=cuda)
    sample_ms = (time.perf_counter() - start) / count * 1000
    learner = worker.learner
    graphs = learner.uses_cuda_graphs
    step_ms = _timed_steps(agent, batch, cuda, count)
    learner.uses_cuda_graphs = False
    eager_ms = _timed_steps(agent, batch, cuda, count)
    learner.uses_cuda_graphs = graphs
    print(f"  replay.sample (+ pinning): {sample_ms:.1f} ms; learner.train_step: {step_ms:.1f} ms"
          f" ({'CUDA graph' if graphs else 'eager'}), {eager_ms:.1f} ms eager")
    if not cuda:
        return
    learner.uses_cuda_graphs = False  # the kernels the graph replays, launched one by one
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profile:
        worker.learner.train_step(batch)
        torch.cuda.synchronize()
    events = profile.events()
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    gpu_ms = sum(e.device_time for e in kernels) / 1000
    learner.uses_cuda_graphs = graphs
    print(f"  one eager step: {len(kernels)} CUDA kernels/copies, {gpu_ms:.1f} ms of GPU time")
    print(profile.key_averages().table(sort_by="device_time_total", row_limit=6))


if __name__ == "__main__":
    main()
