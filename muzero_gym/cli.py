"""The ``muzero-gym`` command line: train, evaluate, play, list presets, show a resolved config.

Examples::

    muzero-gym train cartpole                       # a shipped preset
    muzero-gym train Acrobot-v1 --env-steps 50000   # any Gymnasium id, defaults from its spaces
    muzero-gym train my_envs:Corridor-v0            # an env that my_envs.py registers
    muzero-gym train my_config.toml --set search.num_simulations=25 --seed 3
    muzero-gym train --resume runs/CartPole-v1__cartpole__0__1764400000
    muzero-gym eval runs/CartPole-v1__cartpole__0__1764400000 --episodes 20
    muzero-gym train tictactoe                      # two-player, true-simulator search
    muzero-gym eval runs/<tictactoe run> --opponent perfect --episodes 100
    muzero-gym play runs/<tictactoe run> --human-first
    muzero-gym presets
    muzero-gym config cartpole --set train.lr_init=0.001

Bad input gets one line on stderr and exit status 2, with nothing written. Ctrl-C, SIGTERM or
SIGHUP stop a command once the move or checkpoint write in progress is done (a second signal
stops it at once), with exit status 128 + the signal's number (:mod:`muzero_gym.stops`).
``train`` then saves a checkpoint and says how to resume; it holds its run folder's lock while
it runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from muzero_gym.config import ConfigError, check_execution_overrides, list_presets, load_config
from muzero_gym.envs.opponents import OPPONENTS
from muzero_gym.stops import exit_status, stop_name, stop_signals


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="muzero-gym", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="MuZero for Gymnasium environments with discrete actions.",
        epilog="examples:" + __doc__.split("Examples::", 1)[1].split("\n\n", 2)[1])
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train an agent (or resume a run)")
    train.add_argument("target", nargs="?",
                       help="preset name, path to a .toml config, or a Gymnasium env id "
                            "(module:EnvId imports module from the current folder or "
                            "PYTHONPATH)")
    _add_overrides(train)
    train.add_argument("--seed", type=int, help="sets train.seed")
    train.add_argument("--env-steps", type=int, help="total env steps of the run (train.env_steps)")
    train.add_argument("--logdir", help="folder of run folders (log.logdir, default runs/)")
    train.add_argument("--run-name", help="run folder name (log.run_name)")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR")
    train.add_argument("--no-progress", action="store_true", help="no progress line")
    train.add_argument("--ray-address", metavar="ADDRESS",
                       help="train.backend = ray: join the Ray cluster at ADDRESS (default: "
                            "start one on this machine, listening on 127.0.0.1)")
    _add_trust(train)

    evaluate = sub.add_parser("eval", help="evaluate a trained agent greedily")
    evaluate.add_argument("checkpoint", help="a run folder or a checkpoint file")
    evaluate.add_argument("--episodes", type=int, default=20, help="episodes (default 20)")
    evaluate.add_argument("--render", action="store_true", help="show the env while playing")
    evaluate.add_argument("--seed", type=int, help="seed of the evaluation envs")
    evaluate.add_argument("--opponent", choices=OPPONENTS,
                          help="two-player games: opponent (default train.eval_opponent); "
                               "gnugo, stockfish and gnushogi are engines to install "
                               "(apt-get install gnugo stockfish gnushogi)")
    evaluate.add_argument("--depth", type=int, help="search depth of the alphabeta opponent")
    evaluate.add_argument("--level", type=int, help="engine opponent's strength (GNU Go level, "
                                                    "Stockfish Skill Level, GNU Shogi depth)")
    evaluate.add_argument("--engine-path", help="the engine opponent's binary (default: found "
                                                "on PATH or in /usr/games)")
    _add_simulations(evaluate)
    evaluate.add_argument("--opening-plies", type=int, metavar="N",
                          help="two players: open each game with N random moves, pairs of games "
                               "sharing one with the seats swapped (default "
                               "train.eval_opening_plies)")
    _add_env(evaluate)

    play = sub.add_parser("play", help="play against a trained agent in the terminal")
    play.add_argument("checkpoint", help="a run folder or a checkpoint file")
    play.add_argument("--human-first", action="store_true", help="you move first (two players)")
    play.add_argument("--watch", action="store_true", help="the agent plays both sides")
    play.add_argument("--seed", type=int, help="seed of the env")
    _add_simulations(play)
    _add_env(play)

    for protocol, game in (("gtp", "Go"), ("uci", "chess"), ("usi", "shogi")):
        engine = sub.add_parser(protocol, help=f"run a trained {game} agent as a "
                                               f"{protocol.upper()} engine on stdin/stdout")
        engine.add_argument("checkpoint", help="a run folder or a checkpoint file")
        _add_simulations(engine)
        _add_env(engine)

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
    parser.add_argument("--draw-value", type=float, metavar="V",
                        help="what a drawn game is worth to the agent, in [-1, 1]; negative = "
                             "contempt, it plays on rather than draw (two-player games; "
                             "default search.eval_draw_value)")


def _add_trust(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trust-env-module", action="store_true",
                        help="let a checkpoint whose env id is module:EnvId import that module")


def _add_env(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", metavar="ENV_ID",
                        help="the env id the checkpoint must be for (confirms a module:EnvId)")
    _add_trust(parser)


def _positive(name: str, value: int | None, low: int = 1) -> None:
    if value is not None and value < low:
        raise ConfigError(f"{name} = {value}: must be >= {low}")


def _load_acting_agent(args: argparse.Namespace):
    """The checkpoint's agent, searching with ``--simulations`` if given."""
    from muzero_gym.agents.muzero import MuZeroAgent

    _positive("--simulations", args.simulations)
    agent = MuZeroAgent.load(args.checkpoint, expect_env_id=args.env,
                             trust_env_module=args.trust_env_module, include_replay=False)
    if args.simulations is not None:
        agent.set_eval_simulations(args.simulations)
    if args.draw_value is not None:
        agent.set_eval_draw_value(args.draw_value)
    return agent


