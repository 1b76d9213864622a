"""True-simulator search: the search steps copies of the real game instead of the learned model.

What the MuZero reference's 2048 network does with its dynamics, and AlphaZero does for board
games: for an env that can copy and restore its whole state (``get_state()`` /
``set_state(state)`` on the unwrapped env, see :mod:`muzero_gym.envs.board`), a search node holds
a real game state. Expanding a node restores its parent's state into a scratch env, steps it with
the chosen action and evaluates the real next observation with the network's representation +
prediction. Rewards, terminal states and legal actions are then exact; the network only supplies
values and priors, except where the env proves a position's outcome: an env with
``proven_values(states)`` (for each position +1 when the player to move wins by force, -1 when
they lose, NaN when not known; shogi's is a mate-in-one finder, Go's a won count after the
opponent's pass) has those values replace the network's, so a move that leaves the opponent a
mate in one looks lost at its first visit. A
terminal state absorbs: every action from it is legal, gives reward 0 and value 0. Chosen with
``search.simulator = true``; it needs ``env.num_stacked_observations = 1`` and no action planes
(the node's observation alone is the model input).

An env that also offers ``simulate(states, actions)`` (the batched rules of
:meth:`muzero_gym.envs.board.BoardGameEnv.simulate`) has each simulation's new nodes, one per
search in the batch, made by one call of it; otherwise each node costs a ``set_state`` /
``step`` / ``get_state`` round on a scratch env. A game with chance (2048's spawns) draws it from
the scratch env's generator, which ``seed`` sets, so that a seed's run is reproducible;
:func:`scratch_seed` derives one without taking draws from the run's own generators.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from muzero_gym.environment import EnvError
from muzero_gym.game import ObservationEncoder
from muzero_gym.inference import ModelSearchAdapter
from muzero_gym.networks import MuZeroNetwork


class SimulatorError(EnvError):
    """The env cannot be used for true-simulator search."""


def check_simulator_env(env: gym.Env) -> gym.Env:
    """The unwrapped env if it offers ``get_state`` and ``set_state``; else a SimulatorError."""
    inner = env.unwrapped
    missing = [name for name in ("get_state", "set_state")
               if not callable(getattr(inner, name, None))]
    if missing:
        raise SimulatorError(
            f"search.simulator = true needs an env that can copy its state, but "
            f"{type(inner).__name__} has no {' or '.join(missing)}(): add get_state() returning "
            "a copy of the whole game and set_state(state) restoring it, or use the learned "
            "model (search.simulator = false)")
    return inner


def scratch_seed(*keys: int) -> int:
    """A seed for a scratch env's chance draws, derived from ``keys`` (a run's seed, which
    worker or evaluation it serves), so that seeding it takes no draw from other generators."""
    return int(np.random.SeedSequence([int(k) for k in keys]).generate_state(1)[0])


class SimulatorSearchAdapter:
    """Serves one search at a time over real game states: call :meth:`initial` with the roots'
    observations and states, then pass :meth:`recurrent_fn` to the search. ``seed`` seeds the
    scratch env (its chance draws); None leaves it to the operating system's entropy."""

    def __init__(self, network: MuZeroNetwork, encoder: ObservationEncoder, scratch_env: gym.Env,
                 num_actions: int, seed: int | None = None):
        self.scratch = check_simulator_env(scratch_env)
        if seed is not None:
            self.scratch.reset(seed=seed)
        simulate = getattr(self.scratch, "simulate", None)
        self._simulate = simulate if callable(simulate) else None
        proven = getattr(self.scratch, "proven_values", None)
        self._proven_values = proven if callable(proven) else None
        self.encoder = encoder
        self.num_actions = num_actions
        self.evaluator = ModelSearchAdapter(network, 0)
        self._states: list[list[Any]] = []
        self._observations: list[list[np.ndarray]] = []
        self._terminal: list[list[bool]] = []

    def refresh(self) -> None:
        """Call after the network's weights change."""
        self.evaluator.refresh()

    def initial(self, observations: np.ndarray, states: Sequence[Any],
                terminal: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Root values [B] and logits [B, A] from the encoded observations [B, ...]; ``states``
        are the roots' game states, ``terminal`` [B] marks roots whose game is over."""
        batch = observations.shape[0]
        if len(states) != batch:
            raise ValueError(f"{len(states)} states for {batch} observations")
        self._states = [[state] for state in states]
        self._observations = [[obs] for obs in observations]
        terminal = np.zeros(batch, dtype=np.bool_) if terminal is None else np.asarray(
            terminal, dtype=np.bool_)
        self._terminal = [[bool(t)] for t in terminal]
        value, logits = self.evaluator.initial(observations)
        return self._values(value, states, terminal), logits

    def recurrent_fn(self, parent_index: np.ndarray, action: np.ndarray, node_index: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Plays each row's action in a copy of its parent's state; evaluates the new
        observations. Rows whose parent ended the game stay in that final state. Returns
        reward, value, logits, legal masks and which new nodes are final states."""
        batch = len(self._states)
        parents = np.asarray(parent_index, dtype=np.int64)
        actions = np.asarray(action, dtype=np.int64)
        reward = np.zeros(batch)
        legal = np.ones((batch, self.num_actions), dtype=np.bool_)
        terminal = np.array([self._terminal[b][parents[b]] for b in range(batch)], dtype=np.bool_)
        observations = np.empty((batch, *self.encoder.shape), dtype=self.encoder.dtype)
        # Start from the parents' states; rows still in play get their child's state below.
        new_states = [self._states[b][parents[b]] for b in range(batch)]
        for b in np.flatnonzero(terminal):
            observations[b] = self._observations[b][parents[b]]
        live = np.flatnonzero(~terminal)
        if len(live):
            live_states, live_obs, live_reward, live_terminal, live_legal = self._play(
                [new_states[b] for b in live], actions[live])
            for b, state in zip(live.tolist(), live_states):
                new_states[b] = state
            observations[live] = live_obs
            reward[live] = live_reward
            terminal[live] = live_terminal
            legal[live] = live_legal | live_terminal[:, None]
        for b in range(batch):
            assert len(self._states[b]) == node_index, "nodes must be expanded in order"
            self._states[b].append(new_states[b])
            self._observations[b].append(observations[b])
            self._terminal[b].append(bool(terminal[b]))
        value, logits = self.evaluator.initial(observations)
        return reward, self._values(value, new_states, terminal), logits, legal, terminal

    def _values(self, value: np.ndarray, states: Sequence[Any], terminal: np.ndarray
                ) -> np.ndarray:
        """The network's values, 0 at final states and the env's proven values where it has
        them (see module doc)."""
        value = np.where(terminal, 0.0, value)
        live = np.flatnonzero(~terminal)
        if self._proven_values is None or not len(live):
            return value
        proven = np.asarray(self._proven_values([states[b] for b in live]), dtype=np.float64)
        known = ~np.isnan(proven)
        value[live[known]] = proven[known]
        return value

    def _play(self, states: list[Any], actions: np.ndarray) -> tuple[
            list[Any], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """New states, encoded observations, rewards, terminal flags and legal masks after
        ``actions`` in ``states``: the env's batched ``simulate`` if it has one, else a
        ``set_state``/``step``/``get_state`` round per state on the scratch env."""
        if self._simulate is not None:
            new_states, raw, reward, terminal, legal = self._simulate(states, actions)
            return (list(new_states), self.encoder.encode_batch(raw),
                    np.asarray(reward, dtype=np.float64), np.asarray(terminal, dtype=np.bool_),
                    np.asarray(legal, dtype=np.bool_).reshape(len(states), self.num_actions))
        count = len(states)
        new_states = []
        observations = np.empty((count, *self.encoder.shape), dtype=self.encoder.dtype)
        reward = np.zeros(count)
        terminal = np.zeros(count, dtype=np.bool_)
        legal = np.ones((count, self.num_actions), dtype=np.bool_)
        for i, (state, a) in enumerate(zip(states, actions.tolist())):
            self.scratch.set_state(state)
            raw, r, term, trunc, info = self.scratch.step(a)
            new_states.append(self.scratch.get_state())
            observations[i] = self.encoder.encode(raw)
            reward[i], terminal[i] = float(r), bool(term or trunc)
            mask = info.get("action_mask")
            if mask is not None:
                legal[i] = np.asarray(mask, dtype=np.bool_).reshape(-1)
        return new_states, observations, reward, terminal, legal
