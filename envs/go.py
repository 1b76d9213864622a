"""Go on a 9 x 9, 13 x 13 or 19 x 19 board, as AlphaZero and MuZero play it.

Rules: stones without liberties are captured; suicide is illegal; positional superko (no move
may repeat a whole-board position of the game, whoever is to move); the game ends after two
passes in a row, or after ``max_moves`` moves (2 N^2: 722 on 19 x 19, as in the MuZero
pseudocode), and is scored by area (stones plus empty regions that border one colour only) with
komi 7.5 for White. Resigning is the player's business (a search value below a threshold), not
an action here.

Actions: ``row * N + col`` puts a stone (row 0 is the top line, ``N`` in Go coordinates; column
0 is ``A``), ``N * N`` passes. The reward of the move that ends the game is +1 if its player
won, -1 if they lost (0 on a draw, which komi 7.5 rules out); every other move gets 0.

Observation (AlphaGo Zero's planes, from the perspective of the player to move): for each of
the last 8 positions, newest first, a plane of the mover's stones and one of the opponent's
(zeros before the game started), then a plane of ones when Black is to move: [17, N, N].

The rules are written for a batch of positions and compiled with numba (flood fills for
groups, liberties and territory, Zobrist hashes for superko), so one call plays a move in each
of the many positions a search expands (:meth:`GoEnv.simulate`). ``symmetries()`` gives the
board's seven rotations and reflections for data augmentation; ``vertex``/``action`` convert
to Go coordinates (``D4``, ``pass``) as GTP and the terminal display use them.
``proven_values`` tells the true-simulator search which positions are won outright: after the
opponent's pass, a count that favours the player to move (their pass ends the game).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from gymnasium import spaces
from numba import njit

from muzero_gym.envs.board import IllegalMoveError, LegalMoves, TurnGameEnv
from muzero_gym.symmetry import Symmetry

EMPTY, BLACK, WHITE = 0, 1, 2
KOMI = 7.5
HISTORY = 8
COLUMNS = "ABCDEFGHJKLMNOPQRSTUVWXYZ"  # Go skips I


@functools.cache
def neighbour_table(size: int) -> np.ndarray:
    """[N*N, 4] the points next to each point (-1 beyond the edge)."""
    table = np.full((size * size, 4), -1, dtype=np.int64)
    for r in range(size):
        for c in range(size):
            for k, (dr, dc) in enumerate(((-1, 0), (1, 0), (0, -1), (0, 1))):
                rr, cc = r + dr, c + dc
                if 0 <= rr < size and 0 <= cc < size:
                    table[r * size + c, k] = rr * size + cc
    return table


@functools.cache
def zobrist_table(size: int) -> np.ndarray:
    """[N*N, 3] random 64-bit keys per point and colour (a fixed seed: the same in every
    process, so hashes can be compared and saved)."""
    rng = np.random.default_rng(20_191_119 + size)
    return rng.integers(1, 2**63 - 1, size=(size * size, 3), dtype=np.int64).astype(np.uint64)


@njit(cache=True)
def _group(board, start, neighbours, stones, stamp, mark):
    """Stones of the group at ``start`` (into ``stones``) and its liberty count."""
    color = board[start]
    mark[start] = stamp
    stones[0] = start
    count, head, liberties = 1, 0, 0
    while head < count:
        p = stones[head]
        head += 1
        for k in range(4):
            q = neighbours[p, k]
            if q < 0 or mark[q] == stamp:
                continue
            if board[q] == color:
                mark[q] = stamp
                stones[count] = q
                count += 1
            elif board[q] == 0:
                mark[q] = stamp  # counted once
                liberties += 1
    return count, liberties


@njit(cache=True)
def _place(board, point, color, neighbours, zobrist, position_hash, stones, mark, stamp):
    """Plays ``color`` at ``point`` on ``board`` in place: captures, then the suicide check.
    Returns (legal, new hash, next stamp); an illegal move leaves ``board`` changed."""
    if board[point] != 0:
        return False, position_hash, stamp
    opponent = 3 - color
    board[point] = color
    position_hash ^= zobrist[point, color]
    for k in range(4):
        q = neighbours[point, k]
        if q < 0 or board[q] != opponent:
            continue
        stamp += 1
        count, liberties = _group(board, q, neighbours, stones, stamp, mark)
        if liberties == 0:
            for i in range(count):
                s = stones[i]
                board[s] = 0
                position_hash ^= zobrist[s, opponent]
    stamp += 1
    _, liberties = _group(board, point, neighbours, stones, stamp, mark)
    return liberties > 0, position_hash, stamp


@njit(cache=True)
def _seen(history, start, end, value):
    """Whether ``value`` is in the sorted ``history[start:end]``."""
    lo, hi = start, end
    while lo < hi:
        mid = (lo + hi) // 2
        if history[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo < end and history[lo] == value


@njit(cache=True)
def _legal_masks(boards, colors, hashes, history, offsets, neighbours, zobrist):
    """[B, N*N + 1] legal moves (pass always) of boards [B, N*N] with ``colors`` [B] to move;
    ``history[offsets[b]:offsets[b + 1]]`` are the sorted hashes of game b's positions."""
    batch, points = boards.shape
    out = np.zeros((batch, points + 1), dtype=np.bool_)
    scratch = np.empty(points, dtype=np.int8)
    stones = np.empty(points, dtype=np.int64)
    mark = np.zeros(points, dtype=np.int64)
    stamp = 0
    for b in range(batch):
        out[b, points] = True
        for p in range(points):
            if boards[b, p] != 0:
                continue
            scratch[:] = boards[b]
            legal, new_hash, stamp = _place(scratch, p, colors[b], neighbours, zobrist,
                                            hashes[b], stones, mark, stamp)
            if legal and not _seen(history, offsets[b], offsets[b + 1], new_hash):
                out[b, p] = True
    return out


