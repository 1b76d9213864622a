"""The board games and 2048 in muzero_gym.envs: scripted games move by move, check_env, the
two-player contract, and the evaluation opponents."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import muzero_gym.envs  # noqa: F401  (registers the envs)
from muzero_gym.envs import ENV_IDS, IllegalMoveError
from muzero_gym.envs.board import BoardState, import_rules_library
from muzero_gym.envs.game2048 import State2048, slide, slide_row_left, spawn_tiles
from muzero_gym.envs.opponents import AlphaBetaOpponent, MinimaxOpponent, RandomOpponent
from muzero_gym.game import ObservationEncoder


def play(env, moves):
    """Steps ``moves``; returns the last step's outputs."""
    out = None
    for move in moves:
        out = env.step(move)
    return out


# The envs whose rules come from an optional extra: skipped where it is not installed.
RULES_LIBRARIES = {"muzero_gym/Chess-v0": "chess", "muzero_gym/Shogi-v0": "cshogi"}


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_every_env_passes_gymnasiums_checker_and_renders_text(env_id):
    if env_id in RULES_LIBRARIES:
        pytest.importorskip(RULES_LIBRARIES[env_id], reason="its rules library (an optional "
                            "extra) is not installed")
    env = gym.make(env_id, render_mode="ansi")
    check_env(env.unwrapped)
    _, info = env.reset(seed=3)
    assert isinstance(env.render(), str)
    assert info["action_mask"].dtype == np.bool_ and info["to_play"] == 0


def test_a_missing_rules_library_names_the_extra_to_install():
    with pytest.raises(ModuleNotFoundError, match=r"muzero_gym/Chess-v0 needs it: pip install "
                       r"'muzero-gym\[chess\]'") as raised:
        import_rules_library("no_such_rules_library", "muzero_gym/Chess-v0", "chess")
    assert raised.value.name == "no_such_rules_library"


@pytest.mark.parametrize("moves,winner", [
    ([0, 3, 1, 4, 2], 0),        # top row
    ([0, 1, 3, 2, 6], 0),        # left column
    ([0, 1, 4, 2, 8], 0),        # diagonal
    ([0, 2, 1, 4, 3, 6], 1),     # anti-diagonal by O
    ([3, 0, 4, 1, 8, 2], 1),     # top row by O
])
def test_tictactoe_wins_in_every_direction(moves, winner):
    env = gym.make("muzero_gym/TicTacToe-v0").unwrapped
    env.reset()
    for move in moves[:-1]:
        _, reward, terminated, _, info = env.step(move)
        assert reward == 0 and not terminated
    obs, reward, terminated, truncated, info = env.step(moves[-1])
    assert reward == 1.0 and terminated and not truncated and info["winner"] == winner


def test_tictactoe_draw_and_perspective_and_masks():
    env = gym.make("muzero_gym/TicTacToe-v0").unwrapped
    obs, info = env.reset()
    obs, _, _, _, info = env.step(4)
    # O to move: plane 0 holds O's stones (none), plane 1 X's centre, plane 2 = 0 (second player)
    assert info["to_play"] == 1 and obs[1, 1, 1] == 1 and obs[0].sum() == 0 and obs[2].max() == 0
    assert not info["action_mask"][4] and info["action_mask"].sum() == 8
    _, reward, terminated, _, info = play(env, [0, 2, 6, 3, 5, 1, 7, 8])
    assert terminated and reward == 0 and info["winner"] == -1
    assert "draw" in env.board_text(env.state)


@pytest.mark.parametrize("env_id", ["muzero_gym/TicTacToe-v0", "muzero_gym/ConnectFour-v0",
                                    "muzero_gym/2048-v0", "muzero_gym/Go-v0"])
def test_zero_one_planes_are_bool_so_games_and_replay_hold_them_as_bytes(env_id):
    env = gym.make(env_id).unwrapped
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(int(np.flatnonzero(env.legal_mask(env.state))[0]))
    assert env.observation_space.dtype == np.bool_ and obs.dtype == np.bool_ and obs.any()
    encoder = ObservationEncoder(env.observation_space)
    held = encoder.encode(obs)
    assert encoder.dtype == held.dtype == np.uint8 and encoder.input_dtype == np.float32
    np.testing.assert_array_equal(held, obs.astype(np.uint8))


def test_illegal_moves_raise_and_leave_the_board_unchanged():
    env = gym.make("muzero_gym/TicTacToe-v0")
    env.reset()
    env.step(4)
    before = env.unwrapped.get_state()
    with pytest.raises(IllegalMoveError, match="illegal move 4"):
        env.step(4)
    with pytest.raises(IllegalMoveError):
        env.step(9)
    after = env.unwrapped.get_state()
    assert np.array_equal(before.board, after.board) and before.to_play == after.to_play


