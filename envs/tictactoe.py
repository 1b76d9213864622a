"""TicTacToe: 3x3 board, three in a row wins; action ``3 * row + col`` (0-8)."""

from __future__ import annotations

import numpy as np

from muzero_gym.envs.board import EMPTY, STONE_CHARS, BoardGameEnv, BoardState


class TicTacToeEnv(BoardGameEnv):
    """``muzero_gym/TicTacToe-v0``; the contract is in :mod:`muzero_gym.envs.board`."""

    connect = 3

    def __init__(self, render_mode: str | None = None):
        super().__init__(3, 3, 9, render_mode)

    def legal_mask(self, state: BoardState) -> np.ndarray:
        if state.done:
            return np.zeros(9, dtype=np.bool_)
        return (state.board == EMPTY).reshape(-1)

    def _place(self, state: BoardState, action: int) -> tuple[int, int]:
        return divmod(action, 3)

    def cell_text(self, state: BoardState, row: int, col: int) -> str:
        """Empty cells show their action number."""
        stone = int(state.board[row, col])
        return STONE_CHARS[stone] if stone != EMPTY else str(3 * row + col)

    def axis_labels(self) -> str:
        return ""
