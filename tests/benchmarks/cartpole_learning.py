"""Sample efficiency and wall-clock time of the cartpole preset on CartPole-v1.

For each seed, trains the ``cartpole`` preset and evaluates it every ``--eval-every`` env steps
on 20 greedy episodes; prints the env steps and wall-clock minutes (evaluations included) at
which the evaluation mean first reaches 475, or the best mean if it never does.

    python tests/benchmarks/cartpole_learning.py [--seeds 0 1 2] [--max-env-steps 30000]
        [--eval-every 2500] [--set section.key=value ...]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.config import load_config

SOLVED = 475.0


def run_seed(seed: int, max_env_steps: int, eval_every: int, overrides: list[str]) -> dict:
    config = load_config("cartpole", [*overrides, f"train.seed={seed}", "train.eval_interval=0",
                                      "log.progress=false"])
    agent = MuZeroAgent(config)
    start = time.perf_counter()
    best, curve = -np.inf, []
    while agent.env_steps < max_env_steps:
        agent.learn(min(agent.env_steps + eval_every, max_env_steps), progress=False)
        mean = float(agent.evaluate(20, seed=seed).mean())
        minutes = (time.perf_counter() - start) / 60
        curve.append((agent.env_steps, round(mean, 1)))
        print(f"  seed {seed}: {agent.env_steps:>6} env steps, {minutes:5.1f} min, "
              f"eval mean {mean:6.1f}", flush=True)
        best = max(best, mean)
        if mean >= SOLVED:
            return {"seed": seed, "solved": True, "env_steps": agent.env_steps,
                    "minutes": minutes, "best": best}
    return {"seed": seed, "solved": False, "env_steps": agent.env_steps,
            "minutes": (time.perf_counter() - start) / 60, "best": best}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max-env-steps", type=int, default=30_000)
    parser.add_argument("--eval-every", type=int, default=2500)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    results = [run_seed(s, args.max_env_steps, args.eval_every, args.overrides)
               for s in args.seeds]
    print(f"\n{'seed':>4} {'solved':>7} {'env steps':>10} {'minutes':>8} {'best eval':>10}")
    for r in results:
        print(f"{r['seed']:>4} {str(r['solved']):>7} {r['env_steps']:>10,} "
              f"{r['minutes']:>8.1f} {r['best']:>10.1f}")


if __name__ == "__main__":
    main()
