"""Two-player matches between an agent and an opponent, played as one batch.

:func:`play_matches` runs ``num_games`` games at once on separate envs: the agent takes the first
seat in half of them and the second seat in the other half, plays greedily (no noise, most
visited action) with one batched search over every game where it is to move, and the opponent
(see :mod:`muzero_gym.envs.opponents`) answers in the others. A game's winner is the mover of a
positive reward (the contract of :mod:`muzero_gym.envs.board`); 0 at the end is a draw. Where
the env says how a game ended (``info["result"]``: checkmate, perpetual check, the move limit),
the result counts the games won, drawn and lost of each way.

A greedy agent against a deterministic opponent plays the same game over and over, so a match
can start each game after ``opening_plies`` uniformly random legal moves (both sides): games come
in pairs that share an opening with the seats swapped, as engine matches use opening books, and
no opening is played twice while unplayed ones remain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import gymnasium as gym
import numpy as np

from muzero_gym.environment import make_env
from muzero_gym.progress import Progress
from muzero_gym.stops import deferred_stops

if TYPE_CHECKING:
    from muzero_gym.agents.muzero import MuZeroAgent


class Opponent(Protocol):
    def choose(self, env: gym.Env, legal_mask: np.ndarray) -> int: ...


@dataclass
class MatchResult:
    """Counts of won, drawn and lost games per seat of the agent (index 0: it moved first),
    and, for games whose env says how each ended (``info["result"]`` at the end: "checkmate",
    "512 moves", ...), the won, drawn and lost games of each way of ending."""

    wins: list[int] = field(default_factory=lambda: [0, 0])
    draws: list[int] = field(default_factory=lambda: [0, 0])
    losses: list[int] = field(default_factory=lambda: [0, 0])
    endings: dict[str, list[int]] = field(default_factory=dict)

    def add(self, seat: int, outcome: int, ending: str = "") -> None:
        """Counts one game of the agent in ``seat``: ``outcome`` 1 won, 0 drawn, -1 lost."""
        counts = {1: self.wins, 0: self.draws, -1: self.losses}[outcome]
        counts[seat] += 1
        if ending:
            self.endings.setdefault(ending, [0, 0, 0])[1 - outcome] += 1

    @property
    def games(self) -> int:
        return sum(self.wins) + sum(self.draws) + sum(self.losses)

    def rate(self, counts: list[int]) -> float:
        return sum(counts) / max(self.games, 1)

    @property
    def win_rate(self) -> float:
        return self.rate(self.wins)

    @property
    def draw_rate(self) -> float:
        return self.rate(self.draws)

    @property
    def loss_rate(self) -> float:
        return self.rate(self.losses)

    def summary(self) -> str:
        text = (f"{self.games} games: won {sum(self.wins)}, drawn {sum(self.draws)}, lost "
                f"{sum(self.losses)} (as first: {self.wins[0]}/{self.draws[0]}/{self.losses[0]}, "
                f"as second: {self.wins[1]}/{self.draws[1]}/{self.losses[1]})")
        if self.endings:
            text += "; ended by (won/drawn/lost): " + ", ".join(
                f"{ending} {'/'.join(map(str, counts))}"
                for ending, counts in sorted(self.endings.items(), key=lambda e: -sum(e[1])))
        return text


def random_openings(env: gym.Env, count: int, plies: int, rng: np.random.Generator
                    ) -> list[list[int]]:
    """``count`` different sequences of ``plies`` uniformly random legal moves
    (``info["action_mask"]``) that do not end the game, drawn by playing them on ``env``.

    Openings are drawn without repeats, so a match covers as many positions as it can: where
    the game has fewer such openings than ``count`` (Connect Four has 49 of 2 plies), every one
    found is used and the list starts over in the same order."""
    openings: list[list[int]] = []
    seen: set[tuple[int, ...]] = set()
    for _ in range(50 * count):
        if len(openings) == count:
            break
        _, info = env.reset(seed=int(rng.integers(2**31)))
        moves: list[int] = []
        while len(moves) < plies:
            action = int(rng.choice(np.flatnonzero(info["action_mask"])))
            _, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
            moves.append(action)
        if len(moves) == plies and tuple(moves) not in seen:
            seen.add(tuple(moves))
            openings.append(moves)
    if not openings:
        raise ValueError(f"could not find openings of {plies} plies that do not end the game")
    return [openings[i % len(openings)] for i in range(count)]


def play_matches(agent: MuZeroAgent, opponent: Opponent, num_games: int,
                 seed: int | None = None, agent_seats: tuple[int, ...] = (0, 1),
                 progress: bool = False, opening_plies: int = 0) -> MatchResult:
    """Plays ``num_games`` games; game ``i`` gives the agent seat ``agent_seats[i % len]`` and
    starts after the random opening ``i // len(agent_seats)`` of ``opening_plies`` moves."""
    if agent.config.env.num_players != 2:
        raise ValueError("matches need a two-player env (env.num_players = 2)")
    if num_games < 1:
        raise ValueError(f"num_games = {num_games}: must be >= 1")
    if opening_plies < 0:
        raise ValueError(f"opening_plies = {opening_plies}: must be >= 0")
    envs = [make_env(agent.config.env) for _ in range(num_games)]
    seats = np.array([agent_seats[i % len(agent_seats)] for i in range(num_games)])
    openings = [[] for _ in range(num_games)]
    if opening_plies:
        count = -(-num_games // len(agent_seats))
        drawn = random_openings(envs[0], count, opening_plies, np.random.default_rng(seed))
        openings = [drawn[i // len(agent_seats)] for i in range(num_games)]
    result = MatchResult()
    bar = Progress(num_games, "games", enabled=progress)
    try:
        games = []
        for i, env in enumerate(envs):
            observation, info = env.reset(seed=None if seed is None else seed + i)
            game = agent.new_game()
            game.start(observation, info)
            for action in openings[i]:
                observation, reward, terminated, truncated, info = env.step(action)
                game.record_step(action, float(reward), observation, terminated, truncated, info)
            games.append(game)
        active = np.ones(num_games, dtype=np.bool_)
        while active.any():
            with deferred_stops():  # a stop signal waits for the round of moves to end
                _play_round(agent, opponent, games, envs, seats, active, result, bar)
    finally:
        bar.close()
        for env in envs:
            env.close()
    return result


def _play_round(agent: MuZeroAgent, opponent: Opponent, games: list, envs: list,
                seats: np.ndarray, active: np.ndarray, result: MatchResult,
                bar: Progress) -> None:
    """One move in every game still on: the agent's in one batched search, the opponent's one
    by one; a finished game goes into ``result`` and leaves ``active``."""
    actions = np.zeros(len(games), dtype=np.int64)
    to_play = np.array([g.to_play() for g in games])
    mine = np.flatnonzero(active & (to_play == seats))
    if mine.size:
        searched = agent.search_games([games[i] for i in mine], [envs[i] for i in mine])
        actions[mine] = searched.greedy_actions()
    for i in np.flatnonzero(active & (to_play != seats)):
        actions[i] = opponent.choose(envs[i], games[i].legal_action_mask())
    for i in np.flatnonzero(active):
        mover = int(to_play[i])
        observation, reward, terminated, truncated, info = envs[i].step(int(actions[i]))
        games[i].record_step(int(actions[i]), float(reward), observation, terminated,
                             truncated, info)
        if terminated or truncated:
            active[i] = False
            seat = int(seats[i])
            outcome = 0 if reward == 0 else (1 if (reward > 0) == (mover == seat) else -1)
            result.add(seat, outcome, info.get("result", ""))
            bar.update(result.games, won=sum(result.wins), lost=sum(result.losses))