@njit(cache=True)
def _play(boards, colors, moves, hashes, neighbours, zobrist):
    """Plays moves [B] (stone points; the caller handles passes) in place; returns the new
    hashes [B] and whether each was legal before superko [B]."""
    batch, points = boards.shape
    stones = np.empty(points, dtype=np.int64)
    mark = np.zeros(points, dtype=np.int64)
    stamp = 0
    new_hashes = hashes.copy()
    legal = np.zeros(batch, dtype=np.bool_)
    for b in range(batch):
        ok, h, stamp = _place(boards[b], moves[b], colors[b], neighbours, zobrist, hashes[b],
                              stones, mark, stamp)
        legal[b] = ok
        new_hashes[b] = h
    return new_hashes, legal


@njit(cache=True)
def _area_scores(boards, neighbours):
    """[B] Black's area minus White's: stones, plus empty regions that reach one colour only."""
    batch, points = boards.shape
    out = np.zeros(batch)
    stack = np.empty(points, dtype=np.int64)
    seen = np.zeros(points, dtype=np.int64)
    stamp = 0
    for b in range(batch):
        stamp += 1
        score = 0.0
        for p in range(points):
            if boards[b, p] == 1:
                score += 1.0
            elif boards[b, p] == 2:
                score -= 1.0
            elif seen[p] != stamp:  # a new empty region: flood it
                seen[p] = stamp
                stack[0] = p
                count, head, reaches = 1, 0, 0
                while head < count:
                    r = stack[head]
                    head += 1
                    for k in range(4):
                        q = neighbours[r, k]
                        if q < 0:
                            continue
                        if boards[b, q] == 0:
                            if seen[q] != stamp:
                                seen[q] = stamp
                                stack[count] = q
                                count += 1
                        else:
                            reaches |= boards[b, q]  # 1 black, 2 white, 3 both
                if reaches == 1:
                    score += count
                elif reaches == 2:
                    score -= count
        out[b] = score
    return out


def _winner(score: float) -> int | None:
    """The winner of a game scored ``score`` (Black's area - White's - komi): 0 Black, 1 White,
    None on a draw."""
    return None if score == 0 else (0 if score > 0 else 1)


@dataclass
class GoState:
    """A whole game: the last 8 boards (``boards[0]`` is the position now), the player to
    move (0 Black, 1 White), passes in a row, moves played, the position's hash and the sorted
    hashes of every position so far (superko), the moves themselves, and the result."""

    boards: np.ndarray  # [8, N, N] int8
    to_play: int = 0
    passes: int = 0
    num_moves: int = 0
    position_hash: int = 0
    history: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.uint64))
    moves: tuple = ()
    done: bool = False
    winner: int | None = None  # 0 Black, 1 White, None while playing or on a draw
    score: float = 0.0  # Black's area - White's area - komi, once over

    @property
    def board(self) -> np.ndarray:
        return self.boards[0]

    @property
    def result(self) -> str:
        """How the game ended ("two passes" or the move limit, "722 moves"); "" while on."""
        if not self.done:
            return ""
        return "two passes" if self.passes >= 2 else f"{self.num_moves} moves"

    def copy(self) -> GoState:
        return GoState(self.boards.copy(), self.to_play, self.passes, self.num_moves,
                       self.position_hash, self.history.copy(), self.moves, self.done,
                       self.winner, self.score)


