"""Segments: what self-play hands to the replay while a game is still running.

A game is sent in pieces of ``replay.segment_length`` positions, so that learning can start
whatever the length of the games (an Atari game may last 27,000 moves). A :class:`Segment`
carries the positions ``start .. end - 1`` of one game (``source_id``): for each position its
encoded observation, legal moves, player to move, root search value, policy target, the action
taken and its reward. It also carries up to ``context`` positions before ``start`` (the
observations a frame stack of ``start`` needs, and what a replay that lost the game's earlier
segments needs to start it afresh); a replay that already holds them ignores them. The game's
last segment also carries its final state (:class:`FinalState`): the observation after the last
action, how the game ended, and for a truncated game the value its targets bootstrap from.

:func:`cut_segment` cuts a segment from a :class:`~muzero_gym.game.Game`; a game stored whole is
one final segment with ``start = 0``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from muzero_gym.game import Game


@dataclass
class FinalState:
    """How a game ended: its final state and, after a truncation, the value to bootstrap from
    (None: the last position's search value)."""

    observation: np.ndarray  # encoded observation of the final state
    legal_mask: np.ndarray  # [A] bool
    to_play: int
    terminated: bool
    truncated: bool
    value: float | None = None


@dataclass
class Segment:
    """Positions ``first .. end - 1`` of game ``source_id``, of which ``start .. end - 1`` are
    new (see module doc). Arrays have one row per position."""

    source_id: int
    first: int
    start: int
    observations: np.ndarray  # [m, *shape] encoded observations of states first .. end - 1
    legal_masks: np.ndarray  # [m, A] bool
    to_play: np.ndarray  # [m] int64
    actions: np.ndarray  # [m] int64
    rewards: np.ndarray  # [m] float64
    root_values: np.ndarray  # [m] float64
    policies: np.ndarray  # [m, A] float32
    final: FinalState | None = None

    @property
    def end(self) -> int:
        return self.first + self.actions.shape[0]

    @property
    def num_new(self) -> int:
        """New positions (``end - start``)."""
        return self.end - self.start

    def __post_init__(self) -> None:
        count = self.actions.shape[0]
        if not self.first <= self.start <= self.first + count:
            raise ValueError(f"segment of positions {self.first}..{self.first + count - 1} "
                             f"cannot start its new positions at {self.start}")
        for name in ("observations", "legal_masks", "to_play", "rewards", "root_values",
                     "policies"):
            if getattr(self, name).shape[0] != count:
                raise ValueError(f"segment has {count} actions but {getattr(self, name).shape[0]}"
                                 f" {name}")


def cut_segment(game: Game, source_id: int, start: int, context: int,
                final: bool = False) -> Segment:
    """Positions ``start .. len(game) - 1`` of ``game`` (and up to ``context`` held positions
    before them) as a segment; with ``final`` the game must be over and its final state is
    included."""
    end = len(game)
    first = max(game.base, start - context)
    if start < game.base or start > end:
        raise ValueError(f"cannot cut positions from {start}: the game holds {game.base}.."
                         f"{end - 1}")
    if len(game.root_values) != len(game.actions):
        raise RuntimeError(f"{len(game.actions)} actions but {len(game.root_values)} searches "
                           "stored: call store_search_statistics before each action")
    lo, hi = first - game.base, end - game.base
    num_actions = game.num_actions
    segment = Segment(
        source_id=source_id, first=first, start=start,
        observations=_stack(game.observations[lo:hi], game.encoder.shape, game.encoder.dtype),
        legal_masks=_stack(game.legal_masks[lo:hi], (num_actions,), np.bool_),
        to_play=np.asarray(game.to_play_history[lo:hi], dtype=np.int64),
        actions=np.asarray(game.actions[lo:hi], dtype=np.int64),
        rewards=np.asarray(game.rewards[lo:hi], dtype=np.float64),
        root_values=np.asarray(game.root_values[lo:hi], dtype=np.float64),
        policies=_stack(game.child_visits[lo:hi], (num_actions,), np.float32))
    if final:
        if not game.done:
            raise ValueError("only a finished game has a final segment")
        segment.final = FinalState(game.observations[-1], game.legal_masks[-1],
                                   game.to_play_history[-1], game.terminated, game.truncated,
                                   game.final_value)
    return segment


def _stack(values: list, shape: tuple[int, ...], dtype) -> np.ndarray:
    if not values:
        return np.zeros((0, *shape), dtype=dtype)
    return np.stack(values).astype(dtype, copy=False)
