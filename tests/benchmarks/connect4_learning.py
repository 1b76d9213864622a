"""Win rate of the connect4 preset against alpha-beta players after a fixed training time.

Trains the ``connect4`` preset for ``--minutes`` of wall-clock time (self-play and learning on
this machine), then plays ``--games`` greedy games (half as first player, each move searched
with ``search.eval_simulations`` and ``search.eval_pb_c_init``) against the depth-limited
alpha-beta player at each depth in ``--depths`` and prints the win/draw/loss rates; then the
network alone (one simulation per move: the prior's choice) against depth ``--alone-depth``,
which shows what the learning carries without the play-time search. With several ``--seeds``
it prints each figure's mean and spread over them.
Each pair of games opens with the same ``train.eval_opening_plies`` random moves (2 in the
preset) with the seats swapped: greedy play against a deterministic opponent would otherwise
repeat one game per seat. No opening repeats while others remain (there are 49 of two moves).
``--save`` keeps the trained agent (``muzero-gym eval`` reads it).

    python tests/benchmarks/connect4_learning.py [--minutes 30] [--games 100] [--depths 2 4]
        [--alone-depth 2] [--seeds 0 1 2] [--save PATH] [--set section.key=value ...]
"""

from __future__ import annotations

import argparse
import time

from _machine import cpu_name
from _seeds import spread

from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.config import load_config
from muzero_gym.envs.opponents import AlphaBetaOpponent

CHUNK = 2000  # env steps between clock checks


def run_seed(seed: int, args: argparse.Namespace) -> dict[str, float]:
    """Trains one seed and plays its matches; returns the win rate against each opponent."""
    config = load_config("connect4", [*args.overrides, f"train.seed={seed}",
                                      "train.eval_interval=0", "log.progress=false"])
    agent = MuZeroAgent(config)
    start = time.perf_counter()
    while (time.perf_counter() - start) / 60 < args.minutes:
        agent.learn(agent.env_steps + CHUNK, progress=False)
        print(f"  seed {seed}: {agent.env_steps:>7} env steps, {agent.training_steps:>6} "
              f"learner steps, {(time.perf_counter() - start) / 60:5.1f} min", flush=True)
    minutes = (time.perf_counter() - start) / 60
    print(f"\nseed {seed}: trained {minutes:.1f} min: {agent.env_steps:,} env steps, "
          f"{agent.training_steps:,} learner steps")
    if args.save:
        agent.save(args.save if len(args.seeds) == 1 else f"{args.save}.seed{seed}")
    acting, selfplay = agent.acting_search.settings, agent.search.settings
    matches = [(f"alphabeta-{d}", d, acting.num_simulations) for d in args.depths]
    if args.alone_depth:
        matches.append((f"alone vs alphabeta-{args.alone_depth}", args.alone_depth, 1))
    print(f"greedy games, {acting.num_simulations} simulations per move, pUCT c_init "
          f"{acting.pb_c_init} (self-play: {selfplay.num_simulations}, {selfplay.pb_c_init})")
    print(f"{'opponent':>24} {'win':>6} {'draw':>6} {'loss':>6}  (agent first / second: w/d/l)")
    wins = {}
    for name, depth, simulations in matches:
        agent.set_eval_simulations(simulations)
        result = agent.play_against(AlphaBetaOpponent(depth, seed=seed), args.games, seed=seed)
        wins[name] = result.win_rate
        print(f"{name:>24} {result.win_rate:>6.0%} {result.draw_rate:>6.0%} "
              f"{result.loss_rate:>6.0%}  ({result.wins[0]}/{result.draws[0]}/"
              f"{result.losses[0]} / {result.wins[1]}/{result.draws[1]}/{result.losses[1]})",
              flush=True)
    return wins


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--games", type=int, default=100)
    parser.add_argument("--depths", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--alone-depth", type=int, default=2,
                        help="depth of the alpha-beta player the network alone meets; 0 = none")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--save", help="write the trained agent's checkpoint here")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    print(f"{cpu_name()}, {args.minutes:g} min a seed", flush=True)
    results = [run_seed(seed, args) for seed in args.seeds]
    print()
    for name in results[0]:
        print(spread(f"win rate, {name}", [100 * r[name] for r in results], "{:.0f}%"))


if __name__ == "__main__":
    main()