def _train(args: argparse.Namespace) -> int:
    from muzero_gym.agents.muzero import MuZeroAgent
    from muzero_gym.checkpoint import CHECKPOINT_NAME
    from muzero_gym.run_folder import check_run_name, make_run_folder
    from muzero_gym.run_log import default_run_name

    _positive("--env-steps", args.env_steps)
    settings = list(args.overrides)
    if args.seed is not None:
        settings.append(f"train.seed={args.seed}")
    if args.logdir is not None:
        settings.append(f"log.logdir={args.logdir}")
    if args.run_name is not None:
        check_run_name(args.run_name)
        settings.append(f"log.run_name={args.run_name}")

    if args.resume:
        if len(settings) != len(args.overrides):
            raise ConfigError("a resumed run keeps its config: --seed, --logdir and --run-name "
                              "cannot change")
        expect = load_config(args.target).env.id if args.target else None
        run_dir = Path(args.resume)
        agent = MuZeroAgent.load(run_dir, run_dir=run_dir, expect_env_id=expect,
                                 trust_env_module=args.trust_env_module,
                                 overrides=check_execution_overrides(args.overrides))
        agent.lock_run_dir()
        print(f"resuming {run_dir} at {agent.env_steps:,} env steps, "
              f"{agent.training_steps:,} learner steps")
    else:
        if not args.target:
            raise ConfigError("name a preset, a .toml file or an env id (or use --resume)")
        config = load_config(args.target, settings)
        run_dir = Path(config.log.logdir) / (config.log.run_name or default_run_name(config))
        if (run_dir / CHECKPOINT_NAME).exists():
            raise ConfigError(f"{run_dir} already holds a run; use --resume {run_dir} or "
                              "another --run-name")
        agent = MuZeroAgent(config, run_dir=run_dir)
        make_run_folder(run_dir)
        agent.lock_run_dir()
        if (run_dir / CHECKPOINT_NAME).exists():  # another process got there first
            agent.unlock_run_dir()
            raise ConfigError(f"{run_dir} already holds a run; use --resume {run_dir} or "
                              "another --run-name")
        print(f"training {config.env.id} ({config.preset}) -> {run_dir}")
    agent.ray_address = args.ray_address
    total = args.env_steps if args.env_steps is not None else agent.config.train.env_steps
    try:
        with agent:
            try:
                agent.learn(total, progress=not args.no_progress and agent.config.log.progress)
            except KeyboardInterrupt as stop:
                saved = ("no checkpoint was written" if agent.saved_env_steps is None else
                         f"checkpoint of {agent.saved_env_steps:,} env steps in {run_dir}")
                print(f"\nstopped ({stop_name(stop)}) at {agent.env_steps:,} env steps; "
                      f"{saved}; continue with: muzero-gym train --resume {run_dir}",
                      file=sys.stderr)
                return exit_status(stop)
            try:
                result = agent.evaluate_and_log(progress=not args.no_progress)
            except KeyboardInterrupt as stop:
                print(f"\nfinal evaluation stopped ({stop_name(stop)}); checkpoint of "
                      f"{agent.saved_env_steps:,} env steps in {run_dir}", file=sys.stderr)
                return exit_status(stop)
    finally:
        agent.unlock_run_dir()
    train = agent.config.train
    if agent.config.env.num_players == 2:
        summary = f"against {train.eval_opponent}: {result.summary()}"
    else:
        summary = (f"eval return {result.mean():.1f} +- {result.std():.1f} over "
                   f"{len(result)} episodes")
    print(f"done: {agent.env_steps:,} env steps, {agent.training_steps:,} learner steps, "
          f"{summary}; run folder {run_dir}")
    return 0


