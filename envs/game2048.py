"""2048: slide the tiles of a 4x4 board; equal tiles merge; a new 2 (90%) or 4 spawns after each
move in a random empty cell.

Single player. Actions: 0 up, 1 right, 2 down, 3 left; a move that changes nothing is illegal
(masked in ``info["action_mask"]``, and raises ``IllegalMoveError`` if taken). The reward is the
sum of the tiles made by merges in the move, as in the original game's score. The game ends when
no move is legal. The observation is one-hot over tile exponents, [16, 4, 4] bool: plane 0
marks empty cells, plane k a tile of 2**k. ``get_state``/``set_state`` copy and restore the
board (the spawn after a move is drawn from the env's own random generator).

The rules work on a batch of boards ([B, 4, 4] arrays of exponents): ``simulate(states,
actions)`` plays one move and its spawn in many positions with a few numpy calls, which is how
the true-simulator search (``search.simulator = true``) makes a simulation's new nodes; the
env's own ``step`` is a batch of one.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
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


def slide_boards(boards: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each of ``boards`` [B, size, size] slid in each of the 4 directions: the boards [B, 4,
    size, size] (before the spawn) and the rewards [B, 4]. On 4x4 boards with tiles up to 2**15
    a line is one lookup in the tables of every row; other boards slide line by line."""
    batch, size = boards.shape[0], boards.shape[1]
    lines = _line_indices(size)
    cells = boards.reshape(batch, -1)[:, lines]  # [B, 4, size, size]
    out = np.empty((batch, 4, size * size), dtype=boards.dtype)
    if size == 4 and (batch == 0 or boards.max() < NUM_PLANES):
        results, gains = _row_tables()
        keys = (cells.astype(np.int64) << _SHIFTS).sum(axis=3)  # [B, 4, 4]
        out[:, np.arange(4)[:, None, None], lines] = results[keys]
        rewards = gains[keys].sum(axis=2)
    else:
        rewards = np.zeros((batch, 4))
        for b in range(batch):
            for d in range(4):
                for line, idx in zip(cells[b, d], lines[d]):
                    out[b, d, idx], gained = slide_row_left(line)
                    rewards[b, d] += gained
    return out.reshape(batch, 4, size, size), rewards


def moves_that_change(slid: np.ndarray, boards: np.ndarray) -> np.ndarray:
    """[B, 4] bool: which of the slides ``slid`` [B, 4, size, size] change ``boards``."""
    return (slid != boards[:, None]).any(axis=(2, 3))


def legal_masks(boards: np.ndarray) -> np.ndarray:
    """[B, 4] bool: the moves that change each of ``boards`` [B, size, size]."""
    return moves_that_change(slide_boards(boards)[0], boards)


def slide(board: np.ndarray, action: int) -> tuple[np.ndarray, float]:
    """The board after sliding in direction ``action`` (before the spawn) and the reward."""
    boards, rewards = slide_boards(board[None])
    return boards[0, action], float(rewards[0, action])


def spawn_tiles(boards: np.ndarray, rng: np.random.Generator) -> None:
    """Puts a 2 (probability 0.9) or a 4 in a random empty cell of each of ``boards`` [B,
    size, size], in place (boards with no empty cell are left alone). Two draws of ``rng``
    per call, whatever B: the cells, then the tiles."""
    batch = boards.shape[0]
    flat = boards.reshape(batch, -1)
    empty = flat == 0
    counts = empty.sum(axis=1)
    picks = (rng.random(batch) * counts).astype(np.int64)  # which empty cell, in board order
    tiles = np.where(rng.random(batch) < 0.9, 1, 2).astype(boards.dtype)
    cells = np.argmax(empty & (np.cumsum(empty, axis=1) == (picks + 1)[:, None]), axis=1)
    rows = np.flatnonzero(counts > 0)
    flat[rows, cells[rows]] = tiles[rows]


def observe_boards(boards: np.ndarray) -> np.ndarray:
    """[B, 16, size, size] bool one-hot planes of ``boards`` [B, size, size]: plane 0 the empty
    cells, plane k the tiles of 2**k (larger tiles share the last plane)."""
    planes = np.minimum(boards, NUM_PLANES - 1).astype(np.int64)
    return np.moveaxis(np.eye(NUM_PLANES, dtype=np.bool_)[planes], -1, 1)


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
        return legal_masks(state.board[None])[0]

    def play(self, state: State2048, action: int) -> tuple[State2048, float]:
        """The state after ``action`` and its spawn, and the reward; ``state`` is unchanged."""
        new_states, _, rewards, _, _ = self.simulate([state], np.array([action]), observe=False)
        return new_states[0], float(rewards[0])

    def simulate(self, states: Sequence[State2048], actions: np.ndarray, observe: bool = True
                 ) -> tuple[list[State2048], np.ndarray | None, np.ndarray, np.ndarray,
                            np.ndarray]:
        """One move and its spawn in each of many positions: ``actions[i]`` is played in
        ``states[i]`` (the spawns drawn from the env's own random generator).

        Returns the new states (the inputs are not changed), their observations [B, 16, size,
        size] (None when ``observe`` is false), the rewards [B], whether each game is over [B]
        and the legal moves of the new positions [B, 4] (none where over). An illegal move
        anywhere raises ``IllegalMoveError`` and changes nothing.
        """
        batch = len(states)
        actions = np.asarray(actions, dtype=np.int64).reshape(-1)
        if len(actions) != batch:
            raise ValueError(f"{len(actions)} actions for {batch} states")
        if any(state.done for state in states):
            raise IllegalMoveError("the game is over; call reset()")
        bad = np.flatnonzero((actions < 0) | (actions > 3))
        if len(bad):
            raise IllegalMoveError(f"illegal move {int(actions[bad[0]])!r}: actions are 0-3 "
                                   f"({', '.join(ACTION_NAMES)})")
        boards = np.stack([state.board for state in states]) if batch else np.zeros(
            (0, self.size, self.size), dtype=np.int8)
        slid, gains = slide_boards(boards)
        rows = np.arange(batch)
        legal = moves_that_change(slid, boards)
        if not legal[rows, actions].all():
            i = int(np.flatnonzero(~legal[rows, actions])[0])
            names = [ACTION_NAMES[a] for a in np.flatnonzero(legal[i])]
            raise IllegalMoveError(f"illegal move {ACTION_NAMES[actions[i]]}: nothing moves; "
                                   f"legal moves are {names}")
        new_boards = slid[rows, actions]
        spawn_tiles(new_boards, self.np_random)
        rewards = gains[rows, actions]
        masks = legal_masks(new_boards)
        done = ~masks.any(axis=1)
        new_states = [State2048(new_boards[i], states[i].score + float(rewards[i]), bool(done[i]))
                      for i in range(batch)]
        observations = observe_boards(new_boards) if observe else None
        return new_states, observations, rewards, done, masks

    def observe(self, state: State2048) -> np.ndarray:
        return observe_boards(state.board[None])[0]

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
        boards = np.zeros((1, self.size, self.size), dtype=np.int8)
        spawn_tiles(boards, self.np_random)
        spawn_tiles(boards, self.np_random)
        return State2048(boards[0])

    def board_text(self, state: State2048) -> str:
        cells = [[str(2 ** int(v)) if v else "." for v in row] for row in state.board]
        width = max(len(c) for row in cells for c in row)
        lines = [" ".join(c.rjust(width) for c in row) for row in cells]
        lines.append(f"score {state.score:.0f}" + ("  game over" if state.done else ""))
        return "\n".join(lines)
