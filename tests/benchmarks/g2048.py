"""Median max tile of the g2048 preset after a fixed training time.

Trains the ``g2048`` preset for ``--minutes`` of wall-clock time, then plays ``--games`` greedy
games and prints the median and the distribution of the largest tile reached, and the scores.
``--minutes 0`` plays the same games with the untrained network: the baseline that the search
with the real game reaches on its own. With several ``--seeds`` it prints the mean and spread
of the median tile and of the mean score over them.

    python tests/benchmarks/g2048.py [--minutes 30] [--games 20] [--seeds 0 1 2]
        [--set section.key=value ...]
"""

from __future__ import annotations

import argparse
import collections
import time

import numpy as np
from _seeds import spread

from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.config import load_config

CHUNK = 2000  # env steps between clock checks


def max_tile(game) -> int:
    """Largest tile on the final board, read from the one-hot observation planes."""
    planes = game.observations[-1].reshape(16, -1)
    return int(2 ** np.flatnonzero(planes.any(axis=1)).max())


def run_seed(seed: int, args: argparse.Namespace) -> tuple[int, float]:
    """Trains one seed, plays its games; returns the median largest tile and the mean score."""
    config = load_config("g2048", [*args.overrides, f"train.seed={seed}",
                                   "train.eval_interval=0", "log.progress=false"])
    agent = MuZeroAgent(config)
    start = time.perf_counter()
    while (time.perf_counter() - start) / 60 < args.minutes:
        agent.learn(agent.env_steps + CHUNK, progress=False)
        recent = np.mean(agent.recent_returns) if agent.recent_returns else float("nan")
        print(f"  seed {seed}: {agent.env_steps:>7} env steps, {agent.training_steps:>6} "
              f"learner steps, {(time.perf_counter() - start) / 60:5.1f} min, recent "
              f"self-play score {recent:.0f}", flush=True)
    minutes = (time.perf_counter() - start) / 60
    games = agent.evaluate_games(args.games, seed=seed)
    tiles = [max_tile(g) for g in games]
    scores = [sum(g.rewards) for g in games]
    print(f"\nseed {seed}: trained {minutes:.1f} min: {agent.env_steps:,} env steps, "
          f"{agent.training_steps:,} learner steps")
    median = sorted(tiles)[(len(tiles) - 1) // 2]  # the lower median is a tile
    print(f"median max tile over {len(games)} greedy games: {median}")
    print("max tiles: " + ", ".join(f"{t}: {n}" for t, n in
                                     sorted(collections.Counter(tiles).items())))
    print(f"score: median {np.median(scores):.0f}, mean {np.mean(scores):.0f}, "
          f"max {np.max(scores):.0f}", flush=True)
    return median, float(np.mean(scores))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--games", type=int, default=20)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    results = [run_seed(seed, args) for seed in args.seeds]
    print()
    print(spread("median max tile", [m for m, _ in results], "{:.0f}"))
    print(spread("mean score", [s for _, s in results], "{:.0f}"))


if __name__ == "__main__":
    main()