def _brute_force_winner(board, connect):
    """The player (0 or 1) with ``connect`` stones in a line, found cell by cell; else None."""
    rows, cols = board.shape
    for r in range(rows):
        for c in range(cols):
            stone = board[r, c]
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                cells = [(r + k * dr, c + k * dc) for k in range(connect)]
                if stone and all(0 <= rr < rows and 0 <= cc < cols and board[rr, cc] == stone
                                 for rr, cc in cells):
                    return int(stone) - 1
    return None


@pytest.mark.parametrize("env_id", ["muzero_gym/TicTacToe-v0", "muzero_gym/ConnectFour-v0"])
def test_batched_rules_agree_with_a_brute_force_referee_in_random_games(env_id):
    """``simulate`` plays every legal move of many random positions in one call; each result is
    checked against a cell-by-cell referee and against playing the move alone."""
    env = gym.make(env_id).unwrapped
    rng = np.random.default_rng(0)
    states, actions = [], []
    for _ in range(30):
        env.reset()
        done = False
        while not done:
            state = env.get_state()
            legal = np.flatnonzero(env.legal_mask(state))
            states += [state] * len(legal)
            actions += legal.tolist()
            done = env.step(int(rng.choice(legal)))[2]
    boards_before = [s.board.copy() for s in states]
    new, observations, rewards, done, masks = env.simulate(states, np.array(actions))
    assert len(new) == len(states) > 500 and rewards.any()
    assert observations.shape == (len(states), 3, env.rows, env.cols)
    for i, (state, action) in enumerate(zip(states, actions)):
        assert np.array_equal(state.board, boards_before[i])  # the inputs are not changed
        placed = np.argwhere(new[i].board != state.board)
        assert len(placed) == 1 and new[i].board[tuple(placed[0])] == state.to_play + 1
        if env_id.endswith("ConnectFour-v0"):
            row, col = placed[0]
            assert col == action and (row == env.rows - 1 or state.board[row + 1, col] != 0)
        winner = _brute_force_winner(new[i].board, env.connect)
        full = (new[i].board != 0).all()
        assert new[i].winner == winner and bool(done[i]) == (winner is not None or full)
        assert rewards[i] == (1.0 if winner is not None else 0.0)
        assert new[i].to_play == 1 - state.to_play
        assert np.array_equal(masks[i], env.legal_mask(new[i]))
        assert np.array_equal(observations[i], env.observe(new[i]))
        env.set_state(state)
        obs, reward, terminated, _, _ = env.step(action)
        assert np.array_equal(obs, observations[i]) and reward == rewards[i]
        assert terminated == done[i]



def _board(rows: list[str]) -> np.ndarray:
    """A board from text: X the first player's stones, O the second's, . empty."""
    return np.array([[".XO".index(c) for c in row] for row in rows], dtype=np.int8)


C4_THREE_IN_THE_BOTTOM_ROW = _board([".......", ".......", ".......", ".......",
                                     "..OO...", ".XXX..."])


@pytest.mark.parametrize("env_id, board, to_play, value", [
    # Tic-tac-toe: X completes the top row
    ("muzero_gym/TicTacToe-v0", _board(["XX.", "O..", "O.."]), 0, 1.0),
    # O to move has no line to complete, and X only one threat to block
    ("muzero_gym/TicTacToe-v0", _board(["XX.", "O..", "O.."]), 1, np.nan),
    # Connect Four: X to move completes the bottom row at either end
    ("muzero_gym/ConnectFour-v0", C4_THREE_IN_THE_BOTTOM_ROW, 0, 1.0),
    # O to move cannot block both ends: lost
    ("muzero_gym/ConnectFour-v0", C4_THREE_IN_THE_BOTTOM_ROW, 1, -1.0),
    # X has no line to complete; O's three in row 4 waits for cells not playable yet
    ("muzero_gym/ConnectFour-v0", _board([".......", ".......", ".......", ".......",
                                          ".OOO...", ".XXO.XX"]), 0, np.nan),
    ("muzero_gym/ConnectFour-v0", np.zeros((6, 7), dtype=np.int8), 0, np.nan),
    # O to move must block X's bottom row in column 3, which opens X's row above it: lost
    ("muzero_gym/ConnectFour-v0", _board([".......", ".......", ".......", "OOO....",
                                          "XXX....", "XXX..OO"]), 1, -1.0),
])
def test_board_games_prove_a_win_in_one_and_a_double_threat(env_id, board, to_play, value):
    env = gym.make(env_id).unwrapped
    proven = env.proven_values([BoardState(board, to_play),
                                BoardState(board, to_play, winner=0, done=True)])
    np.testing.assert_array_equal(proven, [value, np.nan])


