"""The ``muzero-gym`` command line: train, evaluate, list presets, show a resolved config.

Examples::

    muzero-gym train cartpole                       # a shipped preset
    muzero-gym train Acrobot-v1 --env-steps 50000   # any Gymnasium id, defaults from its spaces
    muzero-gym train my_config.toml --set search.num_simulations=25 --seed 3
    muzero-gym train --resume runs/CartPole-v1__cartpole__0__1764400000
    muzero-gym eval runs/CartPole-v1__cartpole__0__1764400000 --episodes 20
    muzero-gym train tictactoe                      # two-player, true-simulator search
    muzero-gym eval runs/<tictactoe run> --opponent perfect --episodes 100
    muzero-gym play runs/<tictactoe run> --human-first
    muzero-gym presets
    muzero-gym config cartpole --set train.lr_init=0.001
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from muzero_gym.config import Config, ConfigError, list_presets, load_config


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="muzero-gym", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="MuZero for Gymnasium environments with discrete actions.",
        epilog="examples:" + __doc__.split("Examples::", 1)[1])
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train an agent (or resume a run)",
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           epilog="examples:" + __doc__.split("Examples::", 1)[1])
    train.add_argument("target", nargs="?",
                       help="preset name, path to a .toml config, or a Gymnasium env id")
    _add_overrides(train)
    train.add_argument("--seed", type=int, help="sets train.seed")
    train.add_argument("--env-steps", type=int, help="total env steps of the run (train.env_steps)")
    train.add_argument("--logdir", help="folder of run folders (log.logdir, default runs/)")
    train.add_argument("--run-name", help="run folder name (log.run_name)")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR")
    train.add_argument("--no-progress", action="store_true", help="no progress line")

    evaluate = sub.add_parser("eval", help="evaluate a trained agent greedily")
    evaluate.add_argument("checkpoint", help="a run folder or a checkpoint file")
    evaluate.add_argument("--episodes", type=int, default=20, help="episodes (default 20)")
    evaluate.add_argument("--render", action="store_true", help="show the env while playing")
    evaluate.add_argument("--seed", type=int, help="seed of the evaluation envs")
    evaluate.add_argument("--opponent", choices=("random", "perfect", "alphabeta"),
                          help="two-player games: opponent (default train.eval_opponent)")
    evaluate.add_argument("--depth", type=int, help="search depth of the alphabeta opponent")
    _add_simulations(evaluate)
    evaluate.add_argument("--opening-plies", type=int, metavar="N",
                          help="two players: open each game with N random moves, pairs of games "
                               "sharing one with the seats swapped (default "
                               "train.eval_opening_plies)")

    play = sub.add_parser("play", help="play against a trained agent in the terminal")
    play.add_argument("checkpoint", help="a run folder or a checkpoint file")
    play.add_argument("--human-first", action="store_true", help="you move first (two players)")
    play.add_argument("--watch", action="store_true", help="the agent plays both sides")
    play.add_argument("--seed", type=int, help="seed of the env")
    _add_simulations(play)

    sub.add_parser("presets", help="list the shipped presets")
    config = sub.add_parser("config", help="print the resolved config as TOML")
    config.add_argument("target", help="preset name, path to a .toml config, or a Gymnasium id")
    _add_overrides(config)
    return parser


def _add_overrides(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="SECTION.KEY=VALUE", help="override a config value (repeatable)")


def _add_simulations(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--simulations", type=int, metavar="N",
                        help="simulations per search (default search.eval_simulations, or "
                             "search.num_simulations when that is 0)")


def _load_acting_agent(args: argparse.Namespace):
    """The checkpoint's agent, searching with ``--simulations`` if given."""
    from muzero_gym.agents.muzero import MuZeroAgent

    if args.simulations is not None and args.simulations < 1:
        raise ConfigError(f"--simulations = {args.simulations}: must be >= 1")
    agent = MuZeroAgent.load(args.checkpoint)
    if args.simulations is not None:
        agent.set_eval_simulations(args.simulations)
    return agent


def resolve_config(target: str, overrides: Sequence[str] = ()) -> Config:
    """A preset, a TOML file, or (for any other name) a registered Gymnasium env id with
    defaults chosen from its spaces: the cartpole preset's MLP settings for vector
    observations, a small residual network over 4 stacked frames for images, and the
    atari100k preset for ``ALE/`` ids."""
    if target in list_presets() or target.endswith(".toml"):
        return load_config(target, overrides)
    if target.startswith("ALE/"):
        config = load_config("atari100k", [f"env.id={target}", *overrides])
        return dataclasses.replace(config, preset="atari100k")
    from muzero_gym.environment import EnvError, make_env
    from muzero_gym.game import ObservationEncoder

    base = load_config("cartpole").replace([f"env.id={target}"])
    try:
        env = make_env(base.env)
    except EnvError as e:
        raise EnvError(f"{target!r} is neither a preset ({', '.join(list_presets())}), a .toml "
                       f"file, nor a usable Gymnasium env: {e}") from None
    is_image = ObservationEncoder(env.observation_space).is_image
    env.close()
    if is_image:
        base = base.replace(["model.kind=resnet_small", "env.num_stacked_observations=4",
                             "model.value_support_size=300", "model.reward_support_size=300"])
    return dataclasses.replace(base.replace(overrides), preset="auto")


