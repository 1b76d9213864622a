"""Shogi on ``cshogi``: AlphaZero's move encoding and input planes, repetition (sennichite) and
perpetual check.

Rules are cshogi's (a C++ move generator: about 160,000 moves a second against python-shogi's
200 on the same CPU, which decides the choice; it weighs 32 MB installed against 0.4 MB). A
player who cannot move loses (the mover of the mate gets +1). A position occurring for the fourth
time ends the game (sennichite): a draw, unless one player gave check with every move since the
position first occurred, who then loses. After ``max_moves`` plies (512, the MuZero
pseudocode's limit) the game is a draw. ``proven_values`` tells the true-simulator search which
positions are won by a mate in one (cshogi's C++ mate finder).

Actions (AlphaZero's 9 x 9 x 139 = 11,259), seen from the side to move (Gote's board is turned
around): for a move, the square it starts from times 64 queen-like moves (8 directions x 1-8
squares) and 2 knight jumps, then the same 66 with promotion; for a drop, the square it lands
on times 7 kinds of piece in hand. ``action = square * 139 + kind``.

Observation (AlphaZero's planes, from the side to move): for each of the last ``history``
positions (8, as AlphaZero; fewer keep the replay small on a CPU), newest first, 14 planes of
the mover's piece types, 14 of the opponent's, 3 saying whether the position had occurred once,
twice or three times before, 7 of the mover's pieces in hand and 7 of the opponent's (counts
over their maxima); then the colour to move and the number of moves played / 512.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from gymnasium import spaces

from muzero_gym.envs.board import IllegalMoveError, LegalMoves, TurnGameEnv, import_rules_library

cshogi = import_rules_library("cshogi", "muzero_gym/Shogi-v0", "shogi")

NUM_KINDS = 139
NUM_ACTIONS = 81 * NUM_KINDS
PLANES_PER_POSITION = 45
MAX_MOVES = 512
HAND_MAXIMA = np.array(cshogi.MAX_PIECES_IN_HAND, dtype=np.float32)  # P L N S G B R
# (file, rank) steps seen from the mover, forward = towards rank a (smaller rank index)
DIRECTIONS = ((0, -1), (1, -1), (1, 0), (1, 1), (0, 1), (-1, 1), (-1, 0), (-1, -1))
KNIGHT = ((-1, -2), (1, -2))
PIECE_CHARS = " PLNSBRGK"


def _orient(square: int, white: bool) -> int:
    return 80 - square if white else square


@functools.cache
def _kind_of_step() -> dict[tuple[int, int], int]:
    kinds = {}
    for d, (df, dr) in enumerate(DIRECTIONS):
        for distance in range(1, 9):
            kinds[(df * distance, dr * distance)] = d * 8 + distance - 1
    for k, step in enumerate(KNIGHT):
        kinds[step] = 64 + k
    return kinds


def encode_move(move: int, white_to_move: bool) -> int:
    """The action of cshogi ``move`` for the side to move."""
    to_square = _orient(cshogi.move_to(move), white_to_move)
    if cshogi.move_is_drop(move):
        return to_square * NUM_KINDS + 132 + cshogi.move_drop_hand_piece(move)
    from_square = _orient(cshogi.move_from(move), white_to_move)
    from_file, from_rank = divmod(from_square, 9)
    to_file, to_rank = divmod(to_square, 9)
    kind = _kind_of_step()[(to_file - from_file, to_rank - from_rank)]
    if cshogi.move_is_promotion(move):
        kind += 66
    return from_square * NUM_KINDS + kind


@dataclass
class ShogiState:
    """A whole game: cshogi's board, the position keys and whether each move gave check (for
    repetition), the last positions' planes, the moves in USI notation and the result."""

    board: cshogi.Board
    keys: tuple = ()  # position key after each ply, the starting position first
    checks: tuple = ()  # whether the move of each ply gave check
    planes: np.ndarray | None = None  # [history, 45, 9, 9] from Sente's side (rank a on top)
    moves: tuple = ()
    done: bool = False
    winner: int | None = None  # 0 Sente (Black), 1 Gote (White)
    result: str = ""
    _actions: dict | None = None  # action -> cshogi move of the position (cached)

    @property
    def to_play(self) -> int:
        return int(self.board.turn)

    def copy(self) -> ShogiState:
        return ShogiState(self.board.copy(), self.keys, self.checks, self.planes.copy(),
                          self.moves, self.done, self.winner, self.result, self._actions)

    def actions(self) -> dict[int, int]:
        """Action -> cshogi move of every legal move (none once over)."""
        if self._actions is None:
            white = self.board.turn == cshogi.WHITE
            self._actions = {} if self.done else {
                encode_move(m, white): m for m in self.board.legal_moves}
        return self._actions


