"""Env steps per second of self-play on CartPole-v1 with the cartpole preset's model.

50 simulations per move, an untrained model, no learning: the cost of search, model calls and
the self-play glue. Prints a table for B (number of envs) in {1, 16, 64}.

    python tests/benchmarks/selfplay_speed.py [--steps 2000] [--simulations 50]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.config import load_config
from muzero_gym.environment import make_vector_env
from muzero_gym.selfplay import SelfPlay


def measure(num_envs: int, steps: int, simulations: int, numpy_path: bool) -> float:
    config = load_config("cartpole", [f"env.num_envs={num_envs}",
                                      f"search.num_simulations={simulations}"])
    agent = MuZeroAgent(config)
    envs = make_vector_env(config.env)
    player = SelfPlay(envs, agent.selfplay_network, agent.search, agent.new_game, config.search,
                      np.random.default_rng(0))
    if not numpy_path:
        player.adapter.use_numpy = False
        player.adapter.refresh()
    player.reset(seed=0)
    player.step()  # warm-up
    done, start = 0, time.perf_counter()
    while done < steps:
        done += player.step().num_transitions
    envs.close()
    return done / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--simulations", type=int, default=50)
    args = parser.parse_args()
    print(f"{'B':>4} {'env steps/s':>12} {'env steps/s (torch inference)':>30}")
    for num_envs in (1, 16, 64):
        steps = max(args.steps // (4 if num_envs == 1 else 1), num_envs * 4)
        fast = measure(num_envs, steps, args.simulations, True)
        slow = measure(num_envs, steps, args.simulations, False)
        print(f"{num_envs:>4} {fast:>12,.0f} {slow:>30,.0f}")


if __name__ == "__main__":
    main()
