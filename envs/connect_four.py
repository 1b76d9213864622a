"""Connect Four: stones drop to the lowest free row of a column; four in a row wins.

Standard board is 6 rows x 7 columns; ``rows``/``cols`` change it (the MuZero reference program
plays on 7 x 7). Action ``c`` drops a stone in column ``c``.
"""

from __future__ import annotations

import functools

import numpy as np

from muzero_gym.envs.board import EMPTY, BoardGameEnv, BoardState
from muzero_gym.symmetry import Symmetry

# Value of a window of four that holds k stones of one player and none of the other.
WINDOW_WEIGHTS = np.array([0.0, 0.01, 0.05, 0.25, 0.0])


@functools.cache
def _windows(rows: int, cols: int) -> np.ndarray:
    """[W, 4] flat indices of every horizontal, vertical and diagonal window of four cells."""
    grid = np.arange(rows * cols).reshape(rows, cols)
    windows = []
    for r in range(rows):
        for c in range(cols):
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                cells = [(r + k * dr, c + k * dc) for k in range(4)]
                if all(0 <= rr < rows and 0 <= cc < cols for rr, cc in cells):
                    windows.append([grid[rr, cc] for rr, cc in cells])
    return np.array(windows, dtype=np.int64).reshape(-1, 4)


class ConnectFourEnv(BoardGameEnv):
    """``muzero_gym/ConnectFour-v0``; the contract is in :mod:`muzero_gym.envs.board`."""

    connect = 4

    def __init__(self, rows: int = 6, cols: int = 7, render_mode: str | None = None):
        if rows < 4 and cols < 4:
            raise ValueError(f"a {rows}x{cols} board cannot hold four in a row")
        if rows < 1 or cols < 1:
            raise ValueError(f"rows = {rows}, cols = {cols}: both must be >= 1")
        super().__init__(rows, cols, cols, render_mode)

    def legal_mask(self, state: BoardState) -> np.ndarray:
        if state.done:
            return np.zeros(self.cols, dtype=np.bool_)
        return state.board[0] == EMPTY

    def _place(self, state: BoardState, action: int) -> tuple[int, int]:
        column = state.board[:, action]
        row = int(np.flatnonzero(column == EMPTY)[-1])
        return row, action

    def symmetries(self) -> list[Symmetry]:
        """The left-right mirror: columns reversed, so column c becomes column cols - 1 - c."""
        return [Symmetry("mirror", _mirror_columns, np.arange(self.cols)[::-1])]

    def heuristic(self, state: BoardState) -> float:
        """tanh of the open windows: each window of four with k of the mover's stones and none
        of the opponent's counts WINDOW_WEIGHTS[k], the opponent's count negatively."""
        cells = state.board.reshape(-1)[_windows(self.rows, self.cols)]
        me = state.to_play + 1
        mine = (cells == me).sum(axis=1)
        theirs = ((cells != 0) & (cells != me)).sum(axis=1)
        score = WINDOW_WEIGHTS[mine][theirs == 0].sum() - WINDOW_WEIGHTS[theirs][mine == 0].sum()
        return float(np.tanh(score))


def _mirror_columns(observations: np.ndarray) -> np.ndarray:
    return observations[..., ::-1]
