"""Opponents for evaluating two-player agents: random, exhaustive minimax and depth-limited
alpha-beta.

Every opponent has ``choose(env, legal_mask) -> action`` for the env's current position.
:class:`RandomOpponent` works with any env; the searching opponents need a
:class:`~muzero_gym.envs.board.BoardGameEnv` (its pure ``play``/``legal_mask`` rules and its
``heuristic``). Values are from the perspective of the player to move: +1 win, -1 loss, 0 draw;
a win sooner is worth a little more than a win later, so the searchers do not dawdle.
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
        best = -np.inf
        for action in np.flatnonzero(env.legal_mask(state)):
            best = max(best, self._move_value(env, state, int(action)))
        self._values[key] = best
        return best

    def _move_value(self, env: BoardGameEnv, state: BoardState, action: int) -> float:
        child, reward = env.play(state, action)
        if child.done:
            return WIN if reward > 0 else 0.0
        v = -self.value(env, child)
        return v - PLY_PENALTY * np.sign(v)

    def move_values(self, env: gym.Env) -> dict[int, float]:
        """Exact value of every legal move in the env's current position."""
        board_env = _board_env(env)
        state = board_env.get_state()
        return {int(a): self._move_value(board_env, state, int(a))
                for a in np.flatnonzero(board_env.legal_mask(state))}

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
        for action in _centre_first(env.legal_mask(state)):
            score = self._move_score(env, state, action, depth, alpha, beta)
            best = max(best, score)
            alpha = max(alpha, score)
            if alpha >= beta:
                break
        return best

    def _move_score(self, env, state, action, depth, alpha, beta) -> float:
        child, reward = env.play(state, action)
        if child.done:
            return WIN if reward > 0 else 0.0
        v = -self._negamax(env, child, depth - 1, -beta, -alpha)
        return v - PLY_PENALTY * np.sign(v)

    def choose(self, env: gym.Env, legal_mask: np.ndarray) -> int:
        board_env = _board_env(env)
        state = board_env.get_state()
        scores = {a: self._move_score(board_env, state, a, self.depth, -np.inf, np.inf)
                  for a in _centre_first(board_env.legal_mask(state))}
        best = max(scores.values())
        return int(self.rng.choice([a for a, v in scores.items() if v >= best - 1e-9]))


def _centre_first(mask: np.ndarray) -> list[int]:
    actions = np.flatnonzero(mask)
    centre = (len(mask) - 1) / 2
    return sorted(actions.tolist(), key=lambda a: abs(a - centre))


def make_opponent(name: str, depth: int = 2, seed: int | None = None):
    """``random``, ``perfect`` (:class:`MinimaxOpponent`) or ``alphabeta`` of ``depth``."""
    if name == "random":
        return RandomOpponent(seed)
    if name == "perfect":
        return MinimaxOpponent(seed)
    if name == "alphabeta":
        return AlphaBetaOpponent(depth, seed)
    raise ValueError(f"unknown opponent {name!r}: use random, perfect or alphabeta")
