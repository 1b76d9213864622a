"""Connect Four: stones drop to the lowest free row of a column; four in a row wins.

Standard board is 6 rows x 7 columns; ``rows``/``cols`` change it (the MuZero reference program
plays on 7 x 7). Action ``c`` drops a stone in column ``c``.
"""

from __future__ import annotations

import numpy as np

from muzero_gym.envs.board import EMPTY, BoardGameEnv, BoardState, line_windows
from muzero_gym.symmetry import Symmetry, mirror_columns

# Value of a window of four that holds k stones of one player and none of the other.
WINDOW_WEIGHTS = np.array([0.0, 0.01, 0.05, 0.25, 0.0])


class ConnectFourEnv(BoardGameEnv):
    """``muzero_gym/ConnectFour-v0``; the contract is in :mod:`muzero_gym.envs.board`."""

    connect = 4

    def __init__(self, rows: int = 6, cols: int = 7, render_mode: str | None = None):
        if rows < 4 and cols < 4:
            raise ValueError(f"a {rows}x{cols} board cannot hold four in a row")
        if rows < 1 or cols < 1:
            raise ValueError(f"rows = {rows}, cols = {cols}: both must be >= 1")
        super().__init__(rows, cols, cols, render_mode)

    def legal_masks(self, boards: np.ndarray) -> np.ndarray:
        return boards[:, 0, :] == EMPTY

    def target_cells(self, boards: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray,
                                                                            np.ndarray]:
        """The lowest empty row of each move's column (stones fill a column from the bottom)."""
        columns = boards[np.arange(len(boards)), :, actions]  # [B, rows]
        return (columns == EMPTY).sum(axis=1) - 1, actions

    def symmetries(self) -> list[Symmetry]:
        """The left-right mirror: columns reversed, so column c becomes column cols - 1 - c."""
        return [Symmetry("mirror", mirror_columns, np.arange(self.cols)[::-1])]

    def heuristic(self, state: BoardState) -> float:
        """tanh of the open windows: each window of four with k of the mover's stones and none
        of the opponent's counts WINDOW_WEIGHTS[k], the opponent's count negatively."""
        cells = state.board.reshape(-1)[line_windows(self.rows, self.cols, self.connect)]
        me = state.to_play + 1
        mine = (cells == me).sum(axis=1)
        theirs = ((cells != 0) & (cells != me)).sum(axis=1)
        score = WINDOW_WEIGHTS[mine][theirs == 0].sum() - WINDOW_WEIGHTS[theirs][mine == 0].sum()
        return float(np.tanh(score))

