"""Replay buffer of finished games, bounded by transitions, with prioritized sampling.

Every searched state of a stored game is one *position*; positions sit in a ring of
``capacity`` slots in insertion order. A new game takes the next ``len(game)`` slots and evicts
every game it overwrites (whole games leave, oldest first). Sampling picks positions with
probability ``priority ** alpha / sum`` (or uniformly) and returns importance weights
``(N * P) ** -beta`` normalised by the largest weight in the batch, so they lie in (0, 1].

A position's first priority is ``|search value - n-step value target|`` (MuZero Reanalyze,
Appendix G); :meth:`ReplayBuffer.update_priorities` replaces it after each learner step. The
whole buffer, priorities included, round-trips through :meth:`ReplayBuffer.state_dict` /
:meth:`ReplayBuffer.load_state_dict` and :meth:`ReplayBuffer.save` / :meth:`ReplayBuffer.load`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from muzero_gym import targets
from muzero_gym.config import ReplayConfig
from muzero_gym.game import Game, ObservationEncoder


@dataclass
class SearchInputs:
    """Model inputs of the states at [B, K + 1] positions, to search them again (reanalyse)
    or evaluate them with a target network. ``valid`` is False where there is no state."""

    observations: np.ndarray  # [B, K + 1, ...]
    legal_action_mask: np.ndarray  # [B, K + 1, A] bool
    to_play: np.ndarray  # [B, K + 1] int
    valid: np.ndarray  # [B, K + 1] bool


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
    reward_sum: np.ndarray  # [B, K + 1] fixed part of the value targets (rewards, own value)
    bootstrap_scale: np.ndarray  # [B, K + 1] factor of the bootstrap value (0 = none)
    bootstrap: SearchInputs | None = None  # the states value targets bootstrap from
    unrolled: SearchInputs | None = None  # the states at positions index .. index + K (valid
    # up to the episode's final state)


class _StoredGame:
    """A finished game with the targets of every position computed once, on insertion.

    Target arrays cover positions 0 .. T + K (padded past the end as the targets module says),
    so a sample at position i is the slice [i, i + K + 1] of each. Vector observations are also
    stacked once (``images``); image observations are stacked when sampled.
    """

    __slots__ = ("game", "slots", "parts", "values", "targets", "reward_sum", "bootstrap_scale",
                 "bootstrap_index", "actions", "images", "legal", "to_play", "nbytes")

    def __init__(self, game: Game, slots: np.ndarray, td_steps: int, discount: float,
                 num_unroll_steps: int, reward_clipping: bool = False,
                 search_value_mix: float = 0.0):
        self.game = game
        self.slots = slots
        length = len(game)
        rewards = np.asarray(game.rewards, dtype=np.float64)
        if reward_clipping:
            rewards = np.sign(rewards)
        policies = np.asarray(game.child_visits, dtype=np.float32).reshape(
            length, game.num_actions)
        state_values = game.state_values()
        self.parts = targets.mix_own_values(
            targets.n_step_parts(rewards, np.asarray(game.to_play_history), game.terminated,
                                 td_steps, discount), state_values, search_value_mix)
        self.values = targets.n_step_values(self.parts, state_values)
        self.targets = targets.unroll_targets(self.values, rewards, policies, game.terminated,
                                              0, length + num_unroll_steps)
        pad = num_unroll_steps
        self.reward_sum = np.concatenate([self.parts.reward_sum, np.zeros(pad)])
        self.bootstrap_scale = np.concatenate([self.parts.bootstrap_scale, np.zeros(pad)])
        self.bootstrap_index = np.concatenate([self.parts.bootstrap_index,
                                               np.full(pad, -1, dtype=np.int64)])
        self.actions = np.concatenate([np.asarray(game.actions, dtype=np.int64),
                                       np.full(pad, -1, dtype=np.int64)])
        self.images = None if game.encoder.is_image else np.stack(
            [game.make_image(i) for i in range(length + 1)])
        self.legal = np.stack(game.legal_masks)
        self.to_play = np.asarray(game.to_play_history, dtype=np.int64)
        self.nbytes = self._count_bytes()

    def _count_bytes(self) -> int:
        """Memory held for this game: each observation once, plus the target arrays."""
        game = self.game
        arrays = [*game.observations, self.reward_sum, self.bootstrap_scale, self.bootstrap_index,
                  self.actions, self.legal, self.to_play, self.values, *self.targets]
        if self.images is not None:
            arrays.append(self.images)
        return int(sum(a.nbytes for a in arrays if isinstance(a, np.ndarray))
                   + 8 * (len(game.rewards) + len(game.root_values))
                   + sum(p.nbytes for p in game.child_visits))

    def image(self, index: int) -> np.ndarray:
        return self.images[index] if self.images is not None else self.game.make_image(index)

    def stacked_images(self, indices: np.ndarray) -> np.ndarray:
        """Model inputs of several states [n, ...]."""
        if self.images is not None:
            return self.images[indices]
        return np.stack([self.game.make_image(int(i)) for i in indices])


class ReplayBuffer:
    """Finished games, sampled by position for training (see module doc)."""

    def __init__(self, config: ReplayConfig, *, num_actions: int, num_unroll_steps: int,
                 td_steps: int, discount: float, reward_clipping: bool = False,
                 search_value_mix: float = 0.0):
        self.config = config
        self.reward_clipping = reward_clipping
        self.search_value_mix = search_value_mix
        self.num_actions = num_actions
        self.num_unroll_steps = num_unroll_steps
        self.td_steps = td_steps
        self.discount = discount
        capacity = config.capacity
        self._slot_game = np.full(capacity, -1, dtype=np.int64)
        self._slot_step = np.zeros(capacity, dtype=np.int64)
        self._priority = np.zeros(capacity, dtype=np.float64)
        self._games: dict[int, _StoredGame] = {}
        self._cursor = 0
        self._next_game_id = 0
        self._max_priority = 1.0
        self.num_games_added = 0
        self.num_transitions_added = 0

    # ---- adding ---------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        return self._slot_game.shape[0]

    def __len__(self) -> int:
        """Positions (transitions) stored now."""
        return int((self._slot_game >= 0).sum())

    @property
    def num_games(self) -> int:
        return len(self._games)

    def nbytes(self) -> int:
        """Bytes held by the buffer: stored games (each observation once, targets) and the
        slot tables."""
        tables = self._slot_game.nbytes + self._slot_step.nbytes + self._priority.nbytes
        return tables + sum(stored.nbytes for stored in self._games.values())

    def add_game(self, game: Game, priorities: np.ndarray | None = None) -> int:
        """Stores a finished game; returns its id. Default priorities are |search value -
        value target| of each position. Value targets are computed here, so a truncated
        game's ``set_final_value`` must come before this call."""
        num_positions = len(game)
        if not game.done:
            raise ValueError("only finished games (terminated or truncated) can be stored")
        if num_positions == 0:
            raise ValueError("cannot store a game with no actions")
        _check_finite(game)
        if num_positions > self.capacity:
            raise ValueError(f"a game of {num_positions} transitions does not fit in "
                             f"replay.capacity = {self.capacity}; raise the capacity")
        slots = (self._cursor + np.arange(num_positions)) % self.capacity
        for game_id in np.unique(self._slot_game[slots]):
            if game_id >= 0:
                self._evict(int(game_id))
        game_id = self._next_game_id
        self._next_game_id += 1
        stored = self._games[game_id] = self._stored_game(game, slots)
        if priorities is None:
            priorities = np.abs(np.asarray(game.root_values) - stored.values[:-1])
        priorities = np.asarray(priorities, dtype=np.float64).reshape(-1)
        if priorities.shape[0] != num_positions:
            raise ValueError(f"{priorities.shape[0]} priorities for {num_positions} positions")
        self._slot_game[slots] = game_id
        self._slot_step[slots] = np.arange(num_positions)
        self._priority[slots] = priorities + self.config.priority_epsilon
        self._cursor = int((self._cursor + num_positions) % self.capacity)
        self.num_games_added += 1
        self.num_transitions_added += num_positions
        return game_id

    def _stored_game(self, game: Game, slots: np.ndarray) -> _StoredGame:
        """``game`` in ``slots`` with its targets under this buffer's target settings."""
        return _StoredGame(game, slots, self.td_steps, self.discount, self.num_unroll_steps,
                           self.reward_clipping, self.search_value_mix)

    def _evict(self, game_id: int) -> None:
        stored = self._games.pop(game_id)
        self._slot_game[stored.slots] = -1
        self._priority[stored.slots] = 0.0

    def games(self) -> list[Game]:
        """Stored games, oldest first."""
        return [self._games[k].game for k in sorted(self._games)]

    # ---- sampling -------------------------------------------------------------------------

    def _probabilities(self) -> np.ndarray:
        occupied = self._slot_game >= 0
        if self.config.prioritized:
            weights = np.where(occupied, self._priority ** self.config.priority_alpha, 0.0)
        else:
            weights = occupied.astype(np.float64)
        return weights / weights.sum()

    def sample(self, batch_size: int, rng: np.random.Generator,
               with_bootstrap_inputs: bool = False, with_unrolled_inputs: bool = False) -> Batch:
        """A batch of ``batch_size`` positions with their K-step targets; optionally the inputs
        of the bootstrap states and of the unrolled states (for reanalyse / target network)."""
        size = len(self)
        if size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        probs = self._probabilities()
        slots = rng.choice(self.capacity, size=batch_size, p=probs)
        # (N * P) ** -beta, divided by the batch's largest weight: normalising by the smallest
        # probability in the whole buffer (as in Schaul et al.) lets one near-zero priority
        # shrink every weight, and with it the step size.
        weights = (size * probs[slots]) ** -self.config.priority_beta
        weights /= weights.max()
        game_ids = self._slot_game[slots]
        steps = self._slot_step[slots]
        k = self.num_unroll_steps
        stored = [self._games[int(g)] for g in game_ids]
        window = [slice(int(i), int(i) + k + 1) for i in steps]
        unroll = [g.targets for g in stored]
        actions = np.stack([g.actions[int(i):int(i) + k] for g, i in zip(stored, steps)])
        past_end = actions < 0
        actions[past_end] = rng.integers(0, self.num_actions, size=int(past_end.sum()))
        batch = Batch(
            observations=np.stack([g.image(int(i)) for g, i in zip(stored, steps)]),
            actions=actions,
            target_value=np.stack([t.value[w] for t, w in zip(unroll, window)]),
            target_reward=np.stack([t.reward[w] for t, w in zip(unroll, window)]),
            target_policy=np.stack([t.policy[w] for t, w in zip(unroll, window)]),
            value_mask=np.stack([t.value_mask[w] for t, w in zip(unroll, window)]),
            policy_mask=np.stack([t.policy_mask[w] for t, w in zip(unroll, window)]),
            weights=weights.astype(np.float32), slots=slots, game_ids=game_ids,
            reward_sum=np.stack([g.reward_sum[w] for g, w in zip(stored, window)]),
            bootstrap_scale=np.stack([g.bootstrap_scale[w] for g, w in zip(stored, window)]))
        if with_bootstrap_inputs:
            boot = np.stack([g.bootstrap_index[w] for g, w in zip(stored, window)])
            batch.bootstrap = self._search_inputs(stored, boot, boot >= 0)
        if with_unrolled_inputs:
            index = steps[:, None] + np.arange(k + 1)
            lengths = np.array([len(g.game) for g in stored])[:, None]
            batch.unrolled = self._search_inputs(stored, index, index <= lengths)
        return batch

    def _search_inputs(self, stored: list[_StoredGame], index: np.ndarray,
                       valid: np.ndarray) -> SearchInputs:
        """Inputs of state ``index[b, k]`` of game ``stored[b]`` where ``valid``."""
        first = stored[0].image(0)
        observations = np.zeros((*index.shape, *first.shape), dtype=first.dtype)
        legal = np.ones((*index.shape, self.num_actions), dtype=np.bool_)
        to_play = np.zeros(index.shape, dtype=np.int64)
        for b in np.flatnonzero(valid.any(axis=1)):
            rows = valid[b]
            states = index[b, rows]
            observations[b, rows] = stored[b].stacked_images(states)
            legal[b, rows] = stored[b].legal[states]
            to_play[b, rows] = stored[b].to_play[states]
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

    def priorities(self) -> np.ndarray:
        """Priority of every slot [capacity] (0 for empty slots)."""
        return self._priority.copy()

    # ---- saving ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to rebuild the buffer: numpy arrays and plain numbers only."""
        ids = sorted(self._games)
        games = [self._games[i].game for i in ids]
        final = [np.nan if g.final_value is None else g.final_value for g in games]
        return {
            "capacity": self.capacity, "cursor": self._cursor,
            "next_game_id": self._next_game_id, "num_games_added": self.num_games_added,
            "num_transitions_added": self.num_transitions_added,
            "slot_game": self._slot_game.copy(), "slot_step": self._slot_step.copy(),
            "priority": self._priority.copy(),
            "game_ids": np.asarray(ids, dtype=np.int64),
            "game_lengths": np.asarray([len(g) for g in games], dtype=np.int64),
            "game_slots": _concat([self._games[i].slots for i in ids], np.int64),
            "observations": _concat([np.stack(g.observations) for g in games], None),
            "actions": _concat([np.asarray(g.actions) for g in games], np.int64),
            "rewards": _concat([np.asarray(g.rewards) for g in games], np.float64),
            "root_values": _concat([np.asarray(g.root_values) for g in games], np.float64),
            "child_visits": _concat([np.asarray(g.child_visits, dtype=np.float32).reshape(
                len(g), self.num_actions) for g in games], np.float32),
            "to_play": _concat([np.asarray(g.to_play_history) for g in games], np.int64),
            "legal_masks": _concat([np.stack(g.legal_masks) for g in games], np.bool_),
            "terminated": np.asarray([g.terminated for g in games], dtype=np.bool_),
            "truncated": np.asarray([g.truncated for g in games], dtype=np.bool_),
            "final_value": np.asarray(final, dtype=np.float64),
        }

    def load_state_dict(self, state: dict[str, Any], *, encoder: ObservationEncoder,
                        num_stacked_observations: int = 1, stack_actions: bool = False,
                        num_players: int = 1) -> None:
        """Restores a buffer saved by :meth:`state_dict` (games are rebuilt with these
        observation settings)."""
        if int(state["capacity"]) != self.capacity:
            raise ValueError(f"saved replay has capacity {int(state['capacity'])}, this buffer "
                             f"{self.capacity}")
        self._games.clear()
        lengths = np.asarray(state["game_lengths"])
        action_end = np.cumsum(lengths)
        state_end = np.cumsum(lengths + 1)
        for n, game_id in enumerate(np.asarray(state["game_ids"]).tolist()):
            a0, a1 = action_end[n] - lengths[n], action_end[n]
            s0, s1 = state_end[n] - lengths[n] - 1, state_end[n]
            game = Game(self.num_actions, encoder, num_stacked_observations, stack_actions,
                        num_players)
            game.observations = list(np.asarray(state["observations"])[s0:s1])
            game.actions = np.asarray(state["actions"])[a0:a1].tolist()
            game.rewards = np.asarray(state["rewards"])[a0:a1].tolist()
            game.root_values = np.asarray(state["root_values"])[a0:a1].tolist()
            game.child_visits = list(np.asarray(state["child_visits"])[a0:a1])
            game.to_play_history = np.asarray(state["to_play"])[s0:s1].tolist()
            game.legal_masks = list(np.asarray(state["legal_masks"])[s0:s1])
            game.terminated = bool(state["terminated"][n])
            game.truncated = bool(state["truncated"][n])
            final = float(state["final_value"][n])
            game.final_value = None if np.isnan(final) else final
            slots = np.asarray(state["game_slots"])[a0:a1]
            self._games[game_id] = self._stored_game(game, slots)
        self._slot_game = np.asarray(state["slot_game"], dtype=np.int64).copy()
        self._slot_step = np.asarray(state["slot_step"], dtype=np.int64).copy()
        self._priority = np.asarray(state["priority"], dtype=np.float64).copy()
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


def _check_finite(game: Game) -> None:
    """Refuses a game with a NaN or infinite reward, search value, policy or observation: one
    would poison every priority and target computed from it."""
    arrays = {"reward": np.asarray(game.rewards, dtype=np.float64),
              "search value": np.asarray(game.root_values, dtype=np.float64),
              "policy target": np.asarray(game.child_visits, dtype=np.float64),
              "final value": np.asarray([0.0 if game.final_value is None else game.final_value])}
    if np.issubdtype(game.encoder.dtype, np.floating):
        arrays["observation"] = np.asarray(game.observations)
    for what, values in arrays.items():
        if not np.isfinite(values).all():
            raise ValueError(f"cannot store a game with a NaN or infinite {what}")


def _concat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
    if not parts:
        return np.zeros(0, dtype=dtype or np.float32)
    return np.concatenate(parts).astype(dtype or parts[0].dtype, copy=False)
