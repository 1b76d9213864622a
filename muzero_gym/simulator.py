"""True-simulator search: the search steps copies of the real game instead of the learned model.

What the MuZero reference's 2048 network does with its dynamics, and AlphaZero does for board
games: for an env that can copy and restore its whole state (``get_state()`` /
``set_state(state)`` on the unwrapped env, see :mod:`muzero_gym.envs.board`), a search node holds
a real game state. Expanding a node restores its parent's state into a scratch env, steps it with
the chosen action and evaluates the real next observation with the network's representation +
prediction. Rewards, terminal states and legal actions are then exact; the network only supplies
values and priors. A terminal state absorbs: every action from it is legal, gives reward 0 and
value 0. Chosen with ``search.simulator = true``; it needs ``env.num_stacked_observations = 1``
and no action planes (the node's observation alone is the model input).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch

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


class SimulatorSearchAdapter:
    """Serves one search at a time over real game states: call :meth:`initial` with the roots'
    observations and states, then pass :meth:`recurrent_fn` to the search."""

    def __init__(self, network: MuZeroNetwork, encoder: ObservationEncoder, scratch_env: gym.Env,
                 num_actions: int, device: torch.device | str = "cpu"):
        self.scratch = check_simulator_env(scratch_env)
        self.encoder = encoder
        self.num_actions = num_actions
        self.evaluator = ModelSearchAdapter(network, 0, device)
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
        return np.where(terminal, 0.0, value), logits

    def recurrent_fn(self, parent_index: np.ndarray, action: np.ndarray,
                     node_index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Steps a copy of each row's parent state; evaluates the new observations."""
        batch = len(self._states)
        reward = np.zeros(batch)
        legal = np.ones((batch, self.num_actions), dtype=np.bool_)
        terminal = np.zeros(batch, dtype=np.bool_)
        observations = []
        for b in range(batch):
            assert len(self._states[b]) == node_index, "nodes must be expanded in order"
            parent = int(parent_index[b])
            state = self._states[b][parent]
            if self._terminal[b][parent]:
                observation, terminal[b] = self._observations[b][parent], True
            else:
                self.scratch.set_state(state)
                raw, r, term, trunc, info = self.scratch.step(int(action[b]))
                state = self.scratch.get_state()
                observation = self.encoder.encode(raw)
                reward[b], terminal[b] = float(r), bool(term or trunc)
                mask = info.get("action_mask")
                if mask is not None and not terminal[b]:
                    legal[b] = np.asarray(mask, dtype=np.bool_).reshape(-1)
            self._states[b].append(state)
            self._observations[b].append(observation)
            self._terminal[b].append(bool(terminal[b]))
            observations.append(observation)
        value, logits = self.evaluator.initial(np.stack(observations))
        return reward, np.where(terminal, 0.0, value), logits, legal
