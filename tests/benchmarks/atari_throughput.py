"""Atari throughput on this machine: self-play agent steps/s, learner samples/s, replay bytes.

Self-play runs the ``pong`` preset (atari100k protocol, ``resnet_small``, ale-py's native
vector env) with 50 simulations for B in ``--batch-sizes`` envs and splits the time between the
env, the model (initial + recurrent inference) and the tree search. The learner then trains on
games of 250 agent steps from self-play (batch 256, K = 5) and the replay reports its bytes per
stored transition (each 96 x 96 frame once, plus targets).

    python tests/benchmarks/atari_throughput.py [--batch-sizes 8 16 32 64] [--seconds 30]
        [--learner-steps 20] [--set section.key=value ...]
"""

from __future__ import annotations

import argparse
import time

import torch

from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.config import load_config


def selfplay_speed(batch: int, seconds: float, overrides: list[str]) -> tuple[dict, MuZeroAgent]:
    config = load_config("pong", [f"env.num_envs={batch}", "train.warmup_transitions=1000000000",
                                  "train.eval_interval=0", *overrides])
    agent = MuZeroAgent(config)
    selfplay = agent._start_selfplay()
    for _ in range(3):  # warm-up: kernel compilation, allocations
        selfplay.step()
    for key in selfplay.timings:
        selfplay.timings[key] = 0.0
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        stats = selfplay.step()
        steps += stats.num_transitions
    elapsed = time.perf_counter() - start
    split = {k: v / elapsed for k, v in selfplay.timings.items()}
    return {"batch": batch, "steps_per_s": steps / elapsed, **split}, agent


def learner_speed(num_steps: int, overrides: list[str]) -> tuple[float, MuZeroAgent]:
    """Samples per second of the learner (sampling included) on replay filled by self-play (8
    envs, episodes cut at 250 agent steps: its segments and finished games)."""
    config = load_config("pong", ["env.num_envs=8", "env.max_episode_steps=250",
                                  "train.warmup_transitions=1000000000", "train.eval_interval=0",
                                  *overrides])
    agent = MuZeroAgent(config)
    selfplay = agent._start_selfplay()
    while len(agent.replay) < 2000:
        stats = selfplay.step()
        for segment in stats.segments:
            agent.replay.add_segment(segment)
        for game in stats.finished:
            agent.replay.add_game(game)
    agent.train_steps(1)  # warm-up
    start = time.perf_counter()
    agent.train_steps(num_steps)
    return num_steps * agent.config.train.batch_size / (time.perf_counter() - start), agent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--learner-steps", type=int, default=20)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    print(f"torch threads: {torch.get_num_threads()}")
    print(f"{'B':>4} {'agent steps/s':>14} {'env':>6} {'model':>6} {'search':>7} {'other':>6}")
    for batch in args.batch_sizes:
        row, agent = selfplay_speed(batch, args.seconds, args.overrides)
        agent.close()
        other = max(0.0, 1.0 - row["env"] - row["model"] - row["search"])
        print(f"{batch:>4} {row['steps_per_s']:>14.1f} {row['env']:>6.0%} {row['model']:>6.0%} "
              f"{row['search']:>7.0%} {other:>6.0%}", flush=True)
    samples, agent = learner_speed(args.learner_steps, args.overrides)
    per_transition = agent.replay.nbytes() / max(len(agent.replay), 1)
    print(f"\nlearner: {samples:,.0f} samples/s (batch {agent.config.train.batch_size}, "
          f"K = {agent.config.train.num_unroll_steps})")
    print(f"replay: {per_transition:,.0f} bytes per transition over {len(agent.replay):,} "
          f"transitions (its slot tables for the whole capacity included) = "
          f"{per_transition * 100_000 / 2**30:.2f} GiB per 100k transitions")
    agent.close()


if __name__ == "__main__":
    main()
