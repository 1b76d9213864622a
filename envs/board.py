"""Shared base of the two-player board games (TicTacToe, Connect Four).

Contract of every two-player env in ``muzero_gym.envs`` (and what a user's own game needs to
offer to be played by muzero_gym with ``env.num_players = 2``):

- Players alternate; ``info["to_play"]`` is the player to move next (0 moves first) and
  ``info["action_mask"]`` (bool, True = legal) the moves they may make.
- The observation is from the perspective of the player to move: plane 0 holds their stones,
  plane 1 the opponent's, plane 2 is all ones when the first player is to move.
- The reward belongs to the player who just moved: +1 for a winning move, 0 otherwise; a draw
  ends the game with 0.
- An illegal move raises ``IllegalMoveError`` and leaves the board unchanged.
- ``get_state()`` / ``set_state(state)`` copy and restore the whole game, which lets the search
  step a copy of the real game (``search.simulator = true``) and lets the opponents in
  :mod:`muzero_gym.envs.opponents` look ahead.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from gymnasium import spaces

EMPTY = 0
STONE_CHARS = {0: ".", 1: "X", 2: "O"}


class IllegalMoveError(ValueError):
    """A move that the rules do not allow in the current position."""


@dataclass
class BoardState:
    """A full position: board (0 empty, 1 first player's stone, 2 second player's), player to
    move, winner (None while undecided or on a draw) and whether the game is over."""

    board: np.ndarray
    to_play: int = 0
    winner: int | None = None
    done: bool = False

    def copy(self) -> BoardState:
        return BoardState(self.board.copy(), self.to_play, self.winner, self.done)

    def key(self) -> tuple[bytes, int]:
        """A hashable identity of the position."""
        return self.board.tobytes(), self.to_play


class TextGameEnv(gym.Env):
    """Gymnasium plumbing shared by the games of ``muzero_gym.envs``: the whole game lives in
    ``self.state``, rules are pure functions of a state (``initial_state``, ``play``,
    ``observe``, ``board_text``, ``_info``), and rendering is text (``ansi`` or ``human``)."""

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 1}

    def __init__(self, render_mode: str | None = None):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode {render_mode!r}: use one of "
                             f"{self.metadata['render_modes']}")
        self.render_mode = render_mode

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.state = self.initial_state()
        if self.render_mode == "human":
            self.render()
        return self.observe(self.state), self._info()

    def step(self, action):
        self.state, reward = self.play(self.state, int(action))
        if self.render_mode == "human":
            self.render()
        return self.observe(self.state), reward, self.state.done, False, self._info()

    def get_state(self):
        """A copy of the whole game (see module doc)."""
        return self.state.copy()

    def set_state(self, state) -> None:
        """Restores a position returned by :meth:`get_state`."""
        self.state = state.copy()

    def render(self) -> str | None:
        text = self.board_text(self.state)
        if self.render_mode == "human":
            print(text)
            return None
        return text


class BoardGameEnv(TextGameEnv):
    """Two-player alternating board game on a ``rows`` x ``cols`` grid (see module doc).

    Subclasses define ``num_actions``, :meth:`legal_mask` and :meth:`_place` (where a move puts
    its stone) and the number in a row that wins (``connect``).
    """

    connect = 3

    def __init__(self, rows: int, cols: int, num_actions: int, render_mode: str | None = None):
        super().__init__(render_mode)
        self.rows, self.cols = rows, cols
        self.observation_space = spaces.Box(0.0, 1.0, (3, rows, cols), dtype=np.float32)
        self.action_space = spaces.Discrete(num_actions)
        self.state = self.initial_state()

    # ---- rules (pure functions of a state) ---------------------------------------------------

    def initial_state(self) -> BoardState:
        return BoardState(np.zeros((self.rows, self.cols), dtype=np.int8))

    def legal_mask(self, state: BoardState) -> np.ndarray:
        raise NotImplementedError

    def _place(self, state: BoardState, action: int) -> tuple[int, int]:
        """(row, col) where ``action`` puts a stone; only called for legal moves."""
        raise NotImplementedError

    def play(self, state: BoardState, action: int) -> tuple[BoardState, float]:
        """The position after ``action`` and the mover's reward; ``state`` is not changed."""
        if state.done:
            raise IllegalMoveError("the game is over; call reset()")
        if not (0 <= int(action) < self.action_space.n) or not self.legal_mask(state)[action]:
            legal = np.flatnonzero(self.legal_mask(state)).tolist()
            raise IllegalMoveError(f"illegal move {action!r}: legal moves are {legal}")
        new = state.copy()
        row, col = self._place(new, int(action))
        new.board[row, col] = state.to_play + 1
        reward = 0.0
        if self.wins_through(new.board, row, col):
            new.winner, new.done, reward = state.to_play, True, 1.0
        elif not (new.board == EMPTY).any():
            new.done = True
        new.to_play = 1 - state.to_play
        return new, reward

    def wins_through(self, board: np.ndarray, row: int, col: int) -> bool:
        """Whether the stone at (row, col) completes ``connect`` in a row in any direction."""
        stone = board[row, col]
        for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
            count = 1
            for sign in (1, -1):
                r, c = row + sign * dr, col + sign * dc
                while 0 <= r < self.rows and 0 <= c < self.cols and board[r, c] == stone:
                    count += 1
                    r, c = r + sign * dr, c + sign * dc
            if count >= self.connect:
                return True
        return False

    def heuristic(self, state: BoardState) -> float:
        """Estimated value in (-1, 1) of an undecided position for the player to move (used by
        the depth-limited alpha-beta opponent); 0 unless a game defines one."""
        return 0.0

    def observe(self, state: BoardState) -> np.ndarray:
        """[3, rows, cols] float32 from the perspective of the player to move."""
        me = state.to_play + 1
        obs = np.empty((3, self.rows, self.cols), dtype=np.float32)
        obs[0] = state.board == me
        obs[1] = (state.board != EMPTY) & (state.board != me)
        obs[2] = 1.0 if state.to_play == 0 else 0.0
        return obs

    # ---- Gymnasium API -------------------------------------------------------------------------

    def _info(self) -> dict:
        mask = self.legal_mask(self.state)
        if self.state.done:
            mask = np.ones_like(mask)  # nothing is legal; keep the search's root well defined
        return {"action_mask": mask, "to_play": self.state.to_play,
                "winner": -1 if self.state.winner is None else self.state.winner}

    def board_text(self, state: BoardState) -> str:
        """The board as text (X moves first, O second), then whose move it is or the result."""
        lines = [" ".join(self.cell_text(state, r, c) for c in range(self.cols))
                 for r in range(self.rows)]
        labels = self.axis_labels()
        if labels:
            lines.append(labels)
        if state.done:
            lines.append("draw" if state.winner is None
                         else f"{STONE_CHARS[state.winner + 1]} wins")
        else:
            lines.append(f"{STONE_CHARS[state.to_play + 1]} to move")
        return "\n".join(lines)

    def cell_text(self, state: BoardState, row: int, col: int) -> str:
        return STONE_CHARS[int(state.board[row, col])]

    def axis_labels(self) -> str:
        """Move numbers under the board (columns); empty when the cells show them."""
        return " ".join(str(c) for c in range(self.cols))