def _train(args: argparse.Namespace) -> int:
    from muzero_gym.agents.muzero import MuZeroAgent
    from muzero_gym.checkpoint import CHECKPOINT_NAME
    from muzero_gym.run_log import default_run_name

    settings = list(args.overrides)
    if args.seed is not None:
        settings.append(f"train.seed={args.seed}")
    if args.logdir is not None:
        settings.append(f"log.logdir={args.logdir}")
    if args.run_name is not None:
        settings.append(f"log.run_name={args.run_name}")

    if args.resume:
        if settings:
            raise ConfigError("a resumed run keeps its config; only --env-steps may change")
        expect = resolve_config(args.target).env.id if args.target else None
        run_dir = Path(args.resume)
        agent = MuZeroAgent.load(run_dir, run_dir=run_dir, expect_env_id=expect)
        print(f"resuming {run_dir} at {agent.env_steps:,} env steps, "
              f"{agent.training_steps:,} learner steps")
    else:
        if not args.target:
            raise ConfigError("name a preset, a .toml file or an env id (or use --resume)")
        config = resolve_config(args.target, settings)
        run_dir = Path(config.log.logdir) / (config.log.run_name or default_run_name(config))
        if (run_dir / CHECKPOINT_NAME).exists():
            raise ConfigError(f"{run_dir} already holds a run; use --resume {run_dir} or "
                              "another --run-name")
        agent = MuZeroAgent(config, run_dir=run_dir)
        print(f"training {config.env.id} ({config.preset}) -> {run_dir}")
    total = args.env_steps if args.env_steps is not None else agent.config.train.env_steps
    try:
        with agent:
            agent.learn(total, progress=not args.no_progress and agent.config.log.progress)
    except KeyboardInterrupt:
        print(f"\ninterrupted at {agent.env_steps:,} env steps; checkpoint saved in {run_dir}; "
              f"continue with: muzero-gym train --resume {run_dir}", file=sys.stderr)
        return 130
    train = agent.config.train
    if agent.config.env.num_players == 2:
        result = agent.play_against(_opponent(train.eval_opponent, train.eval_opponent_depth,
                                              train.seed), train.eval_episodes)
        summary = f"against {train.eval_opponent}: {result.summary()}"
    else:
        returns = agent.evaluate(train.eval_episodes, progress=False)
        summary = (f"eval return {returns.mean():.1f} +- {returns.std():.1f} over "
                   f"{len(returns)} episodes")
    print(f"done: {agent.env_steps:,} env steps, {agent.training_steps:,} learner steps, "
          f"{summary}; run folder {run_dir}")
    return 0


def _opponent(name: str, depth: int, seed: int | None):
    from muzero_gym.envs.opponents import make_opponent

    if depth < 1:
        raise ConfigError(f"--depth = {depth}: must be >= 1")
    return make_opponent(name, depth, seed)


def _evaluate(args: argparse.Namespace) -> int:
    if args.episodes < 1:
        raise ConfigError(f"--episodes = {args.episodes}: must be >= 1")
    agent = _load_acting_agent(args)
    train = agent.config.train
    if agent.config.env.num_players == 2:
        name = args.opponent or train.eval_opponent
        opponent = _opponent(name, args.depth or train.eval_opponent_depth, args.seed)
        if args.opening_plies is not None and args.opening_plies < 0:
            raise ConfigError(f"--opening-plies = {args.opening_plies}: must be >= 0")
        result = agent.play_against(opponent, args.episodes, seed=args.seed, progress=True,
                                    opening_plies=args.opening_plies)
        print(f"{agent.config.env.id} against {name}: {result.summary()}")
        return 0
    returns = agent.evaluate(args.episodes, render=args.render, progress=True, seed=args.seed)
    print(f"{agent.config.env.id}: return {np.mean(returns):.1f} +- {np.std(returns):.1f} "
          f"over {len(returns)} episodes (min {np.min(returns):.1f}, max {np.max(returns):.1f})")
    return 0


def _play(args: argparse.Namespace) -> int:
    from muzero_gym.play import play_in_terminal

    agent = _load_acting_agent(args)
    play_in_terminal(agent, human_first=args.human_first, watch=args.watch, seed=args.seed)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from muzero_gym.checkpoint import CheckpointError
    from muzero_gym.environment import EnvError
    from muzero_gym.game import SpaceError

    args = _parser().parse_args(argv)
    try:
        if args.command == "presets":
            for name in list_presets():
                print(f"{name:<12} {load_config(name).env.id}")
            return 0
        if args.command == "config":
            print(resolve_config(args.target, args.overrides).to_toml(), end="")
            return 0
        if args.command == "train":
            return _train(args)
        if args.command == "play":
            return _play(args)
        return _evaluate(args)
    except (ConfigError, EnvError, SpaceError, CheckpointError) as e:
        print(f"muzero-gym: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
