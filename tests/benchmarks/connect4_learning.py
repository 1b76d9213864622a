"""Win rate of the connect4 preset against alpha-beta players after a fixed training time.

Trains the ``connect4`` preset for ``--minutes`` of wall-clock time (self-play and learning on
this machine), then plays ``--games`` greedy games (half as first player, each move searched
with ``search.eval_simulations`` and ``search.eval_pb_c_init``) against the depth-limited
alpha-beta player at each depth in ``--depths`` and prints the win/draw/loss rates.
Each pair of games opens with the same ``train.eval_opening_plies`` random moves (2 in the
preset) with the seats swapped: greedy play against a deterministic opponent would otherwise
repeat one game per seat. No opening repeats while others remain (there are 49 of two moves).
``--save`` keeps the trained agent (``muzero-gym eval`` reads it).

    python tests/benchmarks/connect4_learning.py [--minutes 30] [--games 100] [--depths 2 4]
        [--seed 0] [--save PATH] [--set section.key=value ...]
"""

from __future__ import annotations

import argparse
import time

from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.config import load_config
from muzero_gym.envs.opponents import AlphaBetaOpponent

CHUNK = 2000  # env steps between clock checks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--games", type=int, default=100)
    parser.add_argument("--depths", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", help="write the trained agent's checkpoint here")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    config = load_config("connect4", [*args.overrides, f"train.seed={args.seed}",
                                      "train.eval_interval=0", "log.progress=false"])
    agent = MuZeroAgent(config)
    start = time.perf_counter()
    while (time.perf_counter() - start) / 60 < args.minutes:
        agent.learn(agent.env_steps + CHUNK, progress=False)
        print(f"  {agent.env_steps:>7} env steps, {agent.training_steps:>6} learner steps, "
              f"{(time.perf_counter() - start) / 60:5.1f} min", flush=True)
    minutes = (time.perf_counter() - start) / 60
    print(f"\ntrained {minutes:.1f} min: {agent.env_steps:,} env steps, "
          f"{agent.training_steps:,} learner steps")
    if args.save:
        agent.save(args.save)
    acting, selfplay = agent.acting_search.settings, agent.search.settings
    print(f"greedy games, {acting.num_simulations} simulations per move, pUCT c_init "
          f"{acting.pb_c_init} (self-play: {selfplay.num_simulations}, {selfplay.pb_c_init})")
    print(f"{'opponent':>12} {'win':>6} {'draw':>6} {'loss':>6}  (agent first / second: w/d/l)")
    for depth in args.depths:
        result = agent.play_against(AlphaBetaOpponent(depth, seed=args.seed), args.games,
                                    seed=args.seed)
        print(f"{f'alphabeta-{depth}':>12} {result.win_rate:>6.0%} {result.draw_rate:>6.0%} "
              f"{result.loss_rate:>6.0%}  ({result.wins[0]}/{result.draws[0]}/"
              f"{result.losses[0]} / {result.wins[1]}/{result.draws[1]}/{result.losses[1]})",
              flush=True)


if __name__ == "__main__":
    main()
