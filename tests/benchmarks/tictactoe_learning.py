"""Wall-clock minutes until the tictactoe preset never loses to a perfect player.

Trains the ``tictactoe`` preset and, every ``--eval-every`` env steps, plays 100 greedy games
against the exhaustive minimax player as first player and 100 as second player (the perfect
player picks at random among its best moves). Prints the env steps and minutes (evaluations
included) at which the agent first loses none of the 200 games, or its best result.

    python tests/benchmarks/tictactoe_learning.py [--seeds 0] [--max-minutes 30]
        [--eval-every 2000] [--set section.key=value ...]
"""

from __future__ import annotations

import argparse
import time

from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.config import load_config
from muzero_gym.envs.opponents import MinimaxOpponent

GAMES_PER_SEAT = 100


def run_seed(seed: int, max_minutes: float, eval_every: int, overrides: list[str]) -> dict:
    config = load_config("tictactoe", [*overrides, f"train.seed={seed}", "train.eval_interval=0",
                                       "log.progress=false"])
    agent = MuZeroAgent(config)
    perfect = MinimaxOpponent(seed)
    start = time.perf_counter()
    best = None
    while (time.perf_counter() - start) / 60 < max_minutes:
        agent.learn(agent.env_steps + eval_every, progress=False)
        first = agent.play_against(perfect, GAMES_PER_SEAT, seed=seed, agent_seats=(0,))
        second = agent.play_against(perfect, GAMES_PER_SEAT, seed=seed, agent_seats=(1,))
        minutes = (time.perf_counter() - start) / 60
        losses = (first.losses[0], second.losses[1])
        print(f"  seed {seed}: {agent.env_steps:>6} env steps, {minutes:5.1f} min, losses as "
              f"first {losses[0]:>3}/100, as second {losses[1]:>3}/100", flush=True)
        if best is None or sum(losses) < sum(best):
            best = losses
        if losses == (0, 0):
            return {"seed": seed, "solved": True, "env_steps": agent.env_steps,
                    "minutes": minutes, "best": losses}
    return {"seed": seed, "solved": False, "env_steps": agent.env_steps,
            "minutes": (time.perf_counter() - start) / 60, "best": best}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--max-minutes", type=float, default=30.0)
    parser.add_argument("--eval-every", type=int, default=2000)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    results = [run_seed(s, args.max_minutes, args.eval_every, args.overrides)
               for s in args.seeds]
    print(f"\n{'seed':>4} {'never loses':>12} {'env steps':>10} {'minutes':>8} "
          f"{'losses first/second':>20}")
    for r in results:
        print(f"{r['seed']:>4} {str(r['solved']):>12} {r['env_steps']:>10,} {r['minutes']:>8.1f} "
              f"{r['best'][0]:>9}/{r['best'][1]:<10}")


if __name__ == "__main__":
    main()
