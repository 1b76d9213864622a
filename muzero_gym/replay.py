"""Replay buffer of games, filled by segments of running games, bounded by transitions, with
prioritized sampling.

Self-play sends each game in segments (:mod:`muzero_gym.segment`); the buffer keeps one record
per game, which grows as the game's segments arrive and is closed by its final segment. Every
position that has its targets is one *sample slot*; slots sit in a ring of ``capacity`` in the
order their positions arrived, and a new slot evicts the position that held it (always the
oldest held position of its game, so a game loses its positions from the front). A record keeps
the observations its held positions need (their frame stacks) and no more, each frame once; a
finished record with no positions left is dropped. Search policies are held as their nonzero
entries and legal masks as bits (a board game's thousands of actions cost a few dozen entries);
policy targets are read from them when a batch is sampled.

Targets of a running game: a game that has received positions ``0 .. P - 1`` is, for its
targets, a game truncated after ``P - 1`` actions whose final state is position ``P - 1``: the
n-step value target of a position whose window reaches past ``P - 1`` bootstraps from the
stored search value of position ``P - 1`` (the last position the buffer has), and positions
``0 .. P - 2`` can be sampled. When the next segment arrives, those targets are recomputed with
the new positions and position ``P - 1`` becomes a sample; once the final segment is in, every
target equals, exactly, that of the same game stored whole.

Sampling picks slots with probability ``priority ** alpha / sum`` (or uniformly) and returns
importance weights ``(N * P) ** -beta`` normalised by the largest weight in the batch, so they lie
in (0, 1]. A position's first priority is ``|search value - n-step value target|`` (MuZero
Reanalyze, Appendix G); :meth:`ReplayBuffer.update_priorities` replaces it after each learner
step. With ``td_steps_age`` (EfficientZero's off-policy correction) a sample's value targets
are computed when it is sampled, with n shortened by its age in learner steps
(:func:`muzero_gym.targets.n_step_window_parts`). The whole buffer, running games and priorities
included, round-trips through
:meth:`ReplayBuffer.state_dict` / :meth:`ReplayBuffer.load_state_dict` and
:meth:`ReplayBuffer.save` / :meth:`ReplayBuffer.load`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from muzero_gym import targets
from muzero_gym.config import ReplayConfig
from muzero_gym.game import Game, ObservationEncoder, stack_observations
from muzero_gym.segment import Segment, cut_segment

STATE_FORMAT = 3  # 3: policies stored sparse, legal masks as bits; 2 and 1 still load


@dataclass
class SearchInputs:
    """Model inputs of the states at [B, K + 1] positions, to search them again (reanalyse)
    or evaluate them with a target network. ``valid`` is False where there is no state."""

    observations: np.ndarray  # [B, K + 1, ...]
    legal_action_mask: np.ndarray  # [B, K + 1, A] bool
    to_play: np.ndarray  # [B, K + 1] int
    valid: np.ndarray  # [B, K + 1] bool

    def columns(self, start: int, stop: int) -> SearchInputs:
        """The inputs of positions ``start .. stop - 1`` of every row."""
        return SearchInputs(*(np.ascontiguousarray(a[:, start:stop]) for a in (
            self.observations, self.legal_action_mask, self.to_play, self.valid)))


@dataclass
class Batch:
    """One training batch of B samples, K unroll steps and A actions (numpy arrays)."""

    observations: np.ndarray  # [B, ...] model input at the sampled positions
    actions: np.ndarray  # [B, K] int64; random actions past the end of a game
    target_value: np.ndarray  # [B, K + 1] n-step value targets from stored search values
    target_reward: np.ndarray  # [B, K + 1]
    target_policy: np.ndarray  # [B, K + 1, A]
    value_mask: np.ndarray  # [B, K + 1] bool
    policy_mask: np.ndarray  # [B, K + 1] bool
    weights: np.ndarray  # [B] importance-sampling weights
    slots: np.ndarray  # [B] ring slots, for update_priorities
    game_ids: np.ndarray  # [B] ids of the sampled games, for update_priorities
    ages: np.ndarray  # [B] learner steps since each sampled position arrived
    td_horizons: np.ndarray  # [B] n of each sample's value targets (td_steps unless corrected)
    reward_sum: np.ndarray  # [B, K + 1] fixed part of the value targets (rewards, own value)
    bootstrap_scale: np.ndarray  # [B, K + 1] factor of the bootstrap value (0 = none)
    # [B, A] bool, the legal moves at the sampled positions (the root policy's softmax is
    # taken over them); None = every action legal
    legal_action_mask: np.ndarray | None = None
    bootstrap: SearchInputs | None = None  # the states value targets bootstrap from
    unrolled: SearchInputs | None = None  # the states at positions index .. index + K (valid
    # up to the episode's final state)

    @property
    def effective_size(self) -> float:
        """Kish's effective sample size of the importance weights, (sum w)^2 / sum w^2: the batch
        size when every weight is equal, near 1 when one sample's weight outweighs the rest."""
        return float(self.weights.sum() ** 2 / np.square(self.weights).sum())


class _Rows:
    """A growable array along its first axis: amortised O(1) appends, O(1) removal of rows
    from the front (the memory is given back when a quarter or less is still used)."""

    __slots__ = ("data", "start", "end")

    def __init__(self, shape: tuple[int, ...], dtype: Any):
        self.data = np.empty((4, *shape), dtype=dtype)
        self.start = self.end = 0

    def __len__(self) -> int:
        return self.end - self.start

    @property
    def view(self) -> np.ndarray:
        return self.data[self.start:self.end]

    def _resize(self, capacity: int) -> None:
        data = np.empty((capacity, *self.data.shape[1:]), dtype=self.data.dtype)
        size = len(self)
        data[:size] = self.view
        self.data, self.start, self.end = data, 0, size

    def extend(self, values: np.ndarray) -> None:
        count = values.shape[0]
        if self.end + count > self.data.shape[0]:
            self._resize(max(4, 2 * (len(self) + count)))
        self.data[self.end:self.end + count] = values
        self.end += count

    def drop_front(self, count: int) -> None:
        self.start += count
        if len(self) * 4 <= self.data.shape[0] and self.data.shape[0] > 4:
            self._resize(max(4, 2 * len(self)))

    def drop_back(self, count: int) -> None:
        self.end -= count

    def shrink(self) -> None:
        """Gives back the room kept for appends (a finished game grows no more)."""
        if self.data.shape[0] > len(self):
            self._resize(max(1, len(self)))

    @property
    def nbytes(self) -> int:
        return self.data.nbytes


