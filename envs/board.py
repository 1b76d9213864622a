"""Shared base of the turn-based games (TicTacToe, Connect Four, Go, chess, shogi) and of 2048.

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
- Optionally, ``info["result"]`` at the end of a game says how it ended ("checkmate",
  "repetition", "512 moves", ...); matches (:mod:`muzero_gym.arena`) count the games won, drawn
  and lost of each way.
- Optionally, ``proven_values(states)``: for each position +1 when the player to move wins by
  force, -1 when they lose, NaN when not known (shogi and chess: a mate in one; the board games
  here: a line completed with one move, or two threats of the opponent's, or one whose block
  leaves another). The true-simulator search takes these values instead of the network's
  (:mod:`muzero_gym.simulator`).
- Optionally, ``simulate(states, actions)`` plays one move in each of many positions at once
  (see :meth:`BoardGameEnv.simulate`); the search then expands a whole batch of nodes in one call
  instead of one ``set_state``/``step``/``get_state`` round per node.

The rules here are written for a batch of boards ([B, rows, cols] arrays); one position is a
batch of one, so the env's own ``step``, the search and the opponents share one implementation.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

EMPTY = 0
STONE_CHARS = {0: ".", 1: "X", 2: "O"}


def import_rules_library(module: str, env_id: str, extra: str) -> Any:
    """The rules library ``module`` that ``env_id`` is built on, from the optional extra
    ``extra``; if it is missing, the import error names the extra to install."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(
            f"{e}: {env_id} needs it: pip install 'muzero-gym[{extra}]' "
            f"(in a checkout: pip install -e '.[{extra}]')", name=e.name) from e


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


class LegalMoves(spaces.Discrete):
    """``Discrete(n)`` whose ``sample()`` draws a legal move of its env's current position
    (``info["action_mask"]``), so that random play (and Gymnasium's env checker) never tries an
    illegal move in a game where most actions are illegal (chess, shogi)."""

    def __init__(self, n: int, legal_mask, seed: int | None = None):
        super().__init__(n, seed=seed)
        self._legal_mask = legal_mask  # () -> [n] bool of the env's position

    def sample(self, mask: np.ndarray | None = None, probability: np.ndarray | None = None
               ) -> np.int64:
        if mask is None and probability is None:
            legal = np.asarray(self._legal_mask(), dtype=np.int8)
            if legal.any():
                mask = legal
        return super().sample(mask=mask, probability=probability)

    def __deepcopy__(self, memo):  # a copy keeps sampling from the same env
        return LegalMoves(self.n, self._legal_mask)


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
        self.state = self.start_state(options)
        if self.render_mode == "human":
            self.render()
        return self.observe(self.state), self._info()

    def start_state(self, options: dict | None) -> Any:
        """The position a game starts from, given ``reset``'s options (by default the game's
        ``initial_state()``; chess and shogi read a FEN or SFEN there)."""
        return self.initial_state()

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


@functools.cache
def line_windows(rows: int, cols: int, length: int) -> np.ndarray:
    """[W, length] flat cell indices of every horizontal, vertical and diagonal line of
    ``length`` cells on a ``rows`` x ``cols`` board."""
    windows = []
    for r in range(rows):
        for c in range(cols):
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                cells = [(r + k * dr, c + k * dc) for k in range(length)]
                if all(0 <= rr < rows and 0 <= cc < cols for rr, cc in cells):
                    windows.append([rr * cols + cc for rr, cc in cells])
    return np.array(windows, dtype=np.int64).reshape(-1, length)


@functools.cache
def lines_through_cells(rows: int, cols: int, length: int) -> np.ndarray:
    """[rows * cols, K, length]: for each cell, the lines of ``length`` cells that contain it
    (a cell in fewer than K lines repeats some of its own)."""
    windows = line_windows(rows, cols, length)
    if len(windows) == 0:
        raise ValueError(f"a {rows}x{cols} board cannot hold {length} in a row")
    # With a line at all, rows or cols >= length, so every cell lies in at least one.
    per_cell = [windows[(windows == cell).any(axis=1)] for cell in range(rows * cols)]
    width = max(len(lines) for lines in per_cell)
    return np.stack([lines[np.arange(width) % len(lines)] for lines in per_cell])