@pytest.mark.parametrize("env_id", ["muzero_gym/TicTacToe-v0", "muzero_gym/ConnectFour-v0"])
def test_proven_values_agree_with_playing_every_move_in_random_games(env_id):
    """+1 exactly where some legal move wins; -1 exactly where none does and, were the
    opponent to move, two or more of theirs would, or one would and playing it leaves the
    opponent a winning move."""
    env = gym.make(env_id).unwrapped
    rng = np.random.default_rng(1)

    def children(state):
        legal = np.flatnonzero(env.legal_mask(state))
        return env.simulate([state] * len(legal), legal, observe=False)

    def wins(state):
        return int(children(state)[2].sum())

    counts = {1.0: 0, -1.0: 0, "stacked": 0}
    for _ in range(15):
        env.reset()
        done = False
        while not done:
            state = env.get_state()
            value = env.proven_values([state])[0]
            mine = wins(state)
            theirs = wins(BoardState(state.board.copy(), 1 - state.to_play))
            stacked = theirs == 1 and all(not child.done and wins(child)
                                          for child in children(state)[0])
            expected = 1.0 if mine else -1.0 if theirs >= 2 or stacked else np.nan
            np.testing.assert_array_equal(value, expected)
            counts[value] = counts.get(value, 0) + 1
            counts["stacked"] += stacked and not mine
            done = env.step(int(rng.choice(np.flatnonzero(env.legal_mask(state)))))[2]
    assert counts[1.0] > 10 and counts[-1.0] > 2
    # a block in tic-tac-toe opens no cell; in Connect Four it opens the one above
    assert (counts["stacked"] > 0) == env_id.endswith("ConnectFour-v0")

def test_batched_rules_refuse_an_illegal_move_anywhere_in_the_batch():
    env = gym.make("muzero_gym/ConnectFour-v0").unwrapped
    env.reset()
    start = env.get_state()
    full_column = env.play(start, 3)[0]
    for _ in range(5):
        full_column = env.play(full_column, 3)[0]
    with pytest.raises(IllegalMoveError, match="illegal move 3"):
        env.simulate([start, full_column], np.array([3, 3]))
    with pytest.raises(IllegalMoveError, match="illegal move 7"):
        env.simulate([start], np.array([7]))
    with pytest.raises(ValueError, match="2 actions for 1 states"):
        env.simulate([start], np.array([0, 1]))
    assert (start.board == 0).all() and (full_column.board[:, 3] != 0).all()


@pytest.mark.parametrize("moves", [
    [0, 0, 1, 1, 2, 2, 3],                       # horizontal, bottom row
    [0, 1, 0, 1, 0, 1, 0],                       # vertical
    [0, 1, 1, 2, 2, 3, 2, 3, 3, 6, 3],           # rising diagonal
    [6, 5, 5, 4, 4, 3, 4, 3, 3, 0, 3],           # falling diagonal
])
def test_connect_four_wins_in_every_direction(moves):
    env = gym.make("muzero_gym/ConnectFour-v0").unwrapped
    env.reset()
    for move in moves[:-1]:
        assert not env.step(move)[2]
    _, reward, terminated, _, info = env.step(moves[-1])
    assert reward == 1 and terminated and info["winner"] == 0


def test_connect_four_full_column_is_illegal_and_board_size_option():
    env = gym.make("muzero_gym/ConnectFour-v0").unwrapped
    env.reset()
    _, _, _, _, info = play(env, [3] * 6)
    assert not info["action_mask"][3] and info["action_mask"].sum() == 6
    with pytest.raises(IllegalMoveError, match="illegal move 3"):
        env.step(3)
    big = gym.make("muzero_gym/ConnectFour-v0", rows=7, cols=7)
    obs, info = big.reset()
    assert obs.shape == (3, 7, 7) and big.action_space.n == 7


def test_connect_four_draw_on_a_full_board():
    env = gym.make("muzero_gym/ConnectFour-v0", rows=4, cols=4).unwrapped
    env.reset()
    # No four in a row anywhere once the last cell (top-left) is filled.
    board = np.array([[0, 1, 2, 2], [2, 2, 1, 1], [1, 1, 2, 2], [2, 2, 1, 1]], dtype=np.int8)
    env.set_state(BoardState(board, to_play=0))
    _, reward, terminated, _, info = env.step(0)
    assert terminated and reward == 0 and info["winner"] == -1


