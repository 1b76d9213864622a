"""What the Go, chess and shogi learning benchmarks share: train a ``*_cpu`` preset for a fixed
wall-clock time, with a short evaluation against a random mover along the way (``--eval-every
0`` leaves them out: at the chess preset's 400 simulations a 10-game check can outlast the
training between checks; ``--engine-games N`` adds N games against the engine to each, for a
curve against it too), then matches against a random mover and an engine (skipped, and said so,
when the engine is not installed). Time spent in evaluations is not counted as training time.
Imported by go9_learning.py, chess_learning.py and shogi_learning.py."""

from __future__ import annotations

import argparse
import time

import torch
from _machine import cpu_name
from _seeds import spread

from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.config import load_config
from muzero_gym.envs.engines import EngineNotFound
from muzero_gym.envs.opponents import make_opponent

CHUNK = 2_000  # moves between clock checks when there are no short evaluations


def _at_least(low: int):
    """An argparse type: an integer no smaller than ``low``."""
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"{value}: must be >= {low}")
        return value
    return parse


def parser(doc: str, engine: str, level: int) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--eval-every", type=_at_least(0), default=10_000, help="env steps between the "
                   "short evaluations against a random mover (10 games); 0 = none (train in "
                   f"blocks of {CHUNK:,} moves, so the run ends close to --minutes)")
    p.add_argument("--engine-games", type=_at_least(0), default=0, help="games against the "
                   f"engine ({engine}, both colours) in each short evaluation; 0 = none")
    p.add_argument("--games", type=_at_least(1), default=40, help="games of each final match")
    p.add_argument("--engine-level", type=int, default=level, help=f"{engine}'s strength")
    p.add_argument("--save", help="write each trained agent's checkpoint to PATH.seed<N>")
    p.add_argument("--set", dest="overrides", action="append", default=[])
    return p


def score(result) -> float:
    """Wins plus half the draws, as a fraction of the games."""
    return (sum(result.wins) + 0.5 * sum(result.draws)) / max(result.games, 1)


def match(agent: MuZeroAgent, name: str, games: int, level: int,
          seed: int) -> tuple[str, float | None]:
    """The match's line and the agent's score (None when the engine is not installed)."""
    try:
        opponent = make_opponent(name, seed=seed, level=level)
    except EngineNotFound as e:
        return f"{name}: not played ({e})", None
    try:
        result = agent.play_against(opponent, games, seed=seed)
    finally:
        if hasattr(opponent, "close"):
            opponent.close()
    return f"{name}: {result.summary()}; score {score(result):.0%}", score(result)


def run_seed(preset: str, engine: str, seed: int,
             args: argparse.Namespace) -> dict[str, float | None]:
    """Trains one seed for ``--minutes`` and plays its final matches; returns the scores."""
    config = load_config(preset, [*args.overrides, f"train.seed={seed}",
                                  "train.eval_interval=0", "log.progress=false"])
    print(f"{config.env.id} ({preset}), {args.minutes:g} min, seed {seed}, "
          f"{cpu_name()}, torch {torch.__version__}", flush=True)
    agent = MuZeroAgent(config)
    trained = 0.0
    while trained < args.minutes * 60:
        start = time.perf_counter()
        agent.learn(agent.env_steps + (args.eval_every or CHUNK), progress=False)
        trained += time.perf_counter() - start
        line = (f"  {agent.env_steps:>8,} moves, {agent.training_steps:>6,} learner steps, "
                f"{trained / 60:5.1f} min ({agent.env_steps / trained:5.1f} moves/s)")
        if args.eval_every:
            quick = agent.play_against(make_opponent("random", seed=seed), 10, seed=seed)
            line += f": against random {score(quick):.0%}"
            if args.engine_games:
                text, _ = match(agent, engine, args.engine_games, args.engine_level, seed)
                line += f"; {text}"
        print(line, flush=True)
    moves_played = agent.env_steps
    agent.close()
    if args.save:
        agent.save(f"{args.save}.seed{seed}")
    print(f"\nself-play and training: {moves_played:,} moves in {trained / 60:.1f} min "
          f"({moves_played / trained:.1f} moves/s, {agent.training_steps:,} learner steps)")
    scores = {"moves/s": moves_played / trained}
    for name, level in (("random", 0), (engine, args.engine_level)):
        line, scores[name] = match(agent, name, args.games, level, seed)
        print(line, flush=True)
    return scores


def run(preset: str, engine: str, args: argparse.Namespace) -> None:
    if args.engine_games and not args.eval_every:
        raise SystemExit("--engine-games needs the short evaluations: --eval-every > 0")
    results = [run_seed(preset, engine, seed, args) for seed in args.seeds]
    if len(results) > 1:
        print()
        for name in results[0]:
            values = [r[name] for r in results if r[name] is not None]
            if values:
                print(spread(name if name == "moves/s" else f"score against {name}",
                             [v if name == "moves/s" else 100 * v for v in values],
                             "{:.1f}" if name == "moves/s" else "{:.0f}%"))
