"""A value for drawn games at play (``search.eval_draw_value``, an engine's contempt)."""

from __future__ import annotations

import numpy as np
import pytest
from test_solver import NUM_ACTIONS, PathGame

from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.config import ConfigError, load_config
from muzero_gym.mcts import BatchedMCTS, SearchSettings


def search(outcome, draw_value, root_to_play=0, num_simulations=120):
    settings = SearchSettings(num_simulations=num_simulations, num_players=2, discount=1.0,
                              known_bounds=(-1.0, 1.0), exploration_constant=0.0,
                              draw_value=draw_value)
    game = PathGame(1, num_simulations, outcome)
    result = BatchedMCTS(settings, NUM_ACTIONS).run(
        np.zeros(1), np.zeros((1, NUM_ACTIONS)), game.recurrent_fn,
        root_to_play=np.array([root_to_play]), add_noise=False)
    return result


def draw_or_play_on(path):
    """Root move 0 draws at once; move 1 plays on to a position worth -0.2 to the root's
    player, move 2 to one worth -0.8 (values below are for the opponent, to move there)."""
    if path == (0,):
        return 0.0, True, 0.0
    return 0.0, False, {(1,): 0.2, (2,): 0.8}.get(path[:1], 0.0) if len(path) == 1 else 0.0


@pytest.mark.parametrize("root_to_play", [0, 1])
def test_a_draw_worth_less_than_playing_on_is_avoided_by_either_player(root_to_play):
    plain = search(draw_or_play_on, 0.0, root_to_play)
    assert plain.greedy_actions()[0] == 0 and plain.qvalues[0, 0] == 0.0
    contempt = search(draw_or_play_on, -0.5, root_to_play)
    assert contempt.greedy_actions()[0] == 1
    # The drawn node and every node below it (a final state absorbs) are worth -0.5 to the
    # root's player: the move's Q is exactly the draw value, however often it was visited.
    assert contempt.visit_counts[0, 0] > 1
    assert contempt.qvalues[0, 0] == -0.5


def win_or_draw(path):
    """Root move 0 wins at once, move 1 draws at once, move 2 plays on (worth 0)."""
    if len(path) == 1 and path[0] < 2:
        return 1.0 - path[0], True, 0.0
    return 0.0, False, 0.0


def test_a_decided_game_keeps_its_value_and_a_draw_value_can_be_positive():
    result = search(win_or_draw, 0.25)
    assert result.visit_counts[0, 0] > 1 and result.visit_counts[0, 1] >= 1
    assert result.qvalues[0, 0] == 1.0  # the nodes below a win are not draws
    assert result.qvalues[0, 1] == 0.25


def draws_after_any_reply(path):
    """After root move 0 every reply of the opponent draws; the other moves play on (0)."""
    return (0.0, True, 0.0) if len(path) == 2 and path[0] == 0 else (0.0, False, 0.0)


def test_a_draw_the_opponent_moves_into_is_worth_the_draw_value_to_the_root_player():
    result = search(draws_after_any_reply, -0.5, num_simulations=200)
    assert result.qvalues[0, 0] < -0.4 and result.greedy_actions()[0] != 0


def test_the_draw_value_is_for_play_only_and_checked():
    agent = MuZeroAgent(load_config("tictactoe", ["search.eval_draw_value=-0.3"]))
    assert agent.acting_search.settings.draw_value == -0.3
    assert agent.search.settings.draw_value == 0.0  # self-play's draws stay worth 0
    with pytest.raises(ConfigError, match="simulator"):
        load_config("tictactoe", ["search.eval_draw_value=-0.3", "search.simulator=false"])
    with pytest.raises(ConfigError, match=r"\[-1, 1\]"):
        load_config("tictactoe", ["search.eval_draw_value=-2"])
    with pytest.raises(ConfigError, match="two-player"):
        load_config("tictactoe", ["search.eval_draw_value=-0.3", "env.num_players=1"])
    with pytest.raises(ValueError, match="true simulator"):
        BatchedMCTS(SearchSettings(num_players=2, num_simulations=2, draw_value=-0.5), 2).run(
            np.zeros(1), np.zeros((1, 2)),
            lambda parent, action, node: (np.zeros(1), np.zeros(1), np.zeros((1, 2))))
