"""Opponents for evaluating two-player agents: random, exhaustive minimax and depth-limited
alpha-beta.

Every opponent has ``choose(env, legal_mask) -> action`` for the env's current position.
:class:`RandomOpponent` works with any env; the searching opponents need a
:class:`~muzero_gym.envs.board.BoardGameEnv` (its batched ``simulate`` rules, which expand all
moves of a position in one call, and its ``heuristic``). Values are from the perspective of the
player to move: +1 win, -1 loss, 0 draw; a win sooner is worth a little more than a win later,
so the searchers do not dawdle.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from muzero_gym.envs.board import BoardGameEnv, BoardState

WIN = 1.0
PLY_PENALTY = 1e-3  # a win k plies later is worth WIN - k * PLY_PENALTY


class RandomOpponent:
    """Plays a uniformly random legal move."""

    name = "random"

    def __init__(self, seed: int | None = None):
        self.rng = np.random.default_rng(seed)

    def choose(self, env: gym.Env, legal_mask: np.ndarray) -> int:
        return int(self.rng.choice(np.flatnonzero(legal_mask)))


def _board_env(env: gym.Env) -> BoardGameEnv:
    inner = env.unwrapped
    if not isinstance(inner, BoardGameEnv):
        raise TypeError(f"the searching opponents play muzero_gym's board games, not "
                        f"{type(inner).__name__}; use the random opponent")
    return inner


class MinimaxOpponent:
    """Exhaustive negamax with a table of exact values: a perfect player for small games such
    as TicTacToe (Connect Four is far too large). Among equally good moves it picks at random."""

    name = "perfect"

    def __init__(self, seed: int | None = None):
        self.rng = np.random.default_rng(seed)
        self._values: dict[tuple[bytes, int], float] = {}

    def value(self, env: BoardGameEnv, state: BoardState) -> float:
        """Exact value of ``state`` for the player to move."""
        key = state.key()
        cached = self._values.get(key)
        if cached is not None:
            return cached
        best = max(self._child_value(env, child, reward)
                   for _, child, reward in _successors(env, state, env.legal_mask(state)))
        self._values[key] = best
        return best

    def _child_value(self, env: BoardGameEnv, child: BoardState, reward: float) -> float:
        if child.done:
            return WIN if reward > 0 else 0.0
        v = -self.value(env, child)
        return v - PLY_PENALTY * np.sign(v)

    def move_values(self, env: gym.Env) -> dict[int, float]:
        """Exact value of every legal move in the env's current position."""
        board_env = _board_env(env)
        state = board_env.get_state()
        return {action: self._child_value(board_env, child, reward) for action, child, reward
                in _successors(board_env, state, board_env.legal_mask(state))}

    def choose(self, env: gym.Env, legal_mask: np.ndarray) -> int:
        values = self.move_values(env)
        best = max(values.values())
        return int(self.rng.choice([a for a, v in values.items() if v >= best - 1e-9]))


class AlphaBetaOpponent:
    """Depth-limited negamax with alpha-beta pruning; leaves are scored by the env's
    ``heuristic`` (in (-1, 1), for the player to move). Moves are tried centre first."""

    name = "alphabeta"

    def __init__(self, depth: int, seed: int | None = None):
        if depth < 1:
            raise ValueError(f"depth = {depth}: must be >= 1")
        self.depth = depth
        self.rng = np.random.default_rng(seed)

    def _negamax(self, env: BoardGameEnv, state: BoardState, depth: int, alpha: float,
                 beta: float) -> float:
        if depth == 0:
            return env.heuristic(state)
        best = -np.inf
        for _, child, reward in _successors(env, state, env.legal_mask(state), centre_first=True):
            score = self._child_score(env, child, reward, depth, alpha, beta)
            best = max(best, score)
            alpha = max(alpha, score)
            if alpha >= beta:
                break
        return best

    def _child_score(self, env, child, reward, depth, alpha, beta) -> float:
        if child.done:
            return WIN if reward > 0 else 0.0
        v = -self._negamax(env, child, depth - 1, -beta, -alpha)
        return v - PLY_PENALTY * np.sign(v)

    def choose(self, env: gym.Env, legal_mask: np.ndarray) -> int:
        board_env = _board_env(env)
        state = board_env.get_state()
        scores = {action: self._child_score(board_env, child, reward, self.depth, -np.inf, np.inf)
                  for action, child, reward in _successors(board_env, state,
                                                           board_env.legal_mask(state),
                                                           centre_first=True)}
        best = max(scores.values())
        return int(self.rng.choice([a for a, v in scores.items() if v >= best - 1e-9]))


def _successors(env: BoardGameEnv, state: BoardState, legal_mask: np.ndarray,
                centre_first: bool = False) -> list[tuple[int, BoardState, float]]:
    """(action, position after it, mover's reward) for every legal move, from one batched call
    of the rules; centre columns first if asked (alpha-beta prunes more after good moves)."""
    actions = _centre_first(legal_mask) if centre_first else np.flatnonzero(legal_mask).tolist()
    children, _, rewards, _, _ = env.simulate([state] * len(actions), np.array(actions),
                                              observe=False)
    return list(zip(actions, children, rewards.tolist()))


def _centre_first(mask: np.ndarray) -> list[int]:
    actions = np.flatnonzero(mask)
    centre = (len(mask) - 1) / 2
    return sorted(actions.tolist(), key=lambda a: abs(a - centre))


OPPONENTS = ("random", "perfect", "alphabeta", "gnugo", "stockfish", "gnushogi")


def make_opponent(name: str, depth: int = 2, seed: int | None = None, level: int = 1,
                  engine_path: str | None = None):
    """``random``, ``perfect`` (:class:`MinimaxOpponent`), ``alphabeta`` of ``depth``, or an
    engine (:mod:`muzero_gym.envs.engines`): ``gnugo`` (Go; ``level`` 1-10), ``stockfish``
    (chess; Skill Level ``level`` 0-20, 1000 nodes a move) or ``gnushogi`` (shogi; search
    depth ``level``), found on PATH or at ``engine_path``."""
    if name == "random":
        return RandomOpponent(seed)
    if name == "perfect":
        return MinimaxOpponent(seed)
    if name == "alphabeta":
        return AlphaBetaOpponent(depth, seed)
    from muzero_gym.envs import engines

    if name == "gnugo":
        return engines.GTPOpponent(level, engine_path, seed)
    if name == "stockfish":
        return engines.UCIOpponent(level, path=engine_path, seed=seed)
    if name == "gnushogi":
        return engines.GnuShogiOpponent(level, engine_path, seed)
    raise ValueError(f"unknown opponent {name!r}: use {', '.join(OPPONENTS)}")