class _PolicyRows:
    """Search policies [n, A] as their nonzero entries: per row the actions (``A`` pads) and
    values of up to ``width`` entries, the widest row of the game so far. A search policy has
    one entry per visited (or, with Gumbel targets, legal) move: a few dozen of a board game's
    thousands of actions. Appends and removal as :class:`_Rows`."""

    __slots__ = ("actions", "values", "num_actions")

    def __init__(self, num_actions: int):
        self.num_actions = num_actions
        self.actions = _Rows((0,), np.int32)
        self.values = _Rows((0,), np.float32)

    def __len__(self) -> int:
        return len(self.actions)

    @property
    def width(self) -> int:
        return self.actions.data.shape[1]

    def extend(self, policies: np.ndarray) -> None:
        rows, cols = np.nonzero(policies)
        counts = np.bincount(rows, minlength=len(policies))
        width = max(self.width, int(counts.max(initial=0)))
        if width > self.width:
            self._widen(width)
        slot = np.arange(len(cols)) - np.repeat(np.cumsum(counts) - counts, counts)
        actions = np.full((len(policies), width), self.num_actions, dtype=np.int32)
        values = np.zeros((len(policies), width), dtype=np.float32)
        actions[rows, slot] = cols
        values[rows, slot] = policies[rows, cols]
        self.actions.extend(actions)
        self.values.extend(values)

    def _widen(self, width: int) -> None:
        """Room for ``width`` entries a row: the held rows are padded on the right."""
        pad = ((0, 0), (0, width - self.width))
        actions, values = _Rows((width,), np.int32), _Rows((width,), np.float32)
        actions.extend(np.pad(self.actions.view, pad, constant_values=self.num_actions))
        values.extend(np.pad(self.values.view, pad))
        self.actions, self.values = actions, values

    def dense(self, lo: int, hi: int) -> np.ndarray:
        """Rows ``lo .. hi - 1`` (held-row indices) as [hi - lo, A] float32."""
        return _dense_policies([self], [(lo, hi)], self.num_actions)

    def entries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(entries per row [n], actions, values): the held rows' entries in order."""
        kept = self.actions.view < self.num_actions
        return kept.sum(axis=1), self.actions.view[kept], self.values.view[kept]

    def drop_front(self, count: int) -> None:
        self.actions.drop_front(count)
        self.values.drop_front(count)

    def drop_back(self, count: int) -> None:
        self.actions.drop_back(count)
        self.values.drop_back(count)

    def shrink(self) -> None:
        self.actions.shrink()
        self.values.shrink()

    @property
    def nbytes(self) -> int:
        return self.actions.nbytes + self.values.nbytes


def _dense_policies(policies: list[_PolicyRows], spans: list[tuple[int, int]],
                    num_actions: int) -> np.ndarray:
    """Rows ``lo .. hi - 1`` of each of ``policies`` (with its span), one after another, as
    [sum of the spans, A] float32: one scatter for all of them."""
    total = sum(hi - lo for lo, hi in spans)
    width = max((p.width for p in policies), default=0)
    actions = np.full((total, width), num_actions, dtype=np.int64)
    values = np.zeros((total, width), dtype=np.float32)
    at = 0
    for rows, (lo, hi) in zip(policies, spans):
        count, own = hi - lo, rows.width
        actions[at:at + count, :own] = rows.actions.view[lo:hi]
        values[at:at + count, :own] = rows.values.view[lo:hi]
        at += count
    out = np.zeros((total, num_actions + 1), dtype=np.float32)
    np.put_along_axis(out, actions, values, axis=1)
    return out[:, :num_actions]


