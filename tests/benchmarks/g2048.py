"""Median max tile of the g2048 preset after a fixed training time.

Trains the ``g2048`` preset for ``--minutes`` of wall-clock time, then plays ``--games`` greedy
games and prints the median and the distribution of the largest tile reached, and the scores.
``--minutes 0`` plays the same games with the untrained network: the baseline that the search
with the real game reaches on its own.

    python tests/benchmarks/g2048.py [--minutes 30] [--games 20] [--seed 0]
        [--set section.key=value ...]
"""

from __future__ import annotations

import argparse
import collections
import time

import numpy as np

from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.config import load_config

CHUNK = 2000  # env steps between clock checks


def max_tile(game) -> int:
    """Largest tile on the final board, read from the one-hot observation planes."""
    planes = game.observations[-1].reshape(16, -1)
    return int(2 ** np.flatnonzero(planes.any(axis=1)).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--games", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    config = load_config("g2048", [*args.overrides, f"train.seed={args.seed}",
                                   "train.eval_interval=0", "log.progress=false"])
    agent = MuZeroAgent(config)
    start = time.perf_counter()
    while (time.perf_counter() - start) / 60 < args.minutes:
        agent.learn(agent.env_steps + CHUNK, progress=False)
        recent = np.mean(agent._recent_returns) if agent._recent_returns else float("nan")
        print(f"  {agent.env_steps:>7} env steps, {agent.training_steps:>6} learner steps, "
              f"{(time.perf_counter() - start) / 60:5.1f} min, recent self-play score "
              f"{recent:.0f}", flush=True)
    minutes = (time.perf_counter() - start) / 60
    games = agent.evaluate_games(args.games, seed=args.seed)
    tiles = [max_tile(g) for g in games]
    scores = [sum(g.rewards) for g in games]
    print(f"\ntrained {minutes:.1f} min: {agent.env_steps:,} env steps, "
          f"{agent.training_steps:,} learner steps")
    median = sorted(tiles)[(len(tiles) - 1) // 2]  # the lower median is a tile
    print(f"median max tile over {len(games)} greedy games: {median}")
    print("max tiles: " + ", ".join(f"{t}: {n}" for t, n in
                                     sorted(collections.Counter(tiles).items())))
    print(f"score: median {np.median(scores):.0f}, mean {np.mean(scores):.0f}, "
          f"max {np.max(scores):.0f}")


if __name__ == "__main__":
    main()
