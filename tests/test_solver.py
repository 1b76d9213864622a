"""MCTS-solver: proven wins, losses and draws in the batched search (``search.solver``)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.config import ConfigError, load_config
from muzero_gym.envs.opponents import MinimaxOpponent
from muzero_gym.mcts import BatchedMCTS, SearchSettings

NUM_ACTIONS = 3


class PathGame:
    """A fake two-player model for the search: node outcomes depend on the path from the root.
    ``outcome(path)`` returns (reward for the mover, terminal, value for the next player)."""

    def __init__(self, batch, num_simulations, outcome):
        self.paths = [[()] + [None] * num_simulations for _ in range(batch)]
        self.outcome = outcome
        self.root_moves = []  # the root move each simulation went through, per row

    def recurrent_fn(self, parent, action, node):
        batch = len(self.paths)
        reward, value = np.zeros(batch), np.zeros(batch)
        terminal = np.zeros(batch, dtype=np.bool_)
        for b in range(batch):
            parent_path = self.paths[b][parent[b]]
            path = parent_path + (int(action[b]),)
            self.paths[b][node] = path
            if parent_path and self.outcome(parent_path)[1]:  # below a final state: absorbing
                terminal[b] = True
                continue
            reward[b], terminal[b], value[b] = self.outcome(path)
        self.root_moves.append([self.paths[b][node][0] for b in range(batch)])
        return (reward, value, np.zeros((batch, NUM_ACTIONS)),
                np.ones((batch, NUM_ACTIONS), dtype=np.bool_), terminal)


def run(outcome, root_logits, solver, num_simulations=60):
    search = BatchedMCTS(SearchSettings(num_simulations=num_simulations, num_players=2,
                                        discount=1.0, known_bounds=(-1.0, 1.0),
                                        exploration_constant=0.0, solver=solver), NUM_ACTIONS)
    game = PathGame(1, num_simulations, outcome)
    result = search.run(np.zeros(1), np.array([root_logits], dtype=np.float64),
                        game.recurrent_fn, add_noise=False)
    return result, np.array(game.root_moves)[:, 0], game.paths[0][1:]


def immediate_win_at_0(path):
    """Root move 0 wins at once; the other moves look good for the root player (+0.5)."""
    if path == (0,):
        return 1.0, True, 0.0
    return 0.0, False, -0.5 if len(path) == 1 else 0.0


def test_a_proven_win_takes_every_later_simulation_and_the_whole_policy():
    result, root_moves, _ = run(immediate_win_at_0, [-2.0, 0.0, 0.0], solver=True)
    first = int(np.flatnonzero(root_moves == 0)[0])
    assert (root_moves[first:] == 0).all()
    assert result.proven_qvalues[0, 0] == 1.0
    np.testing.assert_array_equal(result.search_policy[0], [1.0, 0.0, 0.0])
    assert result.greedy_actions()[0] == 0
    # Without the solver the other moves keep being visited after the win is found.
    plain, plain_moves, _ = run(immediate_win_at_0, [-2.0, 0.0, 0.0], solver=False)
    first = int(np.flatnonzero(plain_moves == 0)[0])
    assert (plain_moves[first:] != 0).any()
    assert plain.proven_qvalues is None and plain.action_weights is None
    assert plain.search_policy[0, 0] < 1.0


def reply_0_wins_after_move_0(path):
    """Root move 0 (the favourite of the prior) lets the opponent win with reply 0."""
    if path == (0, 0):
        return 1.0, True, 0.0
    return 0.0, False, 0.0


def test_a_move_proven_lost_is_no_longer_searched_nor_played():
    result, root_moves, paths = run(reply_0_wins_after_move_0, [3.0, 0.0, 0.0], solver=True)
    assert result.proven_qvalues[0, 0] == -1.0
    assert result.visit_counts[0, 0] > 0
    assert result.action_weights[0, 0] == 0.0 and result.search_policy[0, 0] == 0.0
    assert result.greedy_actions()[0] != 0
    np.testing.assert_allclose(result.search_policy[0].sum(), 1.0)
    # Once the winning reply is expanded, move 0 is never entered again.
    proven_at = paths.index((0, 0))
    assert (root_moves[:proven_at] == 0).sum() >= 2
    assert (root_moves[proven_at + 1:] != 0).all()


def test_every_visited_move_lost_falls_back_on_the_open_moves():
    # Two simulations: the favourite, then the opponent's winning reply under it (ties go to
    # the largest action); no other root move was visited, so an open one is chosen.
    def lost_at_once(path):
        return (1.0, True, 0.0) if path == (0, 2) else (0.0, False, 0.0)
    result, _, _ = run(lost_at_once, [5.0, 0.0, 0.0], solver=True, num_simulations=2)
    assert result.proven_qvalues[0, 0] == -1.0
    assert result.greedy_actions()[0] in (1, 2)
    assert result.search_policy[0, 0] == 0.0


def test_solver_needs_to_be_told_which_nodes_are_final():
    search = BatchedMCTS(SearchSettings(num_simulations=4, num_players=2, solver=True), 2)

    def no_terminal_flags(parent, action, node):
        return np.zeros(1), np.zeros(1), np.zeros((1, 2)), np.ones((1, 2), dtype=np.bool_)

    with pytest.raises(ValueError, match="final states"):
        search.run(np.zeros(1), np.zeros((1, 2)), no_terminal_flags)


def test_final_state_flags_of_the_wrong_shape_are_an_error():
    search = BatchedMCTS(SearchSettings(num_simulations=4, num_players=2, solver=True), 2)

    def two_flags_for_one_row(parent, action, node):
        return (np.zeros(1), np.zeros(1), np.zeros((1, 2)), np.ones((1, 2), dtype=np.bool_),
                np.zeros(2, dtype=np.bool_))

    with pytest.raises(ValueError, match=r"final states of shape \(2,\)"):
        search.run(np.zeros(1), np.zeros((1, 2)), two_flags_for_one_row)


def test_solver_config_needs_the_simulator_and_puct():
    with pytest.raises(ConfigError, match="simulator"):
        load_config("cartpole", ["search.solver=true"])
    with pytest.raises(ConfigError, match="puct"):
        load_config("tictactoe", ["search.solver=true", "search.root_selection=gumbel"])


def test_solver_proves_tictactoe_endgames_as_minimax_does():
    """From random TicTacToe positions with five empty cells, the search (untrained network,
    true simulator) proves the value of each root move it proves exactly as exhaustive minimax
    does, proves the root and plays a minimax-best move."""
    agent = MuZeroAgent(load_config("tictactoe", ["env.num_envs=2", "search.solver=true",
                                                  "search.num_simulations=400"]))
    with torch.no_grad():
        for p in agent.network.parameters():
            p.zero_()
    agent.sync_selfplay_weights()
    env = gym.make("muzero_gym/TicTacToe-v0").unwrapped
    minimax = MinimaxOpponent()
    rng = np.random.default_rng(3)
    images, masks, to_play, states, exact = [], [], [], [], []
    while len(states) < 12:
        obs, info = env.reset()
        done = False
        for _ in range(4):
            obs, _, done, _, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
            if done:
                break
        if done:
            continue
        game = agent.new_game()
        game.start(obs, info)
        images.append(game.make_image())
        masks.append(info["action_mask"])
        to_play.append(info["to_play"])
        states.append(env.get_state())
        exact.append(minimax.move_values(env))
    result = agent.search_positions(np.stack(images), np.stack(masks), np.array(to_play), states)
    proven_moves = 0
    for row, values in enumerate(exact):
        proven = result.proven_qvalues[row]
        best = max(values.values())
        for move, value in values.items():
            if not np.isnan(proven[move]):
                assert proven[move] == np.sign(round(value, 2)), (row, move)
                proven_moves += 1
        assert np.nanmax(proven) == np.sign(round(best, 2)), row  # the root is proven
        assert values[int(result.greedy_actions()[row])] >= best - 1e-9, row
    assert proven_moves > len(exact)  # more than the best move alone, somewhere