class TurnGameEnv(TextGameEnv):
    """A two-player game under the contract above, whose rules are the batched ``simulate``:
    ``play`` is one move through it, and ``info`` gives the legal moves, the player to move and
    the winner (-1 while none) of ``self.state`` (which has ``to_play``, ``done`` and
    ``winner``; the env has ``legal_mask(state)``), and once the game is over, where the state
    says how it ended (its ``result``: "checkmate", "512 moves", ...), ``info["result"]``."""

    def _info(self) -> dict:
        mask = self.legal_mask(self.state)
        if self.state.done:
            mask = np.ones_like(mask)  # nothing is legal; keep the search's root well defined
        info = {"action_mask": mask, "to_play": self.state.to_play,
                "winner": -1 if self.state.winner is None else self.state.winner}
        if self.state.done and getattr(self.state, "result", ""):
            info["result"] = self.state.result
        return info

    def play(self, state, action: int) -> tuple[Any, float]:
        """The position after ``action`` and the mover's reward, through the batched rules
        (``simulate``); ``state`` is not changed."""
        states, _, rewards, _, _ = self.simulate([state], np.array([action]), observe=False)
        return states[0], float(rewards[0])


class BoardGameEnv(TurnGameEnv):
    """Two-player alternating board game on a ``rows`` x ``cols`` grid (see module doc).

    Subclasses define ``num_actions``, :meth:`legal_masks` (which moves are legal on a batch of
    boards), :meth:`target_cells` (where each move puts its stone) and the number in a row that
    wins (``connect``).
    """

    connect = 3

    def __init__(self, rows: int, cols: int, num_actions: int, render_mode: str | None = None):
        super().__init__(render_mode)
        self.rows, self.cols = rows, cols
        self.observation_space = spaces.Box(0, 1, (3, rows, cols), dtype=np.bool_)
        self.action_space = spaces.Discrete(num_actions)
        self._lines = lines_through_cells(rows, cols, self.connect)
        self.state = self.initial_state()

    # ---- rules (pure functions of a batch of boards) -----------------------------------------

    def initial_state(self) -> BoardState:
        return BoardState(np.zeros((self.rows, self.cols), dtype=np.int8))

    def legal_masks(self, boards: np.ndarray) -> np.ndarray:
        """[B, num_actions] bool: the moves the rules allow on each of ``boards`` [B, rows, cols]
        (whether a game is over is not the boards' concern: see :meth:`legal_mask`)."""
        raise NotImplementedError

    def target_cells(self, boards: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray,
                                                                            np.ndarray]:
        """(rows [B], cols [B]) where each legal move of ``actions`` [B] puts its stone."""
        raise NotImplementedError

    def legal_mask(self, state: BoardState) -> np.ndarray:
        """[num_actions] bool: the legal moves of one position (none once the game is over)."""
        if state.done:
            return np.zeros(self.action_space.n, dtype=np.bool_)
        return self.legal_masks(state.board[None])[0]

    def simulate(self, states: Sequence[BoardState], actions: np.ndarray, observe: bool = True
                 ) -> tuple[list[BoardState], np.ndarray | None, np.ndarray, np.ndarray,
                            np.ndarray]:
        """One move in each of many positions: ``actions[i]`` is played in ``states[i]``.

        Returns the new states (the inputs are not changed), their observations [B, 3, rows,
        cols] (None when ``observe`` is false), the movers' rewards [B], whether each game is
        over [B] and the legal moves of the new positions [B, num_actions] (none where over).
        An illegal move anywhere raises ``IllegalMoveError`` and changes nothing.
        """
        batch = len(states)
        actions = np.asarray(actions, dtype=np.int64).reshape(-1)
        if len(actions) != batch:
            raise ValueError(f"{len(actions)} actions for {batch} states")
        if any(state.done for state in states):
            raise IllegalMoveError("the game is over; call reset()")
        boards = np.stack([state.board for state in states])
        to_play = np.fromiter((state.to_play for state in states), dtype=np.int8, count=batch)
        rows_of_batch = np.arange(batch)
        in_range = (actions >= 0) & (actions < self.action_space.n)
        legal = self.legal_masks(boards)
        ok = in_range & legal[rows_of_batch, np.where(in_range, actions, 0)]
        if not ok.all():
            bad = int(np.flatnonzero(~ok)[0])
            raise IllegalMoveError(f"illegal move {int(actions[bad])!r}: legal moves are "
                                   f"{np.flatnonzero(legal[bad]).tolist()}")
        rows, cols = self.target_cells(boards, actions)
        stones = to_play + 1
        boards[rows_of_batch, rows, cols] = stones
        flat = boards.reshape(batch, -1)
        lines = self._lines[rows * self.cols + cols]  # [B, K, connect]
        wins = (flat[rows_of_batch[:, None, None], lines] == stones[:, None, None]).all(
            axis=2).any(axis=1)
        done = wins | (flat != EMPTY).all(axis=1)
        next_to_play = 1 - to_play
        new_states = [BoardState(boards[i], int(next_to_play[i]),
                                 int(to_play[i]) if wins[i] else None, bool(done[i]))
                      for i in range(batch)]
        masks = self.legal_masks(boards) & ~done[:, None]
        observations = self.observe_boards(boards, next_to_play) if observe else None
        return new_states, observations, wins.astype(np.float64), done, masks

    def proven_values(self, states: Sequence[BoardState]) -> np.ndarray:
        """For each position, +1 when the player to move completes a line with their move; -1
        when they cannot and the opponent threatens to complete one with two different moves
        (one stone cannot block both), or with one move whose block leaves the opponent another
        (Connect Four's threat stacked on a threat); else NaN (not known): the true-simulator
        search's values there (see the module doc)."""
        values = np.full(len(states), np.nan)
        live = [i for i, state in enumerate(states) if not state.done]
        if not live:
            return values
        boards = np.stack([states[i].board for i in live])
        to_play = np.fromiter((states[i].to_play for i in live), dtype=np.int8, count=len(live))
        opponent = 2 - to_play
        mover_wins = self.winning_moves(boards, to_play + 1).any(axis=1)
        threats = self.winning_moves(boards, opponent)
        count = threats.sum(axis=1)
        lost = ~mover_wins & (count >= 2)
        forced = np.flatnonzero(~mover_wins & (count == 1))  # one block, and it must be played
        if len(forced):
            blocked = boards[forced].copy()
            rows, cols = self.target_cells(blocked, threats[forced].argmax(axis=1))
            blocked[np.arange(len(forced)), rows, cols] = to_play[forced] + 1
            lost[forced] = self.winning_moves(blocked, opponent[forced]).any(axis=1)
        values[live] = np.where(mover_wins, 1.0, np.where(lost, -1.0, np.nan))
        return values

    def winning_moves(self, boards: np.ndarray, stones: np.ndarray) -> np.ndarray:
        """[B, num_actions] bool: the legal moves on ``boards`` [B, rows, cols] with which a
        stone of ``stones`` [B] (1 or 2) would complete a line, whoever is to move."""
        batch = len(boards)
        legal = self.legal_masks(boards)
        flat = boards.reshape(batch, -1)
        rows_of_batch = np.arange(batch)[:, None, None]
        wins = np.zeros_like(legal)
        for action in np.flatnonzero(legal.any(axis=0)):
            rows, cols = self.target_cells(boards, np.full(batch, action))
            cells = np.where(legal[:, action], rows * self.cols + cols, 0)  # 0: not played
            lines = self._lines[cells]  # [B, K, connect]
            complete = (flat[rows_of_batch, lines] == stones[:, None, None]) | (
                lines == cells[:, None, None])
            wins[:, action] = legal[:, action] & complete.all(axis=2).any(axis=1)
        return wins

    def heuristic(self, state: BoardState) -> float:
        """Estimated value in (-1, 1) of an undecided position for the player to move (used by
        the depth-limited alpha-beta opponent); 0 unless a game defines one."""
        return 0.0

    def observe(self, state: BoardState) -> np.ndarray:
        """[3, rows, cols] bool planes from the perspective of the player to move."""
        return self.observe_boards(state.board[None], np.array([state.to_play]))[0]

    def observe_boards(self, boards: np.ndarray, to_play: np.ndarray) -> np.ndarray:
        """[B, 3, rows, cols] bool observations of ``boards`` for the players ``to_play``."""
        mine = boards == (np.asarray(to_play) + 1).astype(boards.dtype)[:, None, None]
        obs = np.empty((len(boards), 3, self.rows, self.cols), dtype=np.bool_)
        obs[:, 0] = mine
        obs[:, 1] = (boards != EMPTY) & ~mine
        obs[:, 2] = (np.asarray(to_play) == 0)[:, None, None]
        return obs

    # ---- Gymnasium API -------------------------------------------------------------------------

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
