"""Chess on the ``chess`` package (python-chess): AlphaZero's move encoding and input planes.

Rules are python-chess's; the game ends by checkmate (the mover gets +1), or as a draw by
stalemate, insufficient material, threefold repetition or the fifty-move rule (applied as soon
as they hold, as AlphaZero's self-play does), or after ``max_moves`` plies (512, the MuZero
pseudocode's limit). ``proven_values`` tells the true-simulator search which positions are won
by a mate in one (only the moves that can give check are tried: about a quarter of a
``simulate`` step's time per position).

Actions (AlphaZero's 8 x 8 x 73 = 4,672): the square a piece moves from, times 73 kinds of
move, all seen from the side to move (for Black the board is flipped top to bottom): 56 queen
moves (8 directions x 1-7 squares; a pawn reaching the last rank this way promotes to a
queen), 8 knight moves, and 9 underpromotions (to knight, bishop or rook, moving straight or
capturing to either side). ``action = from_square * 73 + kind``.

Observation (119 planes of 8 x 8, from the side to move): for each of the last 8 positions,
newest first, 6 planes of the mover's pieces, 6 of the opponent's and 2 that say whether the
position had occurred once or twice before; then the colour to move, the number of moves
played / 512, the four castling rights (mover's first) and the no-progress count / 100.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from gymnasium import spaces

from muzero_gym.envs.board import IllegalMoveError, LegalMoves, TurnGameEnv, import_rules_library

chess = import_rules_library("chess", "muzero_gym/Chess-v0", "chess")

HISTORY = 8
PLANES_PER_POSITION = 14
NUM_PLANES = HISTORY * PLANES_PER_POSITION + 7
NUM_KINDS = 73
NUM_ACTIONS = 64 * NUM_KINDS
MAX_MOVES = 512
# queen directions (file, rank steps) and knight jumps, from the mover's side
DIRECTIONS = ((0, 1), (1, 1), (1, 0), (1, -1), (0, -1), (-1, -1), (-1, 0), (-1, 1))
KNIGHT = ((1, 2), (2, 1), (2, -1), (1, -2), (-1, -2), (-2, -1), (-2, 1), (-1, 2))
UNDERPROMOTIONS = (chess.KNIGHT, chess.BISHOP, chess.ROOK)


@functools.cache
def _kind_of_step() -> dict[tuple[int, int, int | None], int]:
    """(file step, rank step, underpromotion piece or None) -> kind."""
    kinds: dict[tuple[int, int, int | None], int] = {}
    for d, (df, dr) in enumerate(DIRECTIONS):
        for distance in range(1, 8):
            kinds[(df * distance, dr * distance, None)] = d * 7 + distance - 1
    for k, (df, dr) in enumerate(KNIGHT):
        kinds[(df, dr, None)] = 56 + k
    for p, piece in enumerate(UNDERPROMOTIONS):
        for side, df in enumerate((-1, 0, 1)):
            kinds[(df, 1, piece)] = 64 + 3 * p + side
    return kinds


@functools.cache
def _step_of_kind() -> list[tuple[int, int, int | None]]:
    steps: list[tuple[int, int, int | None]] = [(0, 0, None)] * NUM_KINDS
    for step, kind in _kind_of_step().items():
        steps[kind] = step
    return steps


def _orient(square: int, color: chess.Color) -> int:
    """A square as the side ``color`` sees it (Black's board is flipped top to bottom)."""
    return square if color == chess.WHITE else chess.square_mirror(square)


def encode_move(move: chess.Move, color: chess.Color) -> int:
    """The action of ``move`` played by ``color``."""
    return int(_encode_moves([move], color)[0])


@functools.cache
def _action_table() -> np.ndarray:
    """[64 from, 64 to, 4] the action of a move between two squares seen from the mover's
    side, by promotion (none or queen, knight, bishop, rook); -1 where there is none."""
    table = np.full((64, 64, 4), -1, dtype=np.int64)
    for (df, dr, under), kind in _kind_of_step().items():
        for start in range(64):
            file, rank = chess.square_file(start) + df, chess.square_rank(start) + dr
            if 0 <= file < 8 and 0 <= rank < 8:
                column = 0 if under is None else UNDERPROMOTIONS.index(under) + 1
                table[start, chess.square(file, rank), column] = start * NUM_KINDS + kind
    return table


# python-chess piece type (0 = no promotion) -> column of _action_table: a queen promotion is a
# queen-direction move, knight/bishop/rook promotions are underpromotions
_PROMOTION_COLUMN = np.array([0, 0, 1, 2, 3, 0, 0], dtype=np.int64)


def _encode_moves(moves: Sequence[chess.Move], color: chess.Color) -> np.ndarray:
    """The actions of many moves of ``color`` at once (:func:`encode_move` for each)."""
    flip = 0 if color == chess.WHITE else 56  # square_mirror: rank r -> 7 - r
    count = len(moves)
    start = np.fromiter((m.from_square for m in moves), dtype=np.int64, count=count) ^ flip
    end = np.fromiter((m.to_square for m in moves), dtype=np.int64, count=count) ^ flip
    promotion = np.fromiter((m.promotion or 0 for m in moves), dtype=np.int64, count=count)
    return _action_table()[start, end, _PROMOTION_COLUMN[promotion]]


def decode_action(action: int, board: chess.Board) -> chess.Move | None:
    """The move of ``action`` for the side to move on ``board`` (None if off the board)."""
    color = board.turn
    start, kind = divmod(int(action), NUM_KINDS)
    df, dr, under = _step_of_kind()[kind]
    file, rank = chess.square_file(start) + df, chess.square_rank(start) + dr
    if not (0 <= file < 8 and 0 <= rank < 8):
        return None
    from_square = _orient(start, color)
    to_square = _orient(chess.square(file, rank), color)
    promotion = under
    piece = board.piece_type_at(from_square)
    if under is None and piece == chess.PAWN and rank == 7:
        promotion = chess.QUEEN
    return chess.Move(from_square, to_square, promotion)


def _discovering_pieces(board: chess.Board, king: int) -> int:
    """The mover's pieces that stand alone between the opponent's ``king`` and one of the
    mover's rooks, bishops or queens (a bitboard): moving one off that line gives check."""
    ours = board.occupied_co[board.turn]
    straight = (board.rooks | board.queens) & ours
    diagonal = (board.bishops | board.queens) & ours
    snipers = ((chess.BB_RANK_ATTACKS[king][0] | chess.BB_FILE_ATTACKS[king][0]) & straight
               | chess.BB_DIAG_ATTACKS[king][0] & diagonal)
    blockers = 0
    for sniper in chess.scan_forward(snipers):
        between = chess.between(king, sniper) & board.occupied
        if between and between & (between - 1) == 0:  # exactly one piece in between
            blockers |= between
    return blockers & ours


def _checking_moves(board: chess.Board) -> Iterator[chess.Move]:
    """The legal moves that may give check (each at most a few times; all that do are here):
    a piece landing where it attacks the opponent's king (the board's occupancy before the
    move decides: a piece moving away along a line to the king would already have been
    giving check), a piece leaving a line between that king and one of the mover's sliders,
    and every promotion, castling and en passant capture."""
    king = board.king(not board.turn)
    if king is None:
        return
    ours = board.occupied_co[board.turn]
    occupied = board.occupied
    straight = (chess.BB_RANK_ATTACKS[king][chess.BB_RANK_MASKS[king] & occupied]
                | chess.BB_FILE_ATTACKS[king][chess.BB_FILE_MASKS[king] & occupied])
    diagonal = chess.BB_DIAG_ATTACKS[king][chess.BB_DIAG_MASKS[king] & occupied]
    promoting = board.pawns & ours & (chess.BB_RANK_7 if board.turn else chess.BB_RANK_2)
    for pieces, squares in ((board.pawns & ~promoting, chess.BB_PAWN_ATTACKS[not board.turn][king]),
                            (board.knights, chess.BB_KNIGHT_ATTACKS[king]),
                            (board.bishops, diagonal), (board.rooks, straight),
                            (board.queens, straight | diagonal)):
        if pieces & ours and squares:
            yield from board.generate_legal_moves(pieces & ours, squares)
    discovering = _discovering_pieces(board, king) | promoting
    if discovering:
        yield from board.generate_legal_moves(discovering)
    yield from board.generate_castling_moves()
    yield from board.generate_legal_ep()


def _mates_in_one(board: chess.Board) -> bool:
    """Whether the side to move has a move that checkmates (only the moves that may give
    check are tried: push, is_checkmate, pop)."""
    for move in _checking_moves(board):
        board.push(move)
        mate = board.is_checkmate()
        board.pop()
        if mate:
            return True
    return False


@dataclass
class ChessState:
    """A whole game: python-chess's board, the last 8 positions' planes (from White's side;
    ``planes[0]`` is now), the plies played and the result. The board's move stack holds the
    moves since the last capture or pawn move (at least the last move): all that repetitions
    and the fifty-move rule look at, so copying a position costs the same late in a game as
    early."""

    board: chess.Board
    planes: np.ndarray  # [8, 14, 8, 8] uint8
    plies: int = 0  # moves played since the game's first position
    done: bool = False
    winner: int | None = None  # 0 White, 1 Black, None while playing or on a draw
    result: str = ""

    @property
    def to_play(self) -> int:
        return 0 if self.board.turn == chess.WHITE else 1

    def copy(self) -> ChessState:
        return ChessState(self.board.copy(), self.planes.copy(), self.plies, self.done,
                          self.winner, self.result)


def _position_planes(board: chess.Board) -> np.ndarray:
    """[14, 8, 8]: White's 6 piece types, Black's 6, repetition once, twice (White's side)."""
    out = np.empty((PLANES_PER_POSITION, 64), dtype=np.uint8)
    masks = np.array([board.pieces_mask(piece, color) for color in (chess.WHITE, chess.BLACK)
                      for piece in chess.PIECE_TYPES], dtype=np.uint64)
    # the bits of each python-chess square mask, square 0 (a1) first
    out[:12] = np.unpackbits(masks.view(np.uint8), bitorder="little").reshape(12, 64)
    out[12] = board.is_repetition(2)
    out[13] = board.is_repetition(3)
    return out.reshape(PLANES_PER_POSITION, 8, 8)


class ChessEnv(TurnGameEnv):
    """``muzero_gym/Chess-v0`` (see module doc). ``reset(options={"fen": ...})`` starts from a
    position."""

    def __init__(self, max_moves: int = MAX_MOVES, render_mode: str | None = None):
        self.max_moves = int(max_moves)
        super().__init__(render_mode)
        self.observation_space = spaces.Box(0.0, 1.0, (NUM_PLANES, 8, 8), dtype=np.float32)
        self.action_space = LegalMoves(NUM_ACTIONS, lambda: self.legal_mask(self.state))
        self.state = self.initial_state()

    # ---- rules -----------------------------------------------------------------------------

    def initial_state(self, fen: str | None = None) -> ChessState:
        board = chess.Board() if fen is None else chess.Board(fen)
        planes = np.zeros((HISTORY, PLANES_PER_POSITION, 8, 8), dtype=np.uint8)
        planes[0] = _position_planes(board)
        state = ChessState(board, planes)
        self._judge(state)
        return state

    def legal_mask(self, state: ChessState) -> np.ndarray:
        mask = np.zeros(NUM_ACTIONS, dtype=np.bool_)
        if not state.done:
            mask[_encode_moves(list(state.board.legal_moves), state.board.turn)] = True
        return mask

    def _judge(self, state: ChessState) -> None:
        """Ends the game where the rules do: python-chess's own outcomes, and the draws a
        player could claim once they hold (a position's third occurrence, 50 moves without a
        capture or a pawn move). python-chess's claim_draw also ends a game one move early,
        where the next move could reach them; AlphaZero's rules do not."""
        board = state.board
        outcome = board.outcome(claim_draw=False)
        if outcome is not None:
            state.done = True
            state.winner = None if outcome.winner is None else (0 if outcome.winner else 1)
            state.result = outcome.termination.name.lower().replace("_", " ")
        elif board.is_repetition(3):
            state.done, state.result = True, "threefold repetition"
        elif board.halfmove_clock >= 100:
            state.done, state.result = True, "fifty moves"
        elif state.plies >= self.max_moves:
            state.done, state.result = True, f"{self.max_moves} moves"

    def simulate(self, states: Sequence[ChessState], actions: np.ndarray, observe: bool = True
                 ) -> tuple[list[ChessState], np.ndarray | None, np.ndarray, np.ndarray,
                            np.ndarray]:
        """One move in each position (the two-player contract's batched rules): the new
        states, observations [B, 119, 8, 8] (None unless ``observe``), movers' rewards, game
        ends and legal masks. An illegal move raises IllegalMoveError and changes nothing."""
        actions = np.asarray(actions, dtype=np.int64).reshape(-1)
        if len(actions) != len(states):
            raise ValueError(f"{len(actions)} actions for {len(states)} states")
        moves = []
        for state, action in zip(states, actions.tolist()):
            if state.done:
                raise IllegalMoveError("the game is over; call reset()")
            move = decode_action(action, state.board) if 0 <= action < NUM_ACTIONS else None
            if move is None or not state.board.is_legal(move):
                raise IllegalMoveError(f"illegal move {action} in {state.board.fen()}")
            moves.append(move)
        new_states, rewards = [], np.zeros(len(states))
        for i, (state, move) in enumerate(zip(states, moves)):
            mover = state.to_play
            board = state.board.copy(stack=state.board.halfmove_clock)
            board.push(move)
            planes = np.empty_like(state.planes)
            planes[0] = _position_planes(board)
            planes[1:] = state.planes[:-1]
            new = ChessState(board, planes, state.plies + 1)
            self._judge(new)
            rewards[i] = 1.0 if new.winner == mover else 0.0
            new_states.append(new)
        done = np.array([s.done for s in new_states])
        masks = np.stack([self.legal_mask(s) for s in new_states])
        observations = np.stack([self.observe(s) for s in new_states]) if observe else None
        return new_states, observations, rewards, done, masks

    def proven_values(self, states: Sequence[ChessState]) -> np.ndarray:
        """For each position, 1.0 when the player to move has a mate in one (python-chess's
        rules, only the moves that can give check tried), else NaN (not known): the
        true-simulator search's values there."""
        return np.array([1.0 if not s.done and _mates_in_one(s.board) else np.nan
                         for s in states])

    # ---- observations ------------------------------------------------------------------------

    def observe(self, state: ChessState) -> np.ndarray:
        board = state.board
        white = board.turn == chess.WHITE
        history = state.planes.astype(np.float32)  # [8, 14, 8, 8], White's side, rank 1 first
        if not white:  # the mover's pieces first, the board flipped so they play upwards
            history = history[:, [6, 7, 8, 9, 10, 11, 0, 1, 2, 3, 4, 5, 12, 13]][:, :, ::-1]
        history = history[:, :, ::-1]  # rank 8 on top, as a board is drawn
        out = np.empty((NUM_PLANES, 8, 8), dtype=np.float32)
        out[:HISTORY * PLANES_PER_POSITION] = history.reshape(-1, 8, 8)
        mover, opponent = board.turn, not board.turn
        out[-7] = 1.0 if white else 0.0
        out[-6] = board.ply() / MAX_MOVES
        out[-5] = board.has_kingside_castling_rights(mover)
        out[-4] = board.has_queenside_castling_rights(mover)
        out[-3] = board.has_kingside_castling_rights(opponent)
        out[-2] = board.has_queenside_castling_rights(opponent)
        out[-1] = board.halfmove_clock / 100.0
        return out

    # ---- Gymnasium API -------------------------------------------------------------------------

    def start_state(self, options: dict | None) -> ChessState:
        fen = (options or {}).get("fen")
        try:
            return self.initial_state(fen)
        except ValueError as e:
            raise ValueError(f"bad FEN {fen!r}: {e}") from None

    # ---- notation ------------------------------------------------------------------------------

    def uci_of_action(self, action: int) -> str:
        move = decode_action(action, self.state.board)
        return "0000" if move is None else move.uci()

    def action_of_uci(self, uci: str) -> int | None:
        """The action of a UCI move in the current position, None if it is not legal."""
        try:
            move = chess.Move.from_uci(uci)
        except ValueError:
            return None
        if not self.state.board.is_legal(move):
            return None
        return encode_move(move, self.state.board.turn)

    def san_of_action(self, action: int) -> str:
        move = decode_action(action, self.state.board)
        return "?" if move is None else self.state.board.san(move)

    def action_of_san(self, san: str) -> int | None:
        try:
            move = self.state.board.parse_san(san)
        except ValueError:
            return None
        return encode_move(move, self.state.board.turn)

    def board_text(self, state: ChessState) -> str:
        board = state.board
        lines = [str(board), "a b c d e f g h"]
        if board.move_stack:
            last = board.copy()
            move = last.pop()
            lines.append(f"last move {last.san(move)}")
        if state.done:
            outcome = {None: "draw", 0: "White wins", 1: "Black wins"}[state.winner]
            lines.append(f"{outcome} ({state.result})")
        else:
            lines.append(f"{'White' if board.turn == chess.WHITE else 'Black'} to move")
        return "\n".join(lines)