class _Record:
    """One game in the buffer (see module doc). Positions and states share indices: position
    i was played in state i. The held rows start at state/position ``base``; targets are kept
    for positions from ``targets_base`` on."""

    def __init__(self, record_id: int, source_id: int, base: int, first_slot: int,
                 replay: ReplayBuffer):
        num_actions = replay.num_actions
        encoder = replay.encoder
        self.record_id = record_id
        self.source_id = source_id
        self.replay = replay
        self.base = base
        self.observations = _Rows(encoder.shape, encoder.dtype)
        self.legal = _Rows(((num_actions + 7) // 8,), np.uint8)  # np.packbits of the masks
        self.to_play = _Rows((), np.int64)
        self.actions = _Rows((), np.int64)
        self.rewards = _Rows((), np.float64)
        self.root_values = _Rows((), np.float64)
        self.policies = _PolicyRows(num_actions)
        self.closed = self.terminated = self.truncated = False
        self.final_value: float | None = None
        self.first_slot = first_slot  # position of slots.view[0]
        self.slots = _Rows((), np.int64)
        self.targets_base = base
        self.values = np.zeros(0)
        self.unroll: targets.UnrollTargets | None = None
        self.reward_sum = self.bootstrap_scale = np.zeros(0)
        self.bootstrap_index = np.zeros(0, dtype=np.int64)
        self.padded_actions = np.zeros(0, dtype=np.int64)

    # ---- shape of the game ----------------------------------------------------------------

    @property
    def num_positions(self) -> int:
        """Positions received (the whole game's count, trimmed ones included)."""
        return self.base + len(self.actions)

    @property
    def target_length(self) -> int:
        """T of the game as its targets see it: the actions of a finished game, one fewer for
        a running game (its last position stands in for the final state)."""
        return self.num_positions if self.closed else max(self.num_positions - 1, 0)

    @property
    def last_state(self) -> int:
        return self.target_length

    @property
    def num_slots(self) -> int:
        return len(self.slots)

    # ---- growing ---------------------------------------------------------------------------

    def append(self, segment: Segment) -> None:
        """Adds the segment's positions from ``num_positions`` on (its context is already
        held) and its final state."""
        skip = self.num_positions - segment.first
        if skip < 0:
            raise ValueError(f"segment of game {segment.source_id} starts at position "
                             f"{segment.start}, but the replay holds up to "
                             f"{self.num_positions - 1}")
        self.observations.extend(segment.observations[skip:])
        self.legal.extend(np.packbits(segment.legal_masks[skip:], axis=-1))
        self.to_play.extend(segment.to_play[skip:])
        self.actions.extend(segment.actions[skip:])
        self.rewards.extend(segment.rewards[skip:])
        self.root_values.extend(segment.root_values[skip:])
        self.policies.extend(segment.policies[skip:])
        final = segment.final
        if final is not None:
            self.observations.extend(np.asarray(final.observation)[None])
            self.legal.extend(np.packbits(np.asarray(final.legal_mask, dtype=np.bool_)[None],
                                          axis=-1))
            self.to_play.extend(np.asarray([final.to_play], dtype=np.int64))
            self.closed, self.terminated = True, bool(final.terminated)
            self.truncated = bool(final.truncated) and not self.terminated
            self.final_value = final.value
            for rows in self._all_rows():
                rows.shrink()

    def close_as_truncated(self) -> None:
        """Ends a running game at its last position, which becomes its final state: the game
        keeps the targets it had while running (its last position's search value is the
        final value) and is never continued."""
        if self.closed or len(self.actions) == 0:
            self.closed = True
            return
        self.final_value = float(self.root_values.view[-1])
        for rows in (self.actions, self.rewards, self.root_values, self.policies):
            rows.drop_back(1)
        self.closed, self.truncated = True, True
        for rows in self._all_rows():
            rows.shrink()

    def _all_rows(self) -> list[_Rows]:
        return [self.observations, self.legal, self.to_play, self.actions, self.rewards,
                self.root_values, self.policies]

    def compute_targets(self) -> None:
        """Targets of every held position under the buffer's target settings."""
        replay = self.replay
        length = self.target_length - self.base  # held positions with targets
        rewards = self.rewards.view[:length]
        if replay.reward_clipping:
            rewards = np.sign(rewards)
        rewards = np.asarray(rewards, dtype=np.float64)
        to_play = self.to_play.view[:length + 1]
        if self.closed:
            state_values = np.append(self.root_values.view, self.final_state_value())
        else:
            state_values = self.root_values.view.astype(np.float64)
        parts = targets.mix_own_values(
            targets.n_step_parts(rewards, to_play, self.terminated, replay.td_steps,
                                 replay.discount), state_values, replay.search_value_mix)
        self.values = targets.n_step_values(parts, state_values)
        k = replay.num_unroll_steps
        # Policy targets are read from the held rows when sampled, not copied here: a copy
        # would hold [T, A] more per game (float64), and be redone for each segment.
        self.unroll = targets.unroll_targets(self.values, rewards, None, self.terminated, 0,
                                             length + k)
        self.reward_sum = np.concatenate([parts.reward_sum, np.zeros(k)])
        self.bootstrap_scale = np.concatenate([parts.bootstrap_scale, np.zeros(k)])
        index = np.where(parts.bootstrap_index >= 0, parts.bootstrap_index + self.base, -1)
        self.bootstrap_index = np.concatenate([index, np.full(k, -1, dtype=np.int64)])
        self.padded_actions = np.concatenate([self.actions.view[:length],
                                              np.full(k, -1, dtype=np.int64)])
        self.targets_base = self.base

    def trim(self, first_slot: int) -> None:
        """Forgets positions before ``first_slot`` (their slots were taken), keeping what the
        held positions' frame stacks need."""
        self.slots.drop_front(first_slot - self.first_slot)
        self.first_slot = first_slot
        keep_from = max(self.base, first_slot - self.replay.num_stacked_observations)
        drop = keep_from - self.base
        if drop <= 0:
            return
        for rows in self._all_rows():
            rows.drop_front(drop)
        self.base = keep_from

    # ---- reading ---------------------------------------------------------------------------

    def images(self, states: np.ndarray) -> np.ndarray:
        """Model inputs of ``states`` [n] (absolute indices)."""
        replay = self.replay
        return stack_observations(self.observations.view, self.actions.view, self.base, states,
                                  replay.encoder, replay.num_stacked_observations,
                                  replay.stack_actions, replay.num_actions)

    def legal_masks(self, states: np.ndarray) -> np.ndarray:
        """Legal-move masks [n, A] of ``states`` [n] (absolute indices)."""
        return _unpack_masks(self.legal.view[states - self.base], self.replay.num_actions)

    def target_window(self, position: int, length: int) -> tuple[np.ndarray, np.ndarray,
                                                                  np.ndarray, int]:
        """What the value targets of the states from ``position`` on read, over ``length``
        actions: rewards [length], players to move [length + 1] and state values [length + 1]
        (those ``compute_targets`` uses; zeros past the game's final state), and the actions
        the targets see from ``position`` to that final state."""
        left = self.target_length - position
        lo = position - self.base
        rewards = np.zeros(length)
        take = max(min(length, left), 0)
        rewards[:take] = self.rewards.view[lo:lo + take]
        if self.replay.reward_clipping:
            rewards = np.sign(rewards)
        states = max(min(length, left) + 1, 0)
        to_play = np.zeros(length + 1, dtype=np.int64)
        to_play[:states] = self.to_play.view[lo:lo + states]
        values = np.zeros(length + 1)
        held = min(states, len(self.root_values) - lo)
        values[:held] = self.root_values.view[lo:lo + held]
        if self.closed and held < states:  # the final state of a finished game
            values[held] = self.final_state_value()
        return rewards, to_play, values, left

    def final_state_value(self) -> float:
        """The value the targets give a finished game's final state: 0 after a termination,
        the bootstrap value after a truncation."""
        if not self.truncated:
            return 0.0
        if self.final_value is not None:
            return self.final_value
        return float(self.root_values.view[-1]) if len(self.root_values) else 0.0

    def initial_priorities(self, positions: np.ndarray) -> np.ndarray:
        local = positions - self.targets_base
        return np.abs(self.root_values.view[positions - self.base] - self.values[local])

    @property
    def nbytes(self) -> int:
        arrays = [self.values, self.reward_sum, self.bootstrap_scale, self.bootstrap_index,
                  self.padded_actions, *(a for a in self.unroll or () if a is not None)]
        return (sum(rows.nbytes for rows in self._all_rows()) + self.slots.nbytes
                + sum(a.nbytes for a in arrays))

    def to_game(self) -> Game:
        """The held part of the game as a :class:`Game` (``base`` set if trimmed)."""
        replay = self.replay
        game = Game(replay.num_actions, replay.encoder, replay.num_stacked_observations,
                    replay.stack_actions, replay.num_players)
        game.base = self.base
        game.observations = list(self.observations.view.copy())
        game.legal_masks = list(self.legal_masks(np.arange(self.base, self.base + len(self.legal))))
        game.to_play_history = self.to_play.view.tolist()
        game.actions = self.actions.view.tolist()
        game.rewards = self.rewards.view.tolist()
        game.root_values = self.root_values.view.tolist()
        game.child_visits = list(self.policies.dense(0, len(self.policies)))
        game.terminated, game.truncated = self.terminated, self.truncated
        game.final_value = self.final_value
        return game


class ReplayBuffer:
    """Games sent in segments, sampled by position for training (see module doc).

    ``encoder``, ``num_stacked_observations``, ``stack_actions`` and ``num_players`` describe
    the observations (they default to what the first stored game says)."""

    def __init__(self, config: ReplayConfig, *, num_actions: int, num_unroll_steps: int,
                 td_steps: int, discount: float, td_steps_age: int = 0,
                 reward_clipping: bool = False,
                 search_value_mix: float = 0.0, encoder: ObservationEncoder | None = None,
                 num_stacked_observations: int = 1, stack_actions: bool = False,
                 num_players: int = 1):
        self.config = config
        self.reward_clipping = reward_clipping
        self.search_value_mix = search_value_mix
        self.num_actions = num_actions
        self.num_unroll_steps = num_unroll_steps
        self.td_steps = td_steps
        self.td_steps_age = td_steps_age
        self.discount = discount
        self.encoder = encoder
        self.num_stacked_observations = num_stacked_observations
        self.stack_actions = stack_actions
        self.num_players = num_players
        capacity = config.capacity
        self._slot_game = np.full(capacity, -1, dtype=np.int64)
        self._slot_step = np.zeros(capacity, dtype=np.int64)
        self._priority = np.zeros(capacity, dtype=np.float64)
        # The slot's priority is still the first one, |search value - target|: recomputed when
        # later positions of a running game change the target.
        self._fresh = np.zeros(capacity, dtype=np.bool_)
        # The learner step at which each slot's position arrived (``clock`` when added): a
        # sample's age says how stale the data the learner trains on is.
        self._slot_clock = np.zeros(capacity, dtype=np.int64)
        self.clock = 0
        self._records: dict[int, _Record] = {}
        self._running: dict[int, int] = {}  # source id -> record id of running games
        self._cursor = 0
        self._size = 0
        self._next_game_id = 0
        self._standalone_ids = itertools.count(-1, -1)  # source ids of add_game's games
        self.num_games_added = 0  # games finished in the buffer
        self.num_transitions_added = 0  # positions received

    # ---- adding ---------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        return self._slot_game.shape[0]

    def __len__(self) -> int:
        """Positions that can be sampled now (transitions)."""
        return self._size

    @property
    def num_games(self) -> int:
        """Games (finished or running) with positions held."""
        return len(self._records)

    def running_games(self) -> list[int]:
        """Source ids of the games still running (their final segment has not arrived)."""
        return sorted(self._running)

    def nbytes(self) -> int:
        """Bytes held by the buffer: games (each observation once, targets) and slot tables."""
        tables = self._slot_game.nbytes + self._slot_step.nbytes + self._priority.nbytes
        return tables + sum(record.nbytes for record in self._records.values())

    def add_game(self, game: Game, priorities: np.ndarray | None = None) -> int:
        """Stores a finished game whole; returns its id. Default priorities are |search value -
        value target| of each position. Value targets are computed here, so a truncated
        game's ``set_final_value`` must come before this call."""
        if not game.done:
            raise ValueError("only finished games (terminated or truncated) can be stored")
        if len(game) == 0:
            raise ValueError("cannot store a game with no actions")
        if game.base:
            raise ValueError("a trimmed game is sent in segments, not stored whole")
        if self.encoder is None:
            self.encoder = game.encoder
            self.num_stacked_observations = game.num_stacked_observations
            self.stack_actions = game.stack_actions
            self.num_players = game.num_players
        return self.add_segment(cut_segment(game, next(self._standalone_ids), 0, 0, final=True),
                                priorities)

    def add_segment(self, segment: Segment, priorities: np.ndarray | None = None) -> int:
        """Adds a segment of a game (see module doc); returns the game's id. ``priorities``
        (default |search value - value target|) are those of the positions that become
        samples."""
        _check_finite(segment)
        if self.encoder is None:
            raise ValueError("this buffer needs the observation encoder (encoder=...)")
        record_id = self._running.get(segment.source_id)
        record = self._records.get(record_id) if record_id is not None else None
        if record is not None and record.num_positions < segment.start:
            # positions between are missing (lost with a worker): the old part ends here
            self._close(record)
            record = None
        if record is None:
            record = _Record(self._next_game_id, segment.source_id, segment.first,
                             segment.start, self)
            self._next_game_id += 1
            self._records[record.record_id] = record
            self._running[segment.source_id] = record.record_id
        if record.num_positions > segment.end and segment.final is None:
            return record.record_id  # nothing new
        held, targets_before = record.num_positions, record.target_length
        record.append(segment)
        self.num_transitions_added += record.num_positions - held
        record.compute_targets()
        self._refresh_priorities(record, targets_before)
        if record.closed:
            self._running.pop(record.source_id, None)
            self.num_games_added += 1
        new = np.arange(record.first_slot + record.num_slots, record.target_length)
        if new.size > self.capacity:
            raise ValueError(f"a segment of {new.size} positions does not fit in "
                             f"replay.capacity = {self.capacity}; raise the capacity")
        fresh = priorities is None
        if priorities is None:
            priorities = record.initial_priorities(new)
        priorities = np.asarray(priorities, dtype=np.float64).reshape(-1)
        if priorities.shape[0] != new.size:
            raise ValueError(f"{priorities.shape[0]} priorities for {new.size} positions")
        if new.size:
            self._store(record, new, priorities, fresh)
        if record.closed and record.num_slots == 0:
            self._drop(record)
        return record.record_id

    def _refresh_priorities(self, record: _Record, targets_before: int) -> None:
        """First priorities of the positions whose value targets reached past the game's
        previous end (and so changed), where the learner has not set them since."""
        first = max(record.first_slot, targets_before - self.td_steps)
        positions = np.arange(first, min(targets_before, record.first_slot + record.num_slots))
        if positions.size == 0:
            return
        slots = record.slots.view[positions - record.first_slot]
        fresh = self._fresh[slots]
        self._priority[slots[fresh]] = (record.initial_priorities(positions[fresh])
                                        + self.config.priority_epsilon)

    def _store(self, record: _Record, positions: np.ndarray, priorities: np.ndarray,
               fresh: bool) -> None:
        slots = (self._cursor + np.arange(positions.size)) % self.capacity
        owners = self._slot_game[slots]
        for owner_id in np.unique(owners[owners >= 0]).tolist():
            owner = self._records[owner_id]
            last = int(self._slot_step[slots][owners == owner_id].max())
            self._evict(owner, last + 1, may_drop=owner is not record)
        record.slots.extend(slots)
        self._slot_game[slots] = record.record_id
        self._slot_step[slots] = positions
        self._priority[slots] = priorities + self.config.priority_epsilon
        self._fresh[slots] = fresh
        self._slot_clock[slots] = self.clock
        self._cursor = int((self._cursor + positions.size) % self.capacity)
        self._size += positions.size

    def _evict(self, record: _Record, first_kept: int, may_drop: bool = True) -> None:
        """The positions of ``record`` before ``first_kept`` lose their slots."""
        count = first_kept - record.first_slot
        if count <= 0:
            return
        gone = record.slots.view[:count]
        self._slot_game[gone] = -1
        self._priority[gone] = 0.0
        self._size -= count
        record.trim(first_kept)
        if may_drop and record.closed and record.num_slots == 0:
            self._drop(record)

    def _drop(self, record: _Record) -> None:
        self._records.pop(record.record_id, None)
        if self._running.get(record.source_id) == record.record_id:
            del self._running[record.source_id]

    def _close(self, record: _Record) -> None:
        record.close_as_truncated()  # its last position never had a slot: none is lost
        self._running.pop(record.source_id, None)
        record.compute_targets()
        self.num_games_added += 1
        if record.num_slots == 0:
            self._drop(record)

    def close_running_games(self, source_ids: list[int] | None = None) -> int:
        """Ends running games (all, or those of ``source_ids``) at their last position, as
        truncated games whose final value is that position's search value: for games that
        will never be continued (a run resumed without its envs' states, a lost worker).
        Returns how many were closed."""
        chosen = list(self._running) if source_ids is None else [
            s for s in source_ids if s in self._running]
        for source_id in chosen:
            self._close(self._records[self._running[source_id]])
        return len(chosen)

    def games(self) -> list[Game]:
        """The held part of every game, oldest first, as :class:`Game` objects."""
        return [self._records[k].to_game() for k in sorted(self._records)]

    # ---- sampling -------------------------------------------------------------------------

    def _probabilities(self) -> np.ndarray:
        occupied = self._slot_game >= 0
        if self.config.prioritized:
            weights = np.where(occupied, self._priority ** self.config.priority_alpha, 0.0)
        else:
            weights = occupied.astype(np.float64)
        return weights / weights.sum()

    def sample(self, batch_size: int, rng: np.random.Generator,
               with_bootstrap_inputs: bool = False, with_unrolled_inputs: bool = False,
               num_unroll_steps: int | None = None) -> Batch:
        """A batch of ``batch_size`` positions with their K-step targets; optionally the inputs
        of the bootstrap states and of the unrolled states (for reanalyse / target network).
        K is ``num_unroll_steps`` when given (at most the buffer's), else the buffer's."""
        size = len(self)
        if size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        k = self.num_unroll_steps if num_unroll_steps is None else num_unroll_steps
        if not 0 <= k <= self.num_unroll_steps:
            raise ValueError(f"num_unroll_steps = {k}: this buffer keeps targets for 0 to "
                             f"{self.num_unroll_steps} unroll steps")
        probs = self._probabilities()
        slots = rng.choice(self.capacity, size=batch_size, p=probs)
        # (N * P) ** -beta, divided by the batch's largest weight: normalising by the smallest
        # probability in the whole buffer (as in Schaul et al.) lets one near-zero priority
        # shrink every weight, and with it the step size.
        weights = (size * probs[slots]) ** -self.config.priority_beta
        weights /= weights.max()
        game_ids = self._slot_game[slots]
        steps = self._slot_step[slots]
        records = [self._records[int(g)] for g in game_ids]
        local = [int(p) - r.targets_base for r, p in zip(records, steps)]
        window = [slice(i, i + k + 1) for i in local]
        unroll = [r.unroll for r in records]
        actions = np.stack([r.padded_actions[i:i + k] for r, i in zip(records, local)])
        past_end = actions < 0
        actions[past_end] = rng.integers(0, self.num_actions, size=int(past_end.sum()))
        policy_mask = np.stack([t.policy_mask[w] for t, w in zip(unroll, window)])
        # The searched positions of a window are a prefix of it: row b's policy targets are
        # its game's next n_b search policies, in the mask's row-major order.
        searched = policy_mask.sum(axis=1)
        target_policy = np.zeros((batch_size, k + 1, self.num_actions), dtype=np.float32)
        target_policy[policy_mask] = _dense_policies(
            [r.policies for r in records],
            [(int(s) - r.base, int(s) - r.base + int(n)) for r, s, n in zip(records, steps,
                                                                           searched)],
            self.num_actions)
        ages = self.clock - self._slot_clock[slots]
        horizons = np.full(batch_size, self.td_steps, dtype=np.int64)
        if self.td_steps_age:
            horizons = np.clip(self.td_steps - ages // self.td_steps_age, 1, self.td_steps)
            target_value, reward_sum, bootstrap_scale, bootstrap_index = self._corrected_targets(
                records, steps, horizons, k)
        else:
            target_value = np.stack([t.value[w] for t, w in zip(unroll, window)])
            reward_sum = np.stack([r.reward_sum[w] for r, w in zip(records, window)])
            bootstrap_scale = np.stack([r.bootstrap_scale[w] for r, w in zip(records, window)])
            bootstrap_index = None
        # Every state the batch reads (the sampled one, then the unrolled and the bootstrap
        # states asked for), gathered with one call per game.
        columns, valid = [steps[:, None]], [np.ones((batch_size, 1), dtype=np.bool_)]
        if with_unrolled_inputs:
            index = steps[:, None] + np.arange(k + 1)
            columns.append(index)
            valid.append(index <= np.array([r.last_state for r in records])[:, None])
        if with_bootstrap_inputs:
            boot = bootstrap_index if bootstrap_index is not None else np.stack(
                [r.bootstrap_index[w] for r, w in zip(records, window)])
            columns.append(boot)
            valid.append(boot >= 0)
        inputs = self._search_inputs(records, np.concatenate(columns, axis=1),
                                     np.concatenate(valid, axis=1))
        batch = Batch(
            observations=np.ascontiguousarray(inputs.observations[:, 0]),
            actions=actions,
            target_value=target_value,
            target_reward=np.stack([t.reward[w] for t, w in zip(unroll, window)]),
            target_policy=target_policy,
            value_mask=np.stack([t.value_mask[w] for t, w in zip(unroll, window)]),
            policy_mask=policy_mask,
            weights=weights.astype(np.float32), slots=slots, game_ids=game_ids,
            ages=ages, td_horizons=horizons, reward_sum=reward_sum,
            bootstrap_scale=bootstrap_scale,
            legal_action_mask=np.ascontiguousarray(inputs.legal_action_mask[:, 0]))
        first = 1
        if with_unrolled_inputs:
            batch.unrolled = inputs.columns(first, first + k + 1)
            first += k + 1
        if with_bootstrap_inputs:
            batch.bootstrap = inputs.columns(first, first + k + 1)
        return batch

    def _corrected_targets(self, records: list[_Record], steps: np.ndarray,
                           horizons: np.ndarray, k: int) -> tuple[np.ndarray, ...]:
        """Value targets [B, K + 1] of the samples at ``steps`` with n-step horizons
        ``horizons`` [B] (the off-policy correction), their fixed parts and bootstrap scales,
        and the states they bootstrap from (absolute; -1 = none)."""
        length = k + int(horizons.max())
        windows = [r.target_window(int(s), length) for r, s in zip(records, steps)]
        rewards, to_play, values = (np.stack([w[i] for w in windows]) for i in range(3))
        parts = targets.n_step_window_parts(
            rewards, to_play, values, np.array([w[3] for w in windows]),
            np.array([r.terminated for r in records]), horizons, k + 1, self.discount,
            self.search_value_mix)
        boot = np.maximum(parts.bootstrap_index, 0)
        value = parts.reward_sum + parts.bootstrap_scale * np.take_along_axis(values, boot, 1)
        absolute = np.where(parts.bootstrap_index >= 0, parts.bootstrap_index + steps[:, None], -1)
        return value, parts.reward_sum, parts.bootstrap_scale, absolute

    def _search_inputs(self, records: list[_Record], index: np.ndarray,
                       valid: np.ndarray) -> SearchInputs:
        """Inputs of state ``index[b, m]`` of game ``records[b]`` where ``valid`` (zeros, every
        action legal and player 0 elsewhere), with one call per game; ``index[:, 0]`` must be
        valid."""
        safe = np.where(valid, index, index[:, :1])
        count = index.shape[1]
        by_record: dict[int, list[int]] = {}
        for b, record in enumerate(records):
            by_record.setdefault(record.record_id, []).append(b)
        observations = legal = None
        to_play = np.zeros(index.shape, dtype=np.int64)
        for rows in by_record.values():
            record = records[rows[0]]
            states = safe[rows].reshape(-1)
            images = record.images(states)
            masks = record.legal_masks(states)
            if observations is None:
                observations = np.empty((*index.shape, *images.shape[1:]), dtype=images.dtype)
                legal = np.empty((*index.shape, self.num_actions), dtype=np.bool_)
            observations[rows] = images.reshape(len(rows), count, *images.shape[1:])
            legal[rows] = masks.reshape(len(rows), count, -1)
            to_play[rows] = record.to_play.view[states - record.base].reshape(len(rows), count)
        outside = ~valid
        observations[outside] = 0
        legal[outside] = True
        to_play[outside] = 0
        legal[~legal.any(axis=-1)] = True  # final states may have no legal action
        return SearchInputs(observations, legal, to_play, valid.astype(np.bool_))

    def update_priorities(self, slots: np.ndarray, game_ids: np.ndarray,
                          priorities: np.ndarray) -> None:
        """New priorities for sampled positions; slots reused by a newer game are skipped."""
        slots = np.asarray(slots)
        still_there = self._slot_game[slots] == np.asarray(game_ids)
        values = np.asarray(priorities, dtype=np.float64).reshape(-1)
        if not np.all(np.isfinite(values)):
            raise ValueError("priorities must be finite")
        self._priority[slots[still_there]] = values[still_there] + self.config.priority_epsilon
        self._fresh[slots[still_there]] = False

    def priorities(self) -> np.ndarray:
        """Priority of every slot [capacity] (0 for empty slots)."""
        return self._priority.copy()

    def statistics(self) -> dict[str, float]:
        """Diagnostics for the logs: the priorities' mean and largest value, and how many
        learner steps old the held positions are on average."""
        held = self._slot_game >= 0
        if not held.any():
            return {}
        priority = self._priority[held]
        fresh = held & self._fresh
        stats = {"replay/priority_mean": float(priority.mean()),
                 "replay/priority_max": float(priority.max()),
                 "replay/age_mean": float((self.clock - self._slot_clock[held]).mean())}
        if fresh.any():  # |search value - value target| of positions not trained on yet
            stats["diagnostics/fresh_value_error"] = float(
                self._priority[fresh].mean() - self.config.priority_epsilon)
        return stats

    # ---- saving ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to rebuild the buffer, running games and how they continue
        included: numpy arrays and plain numbers only."""
        ids = sorted(self._records)
        records = [self._records[i] for i in ids]
        final = [np.nan if r.final_value is None else r.final_value for r in records]

        def joined(name: str, dtype: Any, shape: tuple[int, ...] = ()) -> np.ndarray:
            parts = [getattr(r, name).view for r in records]
            return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(
                (0, *shape), dtype=dtype)

        observations = [r.observations.view for r in records]
        return {
            "format": STATE_FORMAT,
            "capacity": self.capacity, "cursor": self._cursor,
            "next_game_id": self._next_game_id, "num_games_added": self.num_games_added,
            "num_transitions_added": self.num_transitions_added,
            "slot_game": self._slot_game.copy(), "slot_step": self._slot_step.copy(),
            "priority": self._priority.copy(), "fresh": self._fresh.copy(),
            "slot_clock": self._slot_clock.copy(), "clock": self.clock,
            "game_ids": np.asarray(ids, dtype=np.int64),
            "source_ids": np.asarray([r.source_id for r in records], dtype=np.int64),
            "bases": np.asarray([r.base for r in records], dtype=np.int64),
            "first_slots": np.asarray([r.first_slot for r in records], dtype=np.int64),
            "num_slots": np.asarray([r.num_slots for r in records], dtype=np.int64),
            "num_held_positions": np.asarray([len(r.actions) for r in records], dtype=np.int64),
            "num_held_states": np.asarray([len(r.to_play) for r in records], dtype=np.int64),
            "closed": np.asarray([r.closed for r in records], dtype=np.bool_),
            "terminated": np.asarray([r.terminated for r in records], dtype=np.bool_),
            "truncated": np.asarray([r.truncated for r in records], dtype=np.bool_),
            "final_value": np.asarray(final, dtype=np.float64),
            "slots": joined("slots", np.int64),
            "observations": (np.concatenate(observations) if observations else np.zeros(0)),
            "legal_bits": joined("legal", np.uint8, ((self.num_actions + 7) // 8,)),
            "to_play": joined("to_play", np.int64),
            "actions": joined("actions", np.int64),
            "rewards": joined("rewards", np.float64),
            "root_values": joined("root_values", np.float64),
            **_sparse_policies([r.policies for r in records]),
        }

    def load_state_dict(self, state: dict[str, Any], *, encoder: ObservationEncoder,
                        num_stacked_observations: int = 1, stack_actions: bool = False,
                        num_players: int = 1) -> None:
        """Restores a buffer saved by :meth:`state_dict` (or by the whole-game buffer of
        earlier versions), with these observation settings."""
        if int(state["capacity"]) != self.capacity:
            raise ValueError(f"saved replay has capacity {int(state['capacity'])}, this buffer "
                             f"{self.capacity}")
        self.encoder = encoder
        self.num_stacked_observations = num_stacked_observations
        self.stack_actions = stack_actions
        self.num_players = num_players
        version = int(state.get("format", 1))
        if version == 1:
            state = _whole_games_as_records(state)
        if version >= 3:
            legal = np.asarray(state["legal_bits"])
            policies = _DensePolicies(state, self.num_actions)
        else:
            legal = np.packbits(np.asarray(state["legal_masks"], dtype=np.bool_), axis=-1)
            policies = np.asarray(state["child_visits"])
        self._records.clear()
        self._running.clear()
        held_positions = np.asarray(state["num_held_positions"])
        held_states = np.asarray(state["num_held_states"])
        num_slots = np.asarray(state["num_slots"])
        ends = {name: np.cumsum(counts) for name, counts in (
            ("positions", held_positions), ("states", held_states), ("slots", num_slots))}
        for n, record_id in enumerate(np.asarray(state["game_ids"]).tolist()):
            record = _Record(record_id, int(state["source_ids"][n]), int(state["bases"][n]),
                             int(state["first_slots"][n]), self)
            p1, s1, q1 = (int(ends[name][n]) for name in ("positions", "states", "slots"))
            p0, s0, q0 = p1 - int(held_positions[n]), s1 - int(held_states[n]), \
                q1 - int(num_slots[n])
            record.observations.extend(np.asarray(state["observations"])[s0:s1])
            record.legal.extend(legal[s0:s1])
            record.to_play.extend(np.asarray(state["to_play"])[s0:s1])
            record.actions.extend(np.asarray(state["actions"])[p0:p1])
            record.rewards.extend(np.asarray(state["rewards"])[p0:p1])
            record.root_values.extend(np.asarray(state["root_values"])[p0:p1])
            record.policies.extend(policies[p0:p1])
            record.slots.extend(np.asarray(state["slots"])[q0:q1])
            record.closed = bool(state["closed"][n])
            record.terminated = bool(state["terminated"][n])
            record.truncated = bool(state["truncated"][n])
            final = float(state["final_value"][n])
            record.final_value = None if np.isnan(final) else final
            record.compute_targets()
            self._records[record_id] = record
            if not record.closed:
                self._running[record.source_id] = record_id
        self._slot_game = np.asarray(state["slot_game"], dtype=np.int64).copy()
        self._slot_step = np.asarray(state["slot_step"], dtype=np.int64).copy()
        self._priority = np.asarray(state["priority"], dtype=np.float64).copy()
        self._fresh = np.asarray(state.get("fresh", np.zeros(self.capacity)),
                                 dtype=np.bool_).copy()
        self._slot_clock = np.asarray(state.get("slot_clock", np.zeros(self.capacity)),
                                      dtype=np.int64).copy()
        self.clock = int(state.get("clock", 0))
        self._size = int((self._slot_game >= 0).sum())
        self._cursor = int(state["cursor"])
        self._next_game_id = int(state["next_game_id"])
        self.num_games_added = int(state["num_games_added"])
        self.num_transitions_added = int(state["num_transitions_added"])

    def save(self, path: str | Path) -> None:
        """Writes the buffer atomically (temp file + rename) as tensors for torch.load."""
        import torch

        from muzero_gym.run_folder import atomic_write

        tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) if isinstance(v, np.ndarray)
                   else v for k, v in self.state_dict().items()}
        atomic_write(path, lambda file: torch.save(tensors, file), "replay buffer")

    def load(self, path: str | Path, **game_settings: Any) -> None:
        """Reads a file written by :meth:`save` (``weights_only``: no code runs on load)."""
        import torch

        state = torch.load(path, weights_only=True)
        self.load_state_dict({k: v.numpy() if isinstance(v, torch.Tensor) else v
                              for k, v in state.items()}, **game_settings)


def _unpack_masks(bits: np.ndarray, num_actions: int) -> np.ndarray:
    """Boolean masks [..., A] from their ``np.packbits`` rows [..., ceil(A / 8)]."""
    return np.unpackbits(bits, axis=-1, count=num_actions).astype(np.bool_)


def _sparse_policies(parts: list[_PolicyRows]) -> dict[str, np.ndarray]:
    """The games' policies as one list of nonzero entries: per row the count, then the
    actions and values of all rows in order."""
    entries = [p.entries() for p in parts]

    def joined(i: int, dtype: Any) -> np.ndarray:
        return (np.concatenate([e[i] for e in entries]).astype(dtype) if entries
                else np.zeros(0, dtype))

    return {"policy_counts": joined(0, np.int32), "policy_actions": joined(1, np.int32),
            "policy_values": joined(2, np.float32)}


class _DensePolicies:
    """Rows ``[lo:hi]`` of a state's sparse policies (:func:`_sparse_policies`) as dense
    [hi - lo, A] arrays, one slice at a time (the whole dense array is never built)."""

    def __init__(self, state: dict[str, Any], num_actions: int):
        self.counts = np.asarray(state["policy_counts"], dtype=np.int64)
        self.ends = np.cumsum(self.counts)
        self.actions = np.asarray(state["policy_actions"], dtype=np.int64)
        self.values = np.asarray(state["policy_values"], dtype=np.float32)
        self.num_actions = num_actions

    def __getitem__(self, rows: slice) -> np.ndarray:
        lo, hi, _ = rows.indices(len(self.counts))
        first = int(self.ends[lo - 1]) if lo > 0 else 0
        last = int(self.ends[hi - 1]) if hi > lo else first
        dense = np.zeros((hi - lo, self.num_actions), dtype=np.float32)
        dense[np.repeat(np.arange(hi - lo), self.counts[lo:hi]),
              self.actions[first:last]] = self.values[first:last]
        return dense


def _whole_games_as_records(state: dict[str, Any]) -> dict[str, Any]:
    """A saved buffer of the first format (finished games only, stored whole) in this one's."""
    lengths = np.asarray(state["game_lengths"], dtype=np.int64)
    count = lengths.shape[0]
    return {**state, "source_ids": -1 - np.arange(count), "bases": np.zeros(count, np.int64),
            "first_slots": np.zeros(count, np.int64), "num_slots": lengths,
            "num_held_positions": lengths, "num_held_states": lengths + 1,
            "closed": np.ones(count, np.bool_), "slots": state["game_slots"]}


def _check_finite(segment: Segment) -> None:
    """Refuses a segment with a NaN or infinite reward, search value, policy or observation:
    one would poison every priority and target computed from it."""
    final = segment.final
    arrays = {"reward": segment.rewards, "search value": segment.root_values,
              "policy target": segment.policies,
              "final value": np.asarray([0.0 if final is None or final.value is None
                                         else final.value])}
    if np.issubdtype(segment.observations.dtype, np.floating):
        arrays["observation"] = segment.observations
        if final is not None:
            arrays["final observation"] = np.asarray(final.observation)
    for what, values in arrays.items():
        if not np.isfinite(values).all():
            raise ValueError(f"cannot store a game with a NaN or infinite {what}")
