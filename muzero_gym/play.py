"""Playing a trained agent in the terminal: human vs agent, or agent vs agent (``--watch``).

:func:`play_in_terminal` draws the board (the env's ``ansi`` render) after every move, asks the
human for a move on their turns (an illegal or malformed entry is asked again, ``q`` or end of
input quits) and, on the agent's turns, prints its search two levels deep as the reference's
``print_node`` does before it moves. Works for any env of the agent; two-player games seat the
human first with ``human_first``, single-player games (2048) let the human play every move.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

import numpy as np

from muzero_gym.environment import EnvError, make_env

if TYPE_CHECKING:
    from muzero_gym.agents.muzero import MuZeroAgent

QUIT_WORDS = ("q", "quit", "exit")


def _ask_move(legal: np.ndarray, read: Callable[[str], str], out: TextIO) -> int | None:
    """The human's move, asked until it is a legal action number; None to quit."""
    legal_actions = np.flatnonzero(legal).tolist()
    while True:
        try:
            text = read(f"your move {legal_actions} (q quits): ").strip().lower()
        except EOFError:
            return None
        if text in QUIT_WORDS:
            return None
        try:
            action = int(text)
        except ValueError:
            print(f"'{text}' is not a move: type one of {legal_actions}", file=out)
            continue
        if action not in legal_actions:
            print(f"{action} is not legal here: type one of {legal_actions}", file=out)
            continue
        return action


def play_in_terminal(agent: MuZeroAgent, human_first: bool = True, watch: bool = False,
                     seed: int | None = None, read: Callable[[str], str] = input,
                     out: TextIO | None = None) -> str:
    """Plays one game; returns how it ended ("quit", "draw", "player 0 won", a score, ...)."""
    import sys

    out = out or sys.stdout
    probe = make_env(agent.config.env)
    modes = probe.metadata.get("render_modes", [])
    probe.close()
    if "ansi" not in modes:
        raise EnvError(f"play draws the game as text, but {agent.config.env.id} renders only as "
                       f"{modes}; watch the agent with: muzero-gym eval <run> --render")
    env = make_env(agent.config.env, render_mode="ansi")
    agent.sync_playing_weights()
    two_player = agent.config.env.num_players == 2
    human_seat = 0 if human_first else 1
    try:
        observation, info = env.reset(seed=seed)
        game = agent.new_game()
        game.start(observation, info)
        total_reward, reward, mover = 0.0, 0.0, 0
        while True:
            print(env.render(), file=out)
            if game.done:
                break
            mover = game.to_play()
            human_turn = not watch and (not two_player or mover == human_seat)
            if human_turn:
                action = _ask_move(game.legal_action_mask(), read, out)
                if action is None:
                    print("quit", file=out)
                    return "quit"
            else:
                result = agent.search_games([game], [env])
                print("\n".join(agent.acting_search.describe(0, depth=2)), file=out)
                action = int(result.greedy_actions()[0])
                print(f"agent plays {action}", file=out)
            observation, reward, terminated, truncated, info = env.step(action)
            total_reward += float(reward)
            game.record_step(action, float(reward), observation, terminated, truncated, info)
        if not two_player:
            outcome = f"game over: return {total_reward:g}"
        elif reward == 0:
            outcome = "draw"
        else:
            winner = mover if reward > 0 else 1 - mover
            who = "agent" if watch or winner != human_seat else "you"
            outcome = f"player {winner} ({who}) won"
        print(outcome, file=out)
        return outcome
    finally:
        env.close()