def _opponent(name: str, depth: int, seed: int | None, level: int = 1,
              engine_path: str | None = None):
    from muzero_gym.envs.engines import EngineNotFound
    from muzero_gym.envs.opponents import make_opponent

    _positive("--depth", depth)
    _positive("--level", level, low=0)
    try:
        return make_opponent(name, depth, seed, level, engine_path)
    except EngineNotFound as e:
        raise ConfigError(str(e)) from None


def _evaluate(args: argparse.Namespace) -> int:
    _positive("--episodes", args.episodes)
    _positive("--opening-plies", args.opening_plies, low=0)
    agent = _load_acting_agent(args)
    train = agent.config.train
    two_player_only = [flag for flag, value in (("--opponent", args.opponent),
                                                ("--depth", args.depth),
                                                ("--level", args.level),
                                                ("--engine-path", args.engine_path),
                                                ("--opening-plies", args.opening_plies))
                       if value is not None]
    if agent.config.env.num_players == 2:
        if args.render:
            raise ConfigError("--render shows single-player envs; watch a two-player game "
                              f"with: muzero-gym play {args.checkpoint} --watch")
        name = args.opponent or train.eval_opponent
        level = args.level if args.level is not None else train.eval_opponent_level
        opponent = _opponent(name, args.depth or train.eval_opponent_depth, args.seed, level,
                             args.engine_path)
        try:
            result = agent.play_against(opponent, args.episodes, seed=args.seed, progress=True,
                                        opening_plies=args.opening_plies)
        finally:
            if hasattr(opponent, "close"):
                opponent.close()
        print(f"{agent.config.env.id} against {name}: {result.summary()}")
        return 0
    if two_player_only:
        raise ConfigError(f"{', '.join(two_player_only)}: for two-player games; "
                          f"{agent.config.env.id} has one player")
    returns = agent.evaluate(args.episodes, render=args.render, progress=True, seed=args.seed)
    print(f"{agent.config.env.id}: return {np.mean(returns):.1f} +- {np.std(returns):.1f} "
          f"over {len(returns)} episodes (min {np.min(returns):.1f}, max {np.max(returns):.1f})")
    return 0


ENGINE_ENVS = {"gtp": ("GoEnv", "Go"), "uci": ("ChessEnv", "chess"),
               "usi": ("ShogiEnv", "shogi")}


def _engine(args: argparse.Namespace) -> int:
    from muzero_gym import protocols
    from muzero_gym.environment import make_env

    agent = _load_acting_agent(args)
    probe = make_env(agent.config.env)
    kind = type(probe.unwrapped).__name__
    probe.close()
    expected, game = ENGINE_ENVS[args.command]
    if kind != expected:
        raise ConfigError(f"{args.command} runs {game} agents; this one plays "
                          f"{agent.config.env.id}")
    frontend = {"gtp": protocols.GTPEngine, "uci": protocols.UCIEngine,
                "usi": protocols.USIEngine}[args.command](agent)
    frontend.run()
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
    from muzero_gym.learner import TrainingDivergedError
    from muzero_gym.run_folder import RunFolderError
    from muzero_gym.selfplay import NonFiniteEnvData

    args = _parser().parse_args(argv)
    # As ``python -m`` does: env modules (``my_envs:Corridor-v0``) may live in the current
    # folder. Appended, so that a file there cannot shadow an installed package.
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        if args.command == "presets":
            names = list_presets()
            width = max(map(len, names))
            for name in names:
                print(f"{name:<{width}}  {load_config(name).env.id}")
            return 0
        if args.command == "config":
            print(load_config(args.target, args.overrides).to_toml(), end="")
            return 0
        with stop_signals():
            if args.command == "train":
                return _train(args)
            if args.command == "play":
                return _play(args)
            if args.command in ENGINE_ENVS:
                return _engine(args)
            return _evaluate(args)
    except (ConfigError, EnvError, SpaceError, CheckpointError, RunFolderError,
            TrainingDivergedError, NonFiniteEnvData) as e:
        print(f"muzero-gym: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        print(f"\nmuzero-gym: stopped ({stop_name(stop)})", file=sys.stderr)
        return exit_status(stop)


if __name__ == "__main__":
    sys.exit(main())
