"""The ``muzero-gym`` command line: list presets, show a resolved config, check a preset end to end.

Examples::

    muzero-gym presets
    muzero-gym config cartpole --set search.num_simulations=25
    muzero-gym check cartpole
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import numpy as np

from muzero_gym.config import ConfigError, list_presets, load_config


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="muzero-gym", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="MuZero for Gymnasium environments with discrete actions.",
        epilog=__doc__.split("Examples::", 1)[1])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("presets", help="list the shipped presets")
    for name, text in (("config", "print the resolved config as TOML"),
                       ("check", "play one searched episode, store it, run a few learner steps")):
        p = sub.add_parser(name, help=text)
        p.add_argument("preset", help="preset name or path to a .toml file")
        p.add_argument("--set", dest="overrides", action="append", default=[],
                       metavar="SECTION.KEY=VALUE", help="override a config value (repeatable)")
        if name == "check":
            p.add_argument("--max-steps", type=int, default=200,
                           help="cap on the episode length (default 200)")
            p.add_argument("--learner-steps", type=int, default=20,
                           help="learner steps on the stored episode (default 20)")
    return parser


def _check(config, max_steps: int, learner_steps: int) -> None:
    """One episode with search on the preset's env, then learner steps on it."""
    import torch

    from muzero_gym.environment import make_env
    from muzero_gym.game import Game
    from muzero_gym.inference import plan
    from muzero_gym.learner import Learner
    from muzero_gym.mcts import BatchedMCTS, SearchSettings, select_actions
    from muzero_gym.networks import build_network
    from muzero_gym.replay import ReplayBuffer

    env = make_env(config.env)
    game = Game.for_env(env, config.env.num_stacked_observations, config.env.stack_actions,
                        config.env.num_players)
    rng = np.random.default_rng(config.train.seed)
    torch.manual_seed(config.train.seed)
    game.reset(seed=config.train.seed)
    network = build_network(config.model, game.make_image().shape, game.num_actions,
                            image_input=game.encoder.is_image)
    search = BatchedMCTS(SearchSettings.from_config(config), game.num_actions)
    start = time.perf_counter()
    while not game.done and len(game) < max_steps:
        result = plan(network, search, game.make_image()[None],
                      game.legal_action_mask()[None], np.array([game.to_play()]), rng)
        game.store_search_statistics(result.root_value[0], result.search_policy[0])
        temperature = config.search.temperature(0, len(game))
        game.apply(int(select_actions(result.visit_counts, temperature, rng)[0]))
    if not game.done:
        game.truncated = True
    elapsed = time.perf_counter() - start
    print(f"episode: {len(game)} steps, return {sum(game.rewards):.1f}, "
          f"{len(game) / elapsed:.0f} searched steps/s")
    replay = ReplayBuffer(config.replay, num_actions=game.num_actions,
                          num_unroll_steps=config.train.num_unroll_steps,
                          td_steps=config.train.td_steps, discount=config.train.discount)
    replay.add_game(game)
    learner = Learner(network, config.train)
    losses = []
    for _ in range(learner_steps):
        batch = replay.sample(min(config.train.batch_size, 64), rng,
                              config.train.bootstrap_source == "target_network")
        metrics = learner.train_step(batch)
        replay.update_priorities(batch.slots, batch.game_ids, metrics["priorities"])
        losses.append(metrics["total"])
    print(f"learner: {learner_steps} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    env.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "presets":
            for name in list_presets():
                config = load_config(name)
                print(f"{name:<12} {config.env.id}")
            return 0
        config = load_config(args.preset, args.overrides)
        if args.command == "config":
            print(config.to_toml(), end="")
        elif args.command == "check":
            _check(config, args.max_steps, args.learner_steps)
        return 0
    except (ConfigError, ValueError, TypeError) as e:
        print(f"muzero-gym: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
