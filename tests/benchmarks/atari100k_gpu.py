"""One Atari-100k game on one GPU: the ``atari100k`` preset, 100k agent steps, then 32 games.

Trains the preset for one game (its learner steps: ``train.replay_ratio`` per agent step) with
the learner and the self-play inference on CUDA, then plays ``--eval-games`` greedy evaluation
games, and prints the wall time, agent and learner steps/s, and the mean raw score and
human-normalised score beside EfficientZero's published Atari-100k score for the game. Run it
through ``tests/benchmarks/atari100k_gpu.sh GAME``; ``--cpu`` runs it on the CPU (a smoke test
with few steps: ``--env-steps 600 --eval-games 2``).

    python tests/benchmarks/atari100k_gpu.py Pong [--env-steps 100000] [--eval-games 32]
        [--num-envs 64] [--set section.key=value ...] [--cpu]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.atari import human_normalized_score
from muzero_gym.config import load_config

# EfficientZero's Atari-100k scores (Ye et al., 2021, Table 3), raw game scores.
EFFICIENTZERO = {"Pong": 20.6, "Breakout": 414.1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("game", help="ALE game name, e.g. Pong or Breakout")
    parser.add_argument("--env-steps", type=int, default=100_000)
    parser.add_argument("--eval-games", type=int, default=32)
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--cpu", action="store_true", help="run on the CPU (smoke test)")
    args = parser.parse_args()
    device = "cpu" if args.cpu else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this benchmark needs a GPU (or --cpu)")
    config = load_config("atari100k", [
        f"env.id=ALE/{args.game}-v5", f"train.device={device}",
        f"train.inference_device={device}", f"train.mixed_precision={str(not args.cpu).lower()}",
        f"env.num_envs={args.num_envs}", "train.eval_interval=0", *args.overrides])
    if device == "cuda":
        print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)
    agent = MuZeroAgent(config)
    start = time.perf_counter()
    agent.learn(args.env_steps)
    trained = time.perf_counter() - start
    returns = agent.evaluate(args.eval_games, progress=True, seed=0)
    total = time.perf_counter() - start
    agent.close()
    mean = float(np.mean(returns))
    hns = human_normalized_score(config.env.id, mean)
    print(f"\n{config.env.id}: {agent.env_steps:,} agent steps, {agent.training_steps:,} learner "
          f"steps in {trained / 60:.1f} min ({agent.env_steps / trained:.0f} agent steps/s, "
          f"{agent.training_steps / trained:.1f} learner steps/s); {total / 60:.1f} min with "
          f"the evaluation")
    print(f"score over {len(returns)} games: mean {mean:.1f} (min {np.min(returns):.0f}, max "
          f"{np.max(returns):.0f}), human-normalised {hns if hns is None else round(hns, 3)}; "
          f"EfficientZero: {EFFICIENTZERO.get(args.game, 'n/a')}")


if __name__ == "__main__":
    main()
