"""2048: slide the tiles of a 4x4 board; equal tiles merge; a new 2 (90%) or 4 spawns after each
move in a random empty cell.

Single player. Actions: 0 up, 1 right, 2 down, 3 left; a move that changes nothing is illegal
(masked in ``info["action_mask"]``, and raises ``IllegalMoveError`` if taken). The reward is the
sum of the tiles made by merges in the move, as in the original game's score. The game ends when
no move is legal. The observation is one-hot over tile exponents, [16, 4, 4] bool: plane 0
marks empty cells, plane k a tile of 2**k. ``get_state``/``set_state`` copy and restore the
board (the spawn after a move is drawn from the env's own random generator).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from gymnasium import spaces

from muzero_gym.envs.board import IllegalMoveError, TextGameEnv

ACTION_NAMES = ("up", "right", "down", "left")
NUM_PLANES = 16  # exponents 0 (empty) .. 15 (32768); larger tiles share the last plane


@dataclass
class State2048:
    """Board of tile exponents (0 = empty), score so far, and whether the game is over."""

    board: np.ndarray
    score: float = 0.0
    done: bool = False

    def copy(self) -> State2048:
        return State2048(self.board.copy(), self.score, self.done)


def slide_row_left(row: np.ndarray) -> tuple[np.ndarray, float]:
    """One row of exponents slid left with merges; returns the new row and the merged value."""
    tiles = [int(v) for v in row if v != 0]
    out: list[int] = []
    gained = 0.0
    i = 0
    while i < len(tiles):
        if i + 1 < len(tiles) and tiles[i] == tiles[i + 1]:
            out.append(tiles[i] + 1)
            gained += 2.0 ** (tiles[i] + 1)
            i += 2
        else:
            out.append(tiles[i])
            i += 1
    return np.array(out + [0] * (len(row) - len(out)), dtype=row.dtype), gained


@functools.cache
def _row_tables() -> tuple[np.ndarray, np.ndarray]:
    """Every 4-cell row of exponents 0..15 slid left: results [65536, 4] and gains [65536],
    indexed by ``sum(e_i * 16**i)``; built once (about 0.3 s) so a move is four lookups."""
    keys = np.arange(16 ** 4)
    rows = (keys[:, None] >> (4 * np.arange(4))) & 15
    results = np.empty((16 ** 4, 4), dtype=np.int8)
    gains = np.empty(16 ** 4)
    for key in range(16 ** 4):
        results[key], gains[key] = slide_row_left(rows[key].astype(np.int8))
    return results, gains


_SHIFTS = 4 * np.arange(4)


@functools.cache
def _line_indices(size: int) -> np.ndarray:
    """[4 directions, size lines, size cells]: flat board indices of each line, ordered so that
    the move pushes tiles towards cell 0 of the line."""
    grid = np.arange(size * size).reshape(size, size)
    return np.stack([grid.T, grid[:, ::-1], grid[::-1].T, grid])  # up, right, down, left


def all_slides(board: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The board slid in each of the 4 directions [4, size, size] and the rewards [4]."""
    size = board.shape[0]
    lines = _line_indices(size)
    flat = board.reshape(-1)
    cells = flat[lines]  # [4, size, size]
    out = np.empty((4, size * size), dtype=board.dtype)
    if size == 4 and board.max() < 15:
        results, gains = _row_tables()
        keys = (cells.astype(np.int64) << _SHIFTS).sum(axis=2)
        np.put_along_axis(out, lines.reshape(4, -1), results[keys].reshape(4, -1), axis=1)
        rewards = gains[keys].sum(axis=1)
    else:
        rewards = np.zeros(4)
        for d in range(4):
            for line, idx in zip(cells[d], lines[d]):
                out[d, idx], gained = slide_row_left(line)
                rewards[d] += gained
    return out.reshape(4, size, size), rewards


def slide(board: np.ndarray, action: int) -> tuple[np.ndarray, float]:
    """The board after sliding in direction ``action`` (before the spawn) and the reward."""
    boards, rewards = all_slides(board)
    return boards[action], float(rewards[action])


class Game2048Env(TextGameEnv):
    """``muzero_gym/2048-v0`` (see module doc)."""

    def __init__(self, size: int = 4, render_mode: str | None = None):
        if size < 2:
            raise ValueError(f"size = {size}: the board needs at least 2x2 cells")
        super().__init__(render_mode)
        self.size = size
        self.observation_space = spaces.Box(0, 1, (NUM_PLANES, size, size), dtype=np.bool_)
        self.action_space = spaces.Discrete(4)
        self.state = State2048(np.zeros((size, size), dtype=np.int8))

    # ---- rules ---------------------------------------------------------------------------------

    def legal_mask(self, state: State2048) -> np.ndarray:
        if state.done:
            return np.zeros(4, dtype=np.bool_)
        boards, _ = all_slides(state.board)
        return (boards != state.board).any(axis=(1, 2))

    def spawn(self, board: np.ndarray) -> None:
        """Puts a 2 (probability 0.9) or a 4 in a random empty cell, in place."""
        empty = np.argwhere(board == 0)
        if len(empty):
            row, col = empty[self.np_random.integers(len(empty))]
            board[row, col] = 1 if self.np_random.random() < 0.9 else 2

    def play(self, state: State2048, action: int) -> tuple[State2048, float]:
        """The state after ``action`` and its spawn, and the reward; ``state`` is unchanged."""
        if state.done:
            raise IllegalMoveError("the game is over; call reset()")
        if not 0 <= int(action) < 4:
            raise IllegalMoveError(f"illegal move {action!r}: actions are 0-3 "
                                   f"({', '.join(ACTION_NAMES)})")
        board, reward = slide(state.board, int(action))
        if np.array_equal(board, state.board):
            legal = [ACTION_NAMES[a] for a in np.flatnonzero(self.legal_mask(state))]
            raise IllegalMoveError(f"illegal move {ACTION_NAMES[action]}: nothing moves; legal "
                                   f"moves are {legal}")
        self.spawn(board)
        new = State2048(board, state.score + reward)
        new.done = not self.legal_mask(new).any()
        return new, reward

    def observe(self, state: State2048) -> np.ndarray:
        planes = np.minimum(state.board, NUM_PLANES - 1)
        obs = np.zeros((NUM_PLANES, self.size, self.size), dtype=np.bool_)
        rows, cols = np.indices(planes.shape)
        obs[planes, rows, cols] = True
        return obs

    def max_tile(self, state: State2048 | None = None) -> int:
        state = self.state if state is None else state
        return int(2 ** int(state.board.max())) if state.board.max() > 0 else 0

    # ---- Gymnasium API -------------------------------------------------------------------------

    def _info(self) -> dict:
        mask = self.legal_mask(self.state)
        if self.state.done:
            mask = np.ones(4, dtype=np.bool_)  # nothing is legal; keep the search's root defined
        return {"action_mask": mask, "to_play": 0, "score": self.state.score,
                "max_tile": self.max_tile()}

    def initial_state(self) -> State2048:
        """An empty board with two spawned tiles (drawn from ``np_random``)."""
        board = np.zeros((self.size, self.size), dtype=np.int8)
        self.spawn(board)
        self.spawn(board)
        return State2048(board)

    def board_text(self, state: State2048) -> str:
        cells = [[str(2 ** int(v)) if v else "." for v in row] for row in state.board]
        width = max(len(c) for row in cells for c in row)
        lines = [" ".join(c.rjust(width) for c in row) for row in cells]
        lines.append(f"score {state.score:.0f}" + ("  game over" if state.done else ""))
        return "\n".join(lines)
