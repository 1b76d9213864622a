"""What the Go, chess and shogi learning benchmarks share: train a ``*_cpu`` preset for a fixed
wall-clock time, with a short evaluation against a random mover along the way, then matches
against a random mover and an engine (skipped, and said so, when the engine is not installed).
Imported by go9_learning.py, chess_learning.py and shogi_learning.py."""

from __future__ import annotations

import argparse
import platform
import time

import torch

from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.config import load_config
from muzero_gym.envs.engines import EngineNotFound
from muzero_gym.envs.opponents import make_opponent


def parser(doc: str, engine: str, level: int) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=10_000, help="env steps between the "
                   "short evaluations against a random mover (10 games)")
    p.add_argument("--games", type=int, default=40, help="games of each final match")
    p.add_argument("--engine-level", type=int, default=level, help=f"{engine}'s strength")
    p.add_argument("--set", dest="overrides", action="append", default=[])
    return p


def score(result) -> float:
    """Wins plus half the draws, as a fraction of the games."""
    return (sum(result.wins) + 0.5 * sum(result.draws)) / max(result.games, 1)


def match(agent: MuZeroAgent, name: str, games: int, level: int, seed: int) -> str:
    try:
        opponent = make_opponent(name, seed=seed, level=level)
    except EngineNotFound as e:
        return f"{name}: not played ({e})"
    try:
        result = agent.play_against(opponent, games, seed=seed)
    finally:
        if hasattr(opponent, "close"):
            opponent.close()
    return f"{name}: {result.summary()}; score {score(result):.0%}"


def run(preset: str, engine: str, args: argparse.Namespace) -> None:
    config = load_config(preset, [*args.overrides, f"train.seed={args.seed}",
                                  "train.eval_interval=0", "log.progress=false"])
    print(f"{config.env.id} ({preset}), {args.minutes:g} min, seed {args.seed}, "
          f"{platform.processor() or platform.machine()}, torch {torch.__version__}",
          flush=True)
    agent = MuZeroAgent(config)
    trained, moves_played = 0.0, 0
    while trained < args.minutes * 60:
        start = time.perf_counter()
        agent.learn(agent.env_steps + args.eval_every, progress=False)
        trained += time.perf_counter() - start
        quick = agent.play_against(make_opponent("random", seed=args.seed), 10,
                                   seed=args.seed)
        print(f"  {agent.env_steps:>8,} moves, {agent.training_steps:>6,} learner steps, "
              f"{trained / 60:5.1f} min ({agent.env_steps / trained:5.1f} moves/s): against "
              f"random {score(quick):.0%}", flush=True)
    moves_played = agent.env_steps
    agent.close()
    print(f"\nself-play and training: {moves_played:,} moves in {trained / 60:.1f} min "
          f"({moves_played / trained:.1f} moves/s, {agent.training_steps:,} learner steps)")
    print(match(agent, "random", args.games, 0, args.seed))
    print(match(agent, engine, args.games, args.engine_level, args.seed))
