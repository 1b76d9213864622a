"""Sample efficiency, wall-clock time and stability of the cartpole preset on CartPole-v1.

For each seed, trains the ``cartpole`` preset for ``--max-env-steps`` env steps and evaluates it
every ``--eval-every`` env steps on 20 greedy episodes. Prints each seed's curve, the env steps
and minutes (evaluations included) at which the evaluation mean first reached 475, and the
lowest evaluation after that (the goal: 475 within 30k env steps and 10 minutes, and no later
evaluation below 400), then the mean and spread over the seeds.

    python tests/benchmarks/cartpole_learning.py [--seeds 0 1 2 3 4] [--max-env-steps 30000]
        [--eval-every 2500] [--set section.key=value ...]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from _machine import cpu_name

from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.config import load_config

SOLVED = 475.0
HOLDS = 400.0


def run_seed(seed: int, max_env_steps: int, eval_every: int, overrides: list[str]) -> dict:
    config = load_config("cartpole", [*overrides, f"train.seed={seed}", "train.eval_interval=0",
                                      "log.progress=false"])
    agent = MuZeroAgent(config)
    start = time.perf_counter()
    curve, solved_at = [], None
    while agent.env_steps < max_env_steps:
        agent.learn(min(agent.env_steps + eval_every, max_env_steps), progress=False)
        mean = float(agent.evaluate(20, seed=seed).mean())
        minutes = (time.perf_counter() - start) / 60
        curve.append((agent.env_steps, minutes, mean))
        print(f"  seed {seed}: {agent.env_steps:>6} env steps, {minutes:5.1f} min, "
              f"eval mean {mean:6.1f}", flush=True)
        if solved_at is None and mean >= SOLVED:
            solved_at = (agent.env_steps, minutes)
    after = [m for steps, _, m in curve if solved_at is not None and steps > solved_at[0]]
    return {"seed": seed, "solved_at": solved_at, "lowest_after": min(after) if after else None,
            "final": curve[-1][2], "curve": curve}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--max-env-steps", type=int, default=30_000)
    parser.add_argument("--eval-every", type=int, default=2500)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    print(f"{cpu_name()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads available", flush=True)
    results = [run_seed(s, args.max_env_steps, args.eval_every, args.overrides)
               for s in args.seeds]
    print(f"\n{'seed':>4} {'reached 475':>12} {'env steps':>10} {'minutes':>8} "
          f"{'lowest after':>13} {'final':>7}  curve")
    for r in results:
        reached = r["solved_at"] is not None
        steps, minutes = r["solved_at"] if reached else (None, None)
        lowest = r["lowest_after"]
        curve = " ".join(f"{m:.0f}" for _, _, m in r["curve"])
        print(f"{r['seed']:>4} {'yes' if reached else 'no':>12} "
              f"{steps if steps is not None else '-':>10} "
              f"{f'{minutes:.1f}' if minutes is not None else '-':>8} "
              f"{f'{lowest:.1f}' if lowest is not None else '-':>13} {r['final']:>7.1f}  {curve}")
    met = [r for r in results if r["solved_at"] is not None and r["solved_at"][1] <= 10
           and (r["lowest_after"] is None or r["lowest_after"] >= HOLDS)]
    finals = np.array([r["final"] for r in results])
    print(f"goal met (475 within the run and 10 min, never below {HOLDS:.0f} after): "
          f"{len(met)}/{len(results)} seeds; final evaluation mean {finals.mean():.1f} "
          f"(min {finals.min():.1f}, max {finals.max():.1f})")


if __name__ == "__main__":
    main()