class GoEnv(TurnGameEnv):
    """``muzero_gym/Go-v0`` (see module doc); ``size`` 9, 13 or 19, ``komi``, ``max_moves``
    (default 2 N^2)."""

    def __init__(self, size: int = 9, komi: float = KOMI, max_moves: int | None = None,
                 render_mode: str | None = None):
        if size not in (9, 13, 19):
            raise ValueError(f"size = {size}: Go is played here on 9, 13 or 19 lines")
        self.size, self.komi = size, float(komi)
        self.max_moves = 2 * size * size if max_moves is None else int(max_moves)
        super().__init__(render_mode)
        self.num_points = size * size
        self.pass_action = self.num_points
        self.observation_space = spaces.Box(0, 1, (2 * HISTORY + 1, size, size), dtype=np.bool_)
        self.action_space = LegalMoves(self.num_points + 1,
                                       lambda: self.legal_mask(self.state))
        self._neighbours = neighbour_table(size)
        self._zobrist = zobrist_table(size)
        self.state = self.initial_state()

    # ---- rules -----------------------------------------------------------------------------

    def initial_state(self) -> GoState:
        return GoState(np.zeros((HISTORY, self.size, self.size), dtype=np.int8))

    def legal_masks_of(self, states: Sequence[GoState]) -> np.ndarray:
        """[B, N*N + 1] legal moves of each position (none once a game is over)."""
        if not states:
            return np.zeros((0, self.num_points + 1), dtype=np.bool_)
        boards = np.stack([s.boards[0].reshape(-1) for s in states])
        colors = np.array([s.to_play + 1 for s in states], dtype=np.int8)
        hashes = np.array([s.position_hash for s in states], dtype=np.uint64)
        offsets = np.zeros(len(states) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(s.history) for s in states])
        history = np.concatenate([s.history for s in states])
        masks = _legal_masks(boards, colors, hashes, history, offsets, self._neighbours,
                             self._zobrist)
        masks[[s.done for s in states]] = False
        return masks

    def legal_mask(self, state: GoState) -> np.ndarray:
        return self.legal_masks_of([state])[0]

    def simulate(self, states: Sequence[GoState], actions: np.ndarray, observe: bool = True
                 ) -> tuple[list[GoState], np.ndarray | None, np.ndarray, np.ndarray,
                            np.ndarray]:
        """One move in each of many positions (the batched rules of the two-player contract):
        returns the new states, their observations [B, 17, N, N] (None unless ``observe``),
        the movers' rewards [B], whether each game is over [B] and the new legal masks. An
        illegal move anywhere raises IllegalMoveError and changes nothing."""
        batch = len(states)
        actions = np.asarray(actions, dtype=np.int64).reshape(-1)
        if len(actions) != batch:
            raise ValueError(f"{len(actions)} actions for {batch} states")
        if any(s.done for s in states):
            raise IllegalMoveError("the game is over; call reset()")
        legal = self.legal_masks_of(states)
        in_range = (actions >= 0) & (actions <= self.num_points)
        ok = in_range & legal[np.arange(batch), np.where(in_range, actions, 0)]
        if not ok.all():
            bad = int(np.flatnonzero(~ok)[0])
            raise IllegalMoveError(f"illegal move {self.vertex(int(actions[bad]))} "
                                   f"({int(actions[bad])})")
        boards = np.stack([s.boards[0].reshape(-1) for s in states])
        colors = np.array([s.to_play + 1 for s in states], dtype=np.int8)
        hashes = np.array([s.position_hash for s in states], dtype=np.uint64)
        stone = actions < self.num_points
        new_hashes = hashes.copy()
        if stone.any():
            rows = np.flatnonzero(stone)
            played = boards[rows]
            new_hashes[rows], _ = _play(played, colors[rows], actions[rows], hashes[rows],
                                        self._neighbours, self._zobrist)
            boards[rows] = played
        new_states = []
        for i, state in enumerate(states):
            passes = 0 if stone[i] else state.passes + 1
            history = state.history
            if stone[i]:
                h = new_hashes[i]
                history = np.insert(history, np.searchsorted(history, h), h)
            new_boards = np.empty_like(state.boards)
            new_boards[0] = boards[i].reshape(self.size, self.size)
            new_boards[1:] = state.boards[:-1]
            new_states.append(GoState(new_boards, 1 - state.to_play, passes,
                                      state.num_moves + 1, int(new_hashes[i]), history,
                                      state.moves + (int(actions[i]),)))
        done = np.array([s.passes >= 2 or s.num_moves >= self.max_moves for s in new_states])
        rewards = np.zeros(batch)
        if done.any():
            rows = np.flatnonzero(done)
            scores = self._scores(boards[rows])
            for row, score in zip(rows.tolist(), scores.tolist()):
                s = new_states[row]
                s.done, s.score, s.winner = True, score, _winner(score)
                mover = states[row].to_play
                rewards[row] = 0.0 if s.winner is None else (1.0 if s.winner == mover else -1.0)
        masks = self.legal_masks_of(new_states)
        observations = self.observe_many(new_states) if observe else None
        return new_states, observations, rewards, done, masks

    def proven_values(self, states: Sequence[GoState]) -> np.ndarray:
        """For each position, 1.0 where the opponent has just passed and the board as it stands
        wins for the player to move (their pass ends the game, scored as it stands), else NaN
        (not known): the true-simulator search's values there, so a pass that hands the
        opponent a won count looks lost at its first visit."""
        out = np.full(len(states), np.nan)
        rows = [i for i, s in enumerate(states) if s.passes == 1 and not s.done]
        if rows:
            scores = self._scores(np.stack([states[i].board.reshape(-1) for i in rows]))
            for i, score in zip(rows, scores.tolist()):
                if _winner(score) == states[i].to_play:
                    out[i] = 1.0
        return out

    def final_score(self, state: GoState) -> float:
        """Black's area minus White's minus komi, of the position as it stands."""
        return float(self._scores(state.board.reshape(1, -1))[0])

    def _scores(self, boards: np.ndarray) -> np.ndarray:
        """Black's area minus White's minus komi of each flat board [B, N * N]."""
        return _area_scores(boards, self._neighbours) - self.komi

    # ---- observations ------------------------------------------------------------------------

    def observe_many(self, states: Sequence[GoState]) -> np.ndarray:
        """[B, 17, N, N] bool planes (see module doc)."""
        boards = np.stack([s.boards for s in states])  # [B, 8, N, N]
        mover = np.array([s.to_play + 1 for s in states], dtype=np.int8)[:, None, None, None]
        out = np.empty((len(states), 2 * HISTORY + 1, self.size, self.size), dtype=np.bool_)
        out[:, 0:2 * HISTORY:2] = boards == mover
        out[:, 1:2 * HISTORY:2] = (boards != EMPTY) & (boards != mover)
        out[:, -1] = (mover[:, 0] == BLACK)
        return out

    def observe(self, state: GoState) -> np.ndarray:
        return self.observe_many([state])[0]

    # ---- Gymnasium API -------------------------------------------------------------------------


    def symmetries(self) -> list[Symmetry]:
        """The seven rotations and reflections of the board other than the identity (the pass
        maps to itself)."""
        points = np.arange(self.num_points).reshape(self.size, self.size)
        out = []
        for turns in range(4):
            for flip in (False, True):
                if turns == 0 and not flip:
                    continue
                transform = functools.partial(_board_symmetry, turns=turns, flip=flip)
                source = transform(points).reshape(-1)
                permutation = np.append(np.argsort(source), self.pass_action)
                name = f"rotate {90 * turns}" + (" and mirror" if flip else "")
                out.append(Symmetry(name, transform, permutation))
        return out

    # ---- Go coordinates ------------------------------------------------------------------------

    def vertex(self, action: int) -> str:
        """``D4``-style coordinates of an action (``pass`` for the pass)."""
        if action == self.pass_action:
            return "pass"
        row, col = divmod(int(action), self.size)
        return f"{COLUMNS[col]}{self.size - row}"

    def action(self, vertex: str) -> int:
        """The action of ``D4``-style coordinates or ``pass`` (case-insensitive); ValueError
        for anything else."""
        text = vertex.strip().upper()
        if text == "PASS":
            return self.pass_action
        if len(text) < 2 or text[0] not in COLUMNS[:self.size] or not text[1:].isdigit():
            raise ValueError(f"{vertex!r} is not a point of a {self.size}x{self.size} board")
        col, number = COLUMNS.index(text[0]), int(text[1:])
        if not 1 <= number <= self.size:
            raise ValueError(f"{vertex!r} is not a point of a {self.size}x{self.size} board")
        return (self.size - number) * self.size + col

    def board_text(self, state: GoState) -> str:
        """The board with Go coordinates (X Black, O White), then whose move it is or the
        result."""
        marks = {EMPTY: ".", BLACK: "X", WHITE: "O"}
        width = len(str(self.size))
        header = " " * (width + 1) + " ".join(COLUMNS[:self.size])
        lines = [header]
        for r in range(self.size):
            label = str(self.size - r).rjust(width)
            lines.append(f"{label} " + " ".join(marks[int(v)] for v in state.board[r]))
        lines.append(header)
        if state.done:
            if state.winner is None:
                lines.append("draw")
            else:
                lines.append(f"{'Black' if state.winner == 0 else 'White'} wins by "
                             f"{abs(state.score):g}")
        else:
            last = self.vertex(state.moves[-1]) if state.moves else "-"
            lines.append(f"{'Black (X)' if state.to_play == 0 else 'White (O)'} to move; last "
                         f"move {last}")
        return "\n".join(lines)


def _board_symmetry(observations: np.ndarray, turns: int, flip: bool) -> np.ndarray:
    """Rotates the trailing [H, W] axes by ``turns`` quarter turns, then mirrors left-right."""
    out = np.rot90(observations, turns, axes=(-2, -1))
    return out[..., ::-1] if flip else out
