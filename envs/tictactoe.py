"""TicTacToe: 3x3 board, three in a row wins; action ``3 * row + col`` (0-8)."""

from __future__ import annotations

import functools

import numpy as np

from muzero_gym.envs.board import EMPTY, STONE_CHARS, BoardGameEnv, BoardState
from muzero_gym.symmetry import Symmetry


class TicTacToeEnv(BoardGameEnv):
    """``muzero_gym/TicTacToe-v0``; the contract is in :mod:`muzero_gym.envs.board`."""

    connect = 3

    def __init__(self, render_mode: str | None = None):
        super().__init__(3, 3, 9, render_mode)

    def legal_masks(self, boards: np.ndarray) -> np.ndarray:
        return boards.reshape(len(boards), -1) == EMPTY

    def target_cells(self, boards: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray,
                                                                            np.ndarray]:
        return np.divmod(actions, 3)

    def symmetries(self) -> list[Symmetry]:
        """The seven rotations and reflections of the square other than the identity."""
        cells = np.arange(9).reshape(3, 3)
        out = []
        for turns in range(4):
            for flip in (False, True):
                if turns == 0 and not flip:
                    continue
                transform = functools.partial(_square_symmetry, turns=turns, flip=flip)
                # transform(cells)[p] is the cell that lands on p: invert to say where cells go.
                source = transform(cells).reshape(-1)
                name = f"rotate {90 * turns}" + (" and mirror" if flip else "")
                out.append(Symmetry(name, transform, np.argsort(source)))
        return out

    def cell_text(self, state: BoardState, row: int, col: int) -> str:
        """Empty cells show their action number."""
        stone = int(state.board[row, col])
        return STONE_CHARS[stone] if stone != EMPTY else str(3 * row + col)

    def axis_labels(self) -> str:
        return ""


def _square_symmetry(observations: np.ndarray, turns: int, flip: bool) -> np.ndarray:
    """Rotates the trailing [H, W] axes by ``turns`` quarter turns, then mirrors left-right."""
    out = np.rot90(observations, turns, axes=(-2, -1))
    return out[..., ::-1] if flip else out