def test_2048_slides_merge_once_per_tile():
    row = lambda *e: np.array(e, dtype=np.int8)  # noqa: E731
    assert slide_row_left(row(1, 1, 1, 1))[0].tolist() == [2, 2, 0, 0]
    assert slide_row_left(row(1, 1, 1, 1))[1] == 8.0
    assert slide_row_left(row(0, 1, 0, 1))[0].tolist() == [2, 0, 0, 0]
    assert slide_row_left(row(2, 1, 1, 0))[0].tolist() == [2, 2, 0, 0]
    assert slide_row_left(row(1, 2, 3, 4))[1] == 0.0
    board = np.array([[1, 0, 0, 1], [0, 0, 0, 0], [2, 0, 0, 0], [2, 0, 0, 3]], dtype=np.int8)
    up, reward = slide(board, 0)
    assert up[:, 0].tolist() == [1, 3, 0, 0] and reward == 8.0
    right, reward = slide(board, 1)
    assert right[0].tolist() == [0, 0, 0, 2] and right[3].tolist() == [0, 0, 2, 3] and reward == 4
    down, _ = slide(board, 2)
    assert down[:, 0].tolist() == [0, 0, 1, 3]
    left, _ = slide(board, 3)
    assert left[0].tolist() == [2, 0, 0, 0]


def test_2048_step_reward_spawn_masks_and_game_over():
    env = gym.make("muzero_gym/2048-v0").unwrapped
    env.reset(seed=0)
    env.set_state(State2048(np.array([[1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]],
                                     dtype=np.int8)))
    obs, reward, terminated, _, info = env.step(3)  # left: 2 + 2 -> 4
    assert reward == 4.0 and not terminated and info["score"] == 4.0
    board = env.state.board
    assert board[0, 0] == 2 and (board > 0).sum() == 2  # the merged tile plus one spawn
    assert obs.shape == (16, 4, 4) and obs.sum() == 16 and obs[2, 0, 0] == 1
    with pytest.raises(IllegalMoveError, match="nothing moves"):
        env.set_state(State2048(np.array([[1, 2, 0, 0]] + [[0] * 4] * 3, dtype=np.int8)))
        env.step(3)
    nearly_stuck = np.array([[0, 4, 3, 4], [5, 6, 5, 6], [6, 5, 6, 5], [5, 6, 5, 6]],
                            dtype=np.int8)
    env.set_state(State2048(nearly_stuck))
    assert env.legal_mask(env.state).tolist() == [True, False, False, True]
    _, _, terminated, _, info = env.step(3)  # left; a 2 or 4 spawns top right: no move is left
    assert terminated and env.legal_mask(env.state).sum() == 0


def test_2048_spawns_are_reproducible_with_a_seed():
    a, b = gym.make("muzero_gym/2048-v0"), gym.make("muzero_gym/2048-v0")
    obs_a, _ = a.reset(seed=7)
    obs_b, _ = b.reset(seed=7)
    for action in [0, 1, 2, 3, 0, 1]:
        if a.unwrapped.legal_mask(a.unwrapped.state)[action]:
            obs_a = a.step(action)[0]
            obs_b = b.step(action)[0]
    assert np.array_equal(obs_a, obs_b)


def _random_2048_positions(env, games: int, rng: np.random.Generator) -> list[State2048]:
    """Every position of ``games`` games of random legal moves, the final ones left out."""
    states = []
    for _ in range(games):
        env.reset(seed=int(rng.integers(1 << 30)))
        while not env.state.done:
            states.append(env.get_state())
            env.step(int(rng.choice(np.flatnonzero(env.legal_mask(env.state)))))
    return states


def test_2048_batched_rules_agree_with_moves_played_one_by_one():
    """``simulate`` plays every legal move of many random positions in one call: each new board
    is the slid board plus one spawned 2 or 4 in one of its empty cells, with the reward, the
    legal moves, the end and the observation of that board, and the inputs are unchanged."""
    env = gym.make("muzero_gym/2048-v0").unwrapped
    rng = np.random.default_rng(0)
    positions = _random_2048_positions(env, 3, rng)
    states = [s for s in positions for a in np.flatnonzero(env.legal_mask(s))]
    actions = np.array([a for s in positions for a in np.flatnonzero(env.legal_mask(s))])
    before = [s.board.copy() for s in states]
    new, observations, rewards, done, masks = env.simulate(states, actions)
    assert len(new) == len(states) > 300 and done.any() and rewards.any()
    assert observations.shape == (len(states), 16, 4, 4)
    for i, (state, action) in enumerate(zip(states, actions)):
        assert np.array_equal(state.board, before[i])
        slid, reward = slide(state.board, int(action))
        added = np.argwhere(new[i].board != slid)
        assert len(added) == 1 and slid[tuple(added[0])] == 0
        assert new[i].board[tuple(added[0])] in (1, 2)
        assert rewards[i] == reward and new[i].score == state.score + reward
        assert np.array_equal(masks[i], env.legal_mask(new[i]))
        assert bool(done[i]) == new[i].done == (not env.legal_mask(State2048(new[i].board)).any())
        assert np.array_equal(observations[i], env.observe(new[i]))
        env.set_state(state)
        obs, step_reward, terminated, _, info = env.step(int(action))
        assert step_reward == reward and info["score"] == state.score + reward
        assert (env.state.board != slid).sum() == 1  # the slide plus one spawn


