"""Win rate of the connect4 preset against alpha-beta players after a fixed training time.

Trains the ``connect4`` preset for ``--minutes`` of wall-clock time (self-play and learning on
this machine), then plays ``--games`` greedy games (half as first player, each move searched
with ``search.eval_simulations`` and ``search.eval_pb_c_init``) against the depth-limited
alpha-beta player at each depth in ``--depths`` and prints the win/draw/loss rates; then the
network alone (one simulation per move: the prior's choice) against depth ``--alone-depth``,
which shows what the learning carries without the play-time search, and how often the network
alone makes the one-move tactics: taking an immediate win, and blocking the opponent's single
immediate threat, in the positions of ``--tactics-games`` games between two depth-2 alpha-beta
players after four random plies (also every ``--curve-every`` env steps while training, read
from the learner's network without changing the run). With several ``--seeds`` it prints each
figure's mean and spread over them.
Each pair of games opens with the same ``train.eval_opening_plies`` random moves (2 in the
preset) with the seats swapped: greedy play against a deterministic opponent would otherwise
repeat one game per seat. No opening repeats while others remain (there are 49 of two moves).
``--save`` keeps the trained agent (``muzero-gym eval`` reads it).

    python tests/benchmarks/connect4_learning.py [--minutes 30] [--games 100] [--depths 2 4]
        [--alone-depth 2] [--tactics-games 200] [--curve-every 20000] [--seeds 0 1 2]
        [--save PATH] [--set section.key=value ...]
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch
from _machine import cpu_name
from _seeds import spread

from muzero_gym.agents.muzero import MuZeroAgent, _crossed
from muzero_gym.config import load_config
from muzero_gym.envs.opponents import AlphaBetaOpponent

CHUNK = 2000  # env steps between clock checks
RANDOM_PLIES = 4  # random moves that open each game of the tactics positions


def tactics_positions(num_games: int, seed: int) -> tuple[list, list[set[int]], np.ndarray]:
    """Positions of games between two depth-2 alpha-beta players (after ``RANDOM_PLIES``
    random moves) where the player to move can win at once, or cannot but the opponent
    threatens exactly one immediate win: (positions, the right moves of each, whether each
    is a win to take)."""
    env = gym.make("muzero_gym/ConnectFour-v0").unwrapped
    rng = np.random.default_rng(seed)
    player = AlphaBetaOpponent(2, seed=seed)
    states, right_moves, is_win = [], [], []
    for _ in range(num_games):
        env.reset(seed=int(rng.integers(2**31)))
        state, plies = env.get_state(), 0
        while not state.done:
            mask = env.legal_mask(state)
            own = _winning_moves(env, state)
            threat = state.copy()
            threat.to_play = 1 - state.to_play
            theirs = set() if own else _winning_moves(env, threat)
            if own or len(theirs) == 1:
                states.append(state)
                right_moves.append(own or theirs)
                is_win.append(bool(own))
            if plies < RANDOM_PLIES:
                action = int(rng.choice(np.flatnonzero(mask)))
            else:
                env.set_state(state)
                action = player.choose(env, mask)
            state = env.simulate([state], np.array([action]), observe=False)[0][0]
            plies += 1
    return states, right_moves, np.array(is_win)


def _winning_moves(env, state) -> set[int]:
    actions = np.flatnonzero(env.legal_mask(state))
    rewards = env.simulate([state] * len(actions), actions, observe=False)[2]
    return set(actions[rewards > 0].tolist())


class TacticsProbe:
    """The one-move tactics positions of ``num_games`` games (see :func:`tactics_positions`),
    encoded once for an agent; :meth:`measure` reads the learner's copy of the weights that
    play uses (its prior's argmax over the legal moves, which is what one simulation plays;
    the moving average with ``train.averaged_weights_tau``) without touching self-play or
    any random stream, so a curve of it leaves the training run as it was."""

    def __init__(self, agent: MuZeroAgent, num_games: int, seed: int):
        env = gym.make("muzero_gym/ConnectFour-v0").unwrapped
        states, self.right_moves, self.is_win = tactics_positions(num_games, seed)
        images, masks = [], []
        for state in states:
            game = agent.new_game()
            game.start(env.observe(state), {"action_mask": env.legal_mask(state),
                                            "to_play": state.to_play})
            images.append(game.make_image())
            masks.append(game.legal_action_mask())
        self.images = torch.as_tensor(np.stack(images), dtype=torch.float32)
        self.illegal = ~torch.as_tensor(np.stack(masks), dtype=torch.bool)

    def measure(self, agent: MuZeroAgent) -> tuple[float, float]:
        """Shares of the positions in which the prior's choice takes the immediate win, and
        blocks the single threat."""
        network = agent.learner.playing_network
        was_training = network.training
        network.eval()
        with torch.no_grad():
            logits = network.initial_inference(self.images.to(agent.device)).policy_logits
        network.train(was_training)
        chosen = logits.float().cpu().masked_fill(self.illegal, -torch.inf).argmax(1).numpy()
        right = np.array([int(a) in moves for a, moves in zip(chosen, self.right_moves)])
        return float(right[self.is_win].mean()), float(right[~self.is_win].mean())

    def describe(self, took: float, blocked: float) -> str:
        return (f"takes the win in {took:.0%} of {self.is_win.sum()} positions, blocks the "
                f"single threat in {blocked:.0%} of {(~self.is_win).sum()}")


def run_seed(seed: int, args: argparse.Namespace) -> dict[str, float]:
    """Trains one seed and plays its matches; returns the win rate against each opponent."""
    config = load_config("connect4", [*args.overrides, f"train.seed={seed}",
                                      "train.eval_interval=0", "log.progress=false"])
    agent = MuZeroAgent(config)
    probe = TacticsProbe(agent, args.tactics_games, seed) if args.tactics_games else None
    start = time.perf_counter()
    while (time.perf_counter() - start) / 60 < args.minutes:
        before = agent.env_steps
        agent.learn(agent.env_steps + CHUNK, progress=False)
        curve = ""
        if probe and _crossed(before, agent.env_steps, args.curve_every):
            curve = ", alone: wins {:.0%}, blocks {:.0%}".format(*probe.measure(agent))
        print(f"  seed {seed}: {agent.env_steps:>7} env steps, {agent.training_steps:>6} "
              f"learner steps, {(time.perf_counter() - start) / 60:5.1f} min{curve}", flush=True)
    minutes = (time.perf_counter() - start) / 60
    print(f"\nseed {seed}: trained {minutes:.1f} min: {agent.env_steps:,} env steps, "
          f"{agent.training_steps:,} learner steps")
    if args.save:
        agent.save(args.save if len(args.seeds) == 1 else f"{args.save}.seed{seed}")
    acting, selfplay = agent.acting_search.settings, agent.search.settings
    matches = [(f"alphabeta-{d}", d, acting.num_simulations) for d in args.depths]
    if args.alone_depth:
        matches.append((f"alone vs alphabeta-{args.alone_depth}", args.alone_depth, 1))
    root = "pUCT c_init" if acting.root_selection == "puct" else "Gumbel root, c_init"
    print(f"greedy games, {acting.num_simulations} simulations per move, {root} "
          f"{acting.pb_c_init} (self-play: {selfplay.num_simulations}, {selfplay.pb_c_init})")
    print(f"{'opponent':>24} {'win':>6} {'draw':>6} {'loss':>6}  (agent first / second: w/d/l)")
    wins = {}
    for name, depth, simulations in matches:
        agent.set_eval_simulations(simulations)
        result = agent.play_against(AlphaBetaOpponent(depth, seed=seed), args.games, seed=seed)
        wins[f"win rate, {name}"] = result.win_rate
        print(f"{name:>24} {result.win_rate:>6.0%} {result.draw_rate:>6.0%} "
              f"{result.loss_rate:>6.0%}  ({result.wins[0]}/{result.draws[0]}/"
              f"{result.losses[0]} / {result.wins[1]}/{result.draws[1]}/{result.losses[1]})",
              flush=True)
    if probe:
        took, blocked = probe.measure(agent)
        print(f"{'alone, one-move tactics':>24} {probe.describe(took, blocked)}", flush=True)
        wins["alone, wins taken"], wins["alone, threats blocked"] = took, blocked
    return wins


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--games", type=int, default=100)
    parser.add_argument("--depths", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--alone-depth", type=int, default=2,
                        help="depth of the alpha-beta player the network alone meets; 0 = none")
    parser.add_argument("--tactics-games", type=int, default=200,
                        help="games whose positions test the network's one-move tactics; 0 = none")
    parser.add_argument("--curve-every", type=int, default=20000,
                        help="env steps between tactics measurements while training; 0 = none")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--save", help="write the trained agent's checkpoint here")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    print(f"{cpu_name()}, {args.minutes:g} min a seed", flush=True)
    results = [run_seed(seed, args) for seed in args.seeds]
    print()
    for name in results[0]:
        print(spread(name, [100 * r[name] for r in results], "{:.0f}%"))


if __name__ == "__main__":
    main()
