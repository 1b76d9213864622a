"""Speed of the board games' and 2048's rules: positions a second of ``simulate`` (one move in
each of B positions, observations and legal moves of the new ones included) at B = 64, on
random games that restart when they end, and of the rule library alone where there is one
(python-chess, cshogi: a legal-move list and a push per position).

    python tests/benchmarks/rules_speed.py [--seconds 5] [--batch 64]
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np
from _machine import cpu_name

import muzero_gym.envs  # noqa: F401  (registers the games)
from muzero_gym.config import EnvConfig
from muzero_gym.environment import make_env

GAMES = {"Connect Four": ("muzero_gym/ConnectFour-v0", {}),
         "Go 9 x 9": ("muzero_gym/Go-v0", {"size": 9}),
         "Go 19 x 19": ("muzero_gym/Go-v0", {"size": 19}),
         "chess": ("muzero_gym/Chess-v0", {}),
         "shogi (1 position of history)": ("muzero_gym/Shogi-v0", {"history": 1}),
         "2048 (spawns included)": ("muzero_gym/2048-v0", {})}


def simulate_rate(env_id: str, kwargs: dict, batch: int, seconds: float) -> float:
    env = make_env(EnvConfig(id=env_id, kwargs=kwargs)).unwrapped
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    start_state = env.get_state()
    states = [start_state.copy() for _ in range(batch)]
    masks = np.stack([env.legal_mask(s) for s in states])
    env.simulate(states[:1], np.flatnonzero(masks[0])[:1])  # compiled rules load first
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
        states, _, _, done, masks = env.simulate(states, actions)
        count += batch
        for i in np.flatnonzero(done):
            states[i] = start_state.copy()
            masks[i] = env.legal_mask(states[i])
    return count / (time.perf_counter() - start)


def library_rate(name: str, seconds: float) -> float | None:
    random.seed(0)
    if name == "chess":
        import chess

        board, count, start = chess.Board(), 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            moves = list(board.legal_moves)
            if not moves or board.is_game_over():
                board = chess.Board()
                continue
            board.push(random.choice(moves))
            count += 1
        return count / (time.perf_counter() - start)
    if name.startswith("shogi"):
        import cshogi

        board, count, start = cshogi.Board(), 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            moves = list(board.legal_moves)
            if not moves:
                board.reset()
                continue
            board.push(random.choice(moves))
            count += 1
        return count / (time.perf_counter() - start)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    print(f"{cpu_name()}; simulate at B = {args.batch}")
    print(f"{'game':<32} {'simulate positions/s':>21} {'library alone':>14}")
    for name, (env_id, kwargs) in GAMES.items():
        try:
            rate = simulate_rate(env_id, kwargs, args.batch, args.seconds)
        except Exception as e:  # noqa: BLE001 - an extra that is not installed
            print(f"{name:<32} {'(' + type(e).__name__ + ')':>21}")
            continue
        alone = library_rate(name, args.seconds)
        print(f"{name:<32} {rate:>21,.0f} {f'{alone:,.0f}' if alone else '-':>14}")


if __name__ == "__main__":
    main()