def test_2048_spawns_are_uniform_over_empty_cells_and_one_in_ten_a_four():
    """30,000 boards with the same three empty cells, spawned in one call: each empty cell gets
    a third of the tiles and a tenth are 4s, within five binomial standard deviations."""
    n = 30_000
    board = np.array([[1, 0, 2, 3], [4, 5, 0, 6], [7, 8, 9, 0], [1, 2, 3, 4]], dtype=np.int8)
    boards = np.repeat(board[None], n, axis=0)
    spawn_tiles(boards, np.random.default_rng(0))
    changed = boards != board
    assert (changed.sum(axis=(1, 2)) == 1).all()
    assert not changed[:, board != 0].any()
    for cell, p in [((0, 1), 1 / 3), ((1, 2), 1 / 3), ((2, 3), 1 / 3)]:
        assert abs(changed[:, cell[0], cell[1]].mean() - p) < 5 * np.sqrt(p * (1 - p) / n)
    fours = (boards[changed] == 2).mean()
    assert abs(fours - 0.1) < 5 * np.sqrt(0.1 * 0.9 / n)
    full = np.repeat(board[None], 2, axis=0)
    full[full == 0] = 1
    spawned = full.copy()
    spawn_tiles(spawned, np.random.default_rng(0))
    assert np.array_equal(spawned, full)  # no empty cell: nothing to do


def test_2048_batched_rules_refuse_illegal_moves_anywhere_in_the_batch():
    env = gym.make("muzero_gym/2048-v0").unwrapped
    env.reset(seed=0)
    start = env.get_state()
    stuck_left = State2048(np.array([[1, 2, 0, 0]] + [[0] * 4] * 3, dtype=np.int8))
    legal = int(np.flatnonzero(env.legal_mask(start))[0])
    with pytest.raises(IllegalMoveError, match="illegal move left: nothing moves"):
        env.simulate([start, stuck_left], np.array([legal, 3]))
    with pytest.raises(IllegalMoveError, match="illegal move 4"):
        env.simulate([start], np.array([4]))
    with pytest.raises(ValueError, match="2 actions for 1 states"):
        env.simulate([start], np.array([0, 1]))
    over = State2048(start.board, done=True)
    with pytest.raises(IllegalMoveError, match="the game is over"):
        env.simulate([over], np.array([legal]))
    assert np.array_equal(stuck_left.board[0], [1, 2, 0, 0])


def _game(env, players):
    _, info = env.reset()
    while True:
        mover = info["to_play"]
        _, reward, done, _, info = env.step(players[mover].choose(env, info["action_mask"]))
        if done:
            return mover if reward > 0 else -1


def test_perfect_player_never_loses_and_draws_itself():
    env = gym.make("muzero_gym/TicTacToe-v0").unwrapped
    perfect = MinimaxOpponent(seed=0)
    env.reset()
    assert set(perfect.move_values(env).values()) == {0.0}  # TicTacToe is a draw
    for seed in range(20):
        assert _game(env, [perfect, RandomOpponent(seed)]) in (0, -1)
        assert _game(env, [RandomOpponent(seed), perfect]) in (1, -1)
    assert _game(env, [perfect, MinimaxOpponent(seed=1)]) == -1


def test_alphabeta_takes_a_win_and_blocks_a_loss():
    env = gym.make("muzero_gym/ConnectFour-v0").unwrapped
    env.reset()
    play(env, [0, 6, 1, 6, 2])  # X threatens 3; O must block
    assert AlphaBetaOpponent(depth=2, seed=0).choose(env, env.legal_mask(env.state)) == 3
    env.reset()
    play(env, [0, 6, 1, 6, 2, 5])  # X to move wins at 3
    assert AlphaBetaOpponent(depth=1, seed=0).choose(env, env.legal_mask(env.state)) == 3