def _position_planes(board: cshogi.Board, repetitions: int) -> np.ndarray:
    """[45, 9, 9] from Sente's side: Sente's 14 piece types, Gote's 14, repetitions (1, 2, 3
    before), Sente's hand, Gote's hand."""
    out = np.zeros((PLANES_PER_POSITION, 81), dtype=np.float32)
    pieces = np.asarray(board.pieces, dtype=np.int64)  # [81] cshogi codes; square = file * 9
    # + rank with file 0 the rightmost: drawn with rank a on top and file 9 on the left
    occupied = pieces > 0
    color = pieces >= 16
    kind = (pieces & 15) - 1
    cells = np.flatnonzero(occupied)
    out[kind[cells] + 14 * color[cells], cells] = 1.0
    if repetitions:
        out[28 + min(repetitions, 3) - 1] = 1.0
    hands = np.asarray(board.pieces_in_hand, dtype=np.float32) / HAND_MAXIMA
    out[31:38] = hands[0][:, None]
    out[38:45] = hands[1][:, None]
    planes = out.reshape(PLANES_PER_POSITION, 9, 9)  # [c, file, rank]
    return planes.transpose(0, 2, 1)[:, :, ::-1].copy()  # [c, rank, file from 9 to 1]


class ShogiEnv(TurnGameEnv):
    """``muzero_gym/Shogi-v0`` (see module doc); ``history`` positions in the planes,
    ``max_moves``. ``reset(options={"sfen": ...})`` starts from a position."""

    def __init__(self, history: int = 8, max_moves: int = MAX_MOVES,
                 render_mode: str | None = None):
        if history < 1:
            raise ValueError(f"history = {history}: must be >= 1")
        self.history, self.max_moves = int(history), int(max_moves)
        super().__init__(render_mode)
        self.observation_space = spaces.Box(
            0.0, 1.0, (PLANES_PER_POSITION * self.history + 2, 9, 9), dtype=np.float32)
        self.action_space = LegalMoves(NUM_ACTIONS, lambda: self.legal_mask(self.state))
        self.state = self.initial_state()

    # ---- rules -----------------------------------------------------------------------------

    def initial_state(self, sfen: str | None = None) -> ShogiState:
        board = cshogi.Board()
        if sfen is not None:
            board.set_sfen(sfen)
            if not board.is_ok():
                raise ValueError("not a valid position")
        planes = np.zeros((self.history, PLANES_PER_POSITION, 9, 9), dtype=np.float32)
        planes[0] = _position_planes(board, 0)
        state = ShogiState(board, keys=(board.zobrist_hash(),), planes=planes)
        if not any(True for _ in board.legal_moves):
            state.done, state.winner = True, 1 - int(board.turn)
            state.result = "checkmate"
        return state

    def legal_mask(self, state: ShogiState) -> np.ndarray:
        mask = np.zeros(NUM_ACTIONS, dtype=np.bool_)
        actions = list(state.actions())
        mask[actions] = True
        return mask

    def simulate(self, states: Sequence[ShogiState], actions: np.ndarray, observe: bool = True
                 ) -> tuple[list[ShogiState], np.ndarray | None, np.ndarray, np.ndarray,
                            np.ndarray]:
        """One move in each position (the two-player contract's batched rules): the new
        states, observations (None unless ``observe``), movers' rewards, game ends and legal
        masks. An illegal move raises IllegalMoveError and changes nothing."""
        actions = np.asarray(actions, dtype=np.int64).reshape(-1)
        if len(actions) != len(states):
            raise ValueError(f"{len(actions)} actions for {len(states)} states")
        moves = []
        for state, action in zip(states, actions.tolist()):
            if state.done:
                raise IllegalMoveError("the game is over; call reset()")
            move = state.actions().get(action)
            if move is None:
                raise IllegalMoveError(f"illegal move {action} in {state.board.sfen()}")
            moves.append(move)
        new_states, rewards = [], np.zeros(len(states))
        for i, (state, move) in enumerate(zip(states, moves)):
            new = self._after(state, move)
            rewards[i] = -1.0 if new.winner == 1 - state.to_play else (
                1.0 if new.winner == state.to_play else 0.0)
            new_states.append(new)
        done = np.array([s.done for s in new_states])
        masks = np.stack([self.legal_mask(s) for s in new_states])
        observations = np.stack([self.observe(s) for s in new_states]) if observe else None
        return new_states, observations, rewards, done, masks

    def _after(self, state: ShogiState, move: int) -> ShogiState:
        mover = state.to_play
        board = state.board.copy()
        usi = cshogi.move_to_usi(move)
        board.push(move)
        key = board.zobrist_hash()
        keys = state.keys + (key,)
        checks = state.checks + (bool(board.is_check()),)
        repetitions = keys.count(key) - 1
        planes = np.empty_like(state.planes)
        planes[0] = _position_planes(board, repetitions)
        planes[1:] = state.planes[:-1]
        new = ShogiState(board, keys, checks, planes, state.moves + (usi,))
        if not any(True for _ in board.legal_moves):
            new.done, new.winner, new.result = True, mover, "checkmate"
        elif repetitions >= 3:
            new.done = True
            first = keys.index(key)  # the cycle since the position first occurred
            since = checks[first:]  # the plies after it, the mover's last
            mover_checked = all(since[len(since) - 1::-2])
            other_checked = all(since[len(since) - 2::-2]) if len(since) > 1 else False
            if mover_checked:
                new.winner, new.result = 1 - mover, "perpetual check"
            elif other_checked:
                new.winner, new.result = mover, "perpetual check"
            else:
                new.result = "repetition"
        elif len(new.moves) >= self.max_moves:
            new.done, new.result = True, f"{self.max_moves} moves"
        return new

    def proven_values(self, states: Sequence[ShogiState]) -> np.ndarray:
        """For each position, 1.0 when the player to move has a mate in one (cshogi's mate
        finder, C++, about a microsecond a position; not called in check, where it does not
        apply), else NaN (not known): the true-simulator search's values there."""
        return np.array([1.0 if not s.done and not s.board.is_check()
                         and s.board.mate_move_in_1ply() else np.nan for s in states])

    # ---- observations ------------------------------------------------------------------------

    def observe(self, state: ShogiState) -> np.ndarray:
        planes = state.planes  # Sente's side
        white = state.board.turn == cshogi.WHITE
        if white:  # the mover's pieces and hand first, the board turned around
            order = [*range(14, 28), *range(14), 28, 29, 30, *range(38, 45), *range(31, 38)]
            planes = planes[:, order, ::-1, ::-1]
        out = np.empty(self.observation_space.shape, dtype=np.float32)
        out[:-2] = planes.reshape(-1, 9, 9)
        out[-2] = 0.0 if white else 1.0
        out[-1] = len(state.moves) / MAX_MOVES
        return out

    # ---- Gymnasium API -------------------------------------------------------------------------

    def start_state(self, options: dict | None) -> ShogiState:
        return self.initial_state((options or {}).get("sfen"))

    # ---- notation ------------------------------------------------------------------------------

    def usi_moves(self) -> list[str]:
        return list(self.state.moves)

    def usi_of_action(self, action: int) -> str:
        move = self.state.actions().get(int(action))
        return "resign" if move is None else cshogi.move_to_usi(move)

    def action_of_usi(self, usi: str) -> int | None:
        """The action of a USI move in the current position, None if it is not legal."""
        try:
            move = self.state.board.move_from_usi(usi)
        except Exception:  # noqa: BLE001 - cshogi raises several kinds for bad text
            return None
        white = self.state.board.turn == cshogi.WHITE
        action = encode_move(move, white) if move else None
        return action if action in self.state.actions() else None

    def board_text(self, state: ShogiState) -> str:
        lines = [str(state.board)]
        if state.moves:
            lines.append(f"last move {state.moves[-1]}")
        if state.done:
            outcome = {None: "draw", 0: "Sente wins", 1: "Gote wins"}[state.winner]
            lines.append(f"{outcome} ({state.result})")
        else:
            lines.append(f"{'Sente' if state.to_play == 0 else 'Gote'} to move")
        return "\n".join(lines)
