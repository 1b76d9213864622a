"""PettingZoo's two-player games as muzero_gym games: :func:`from_aec` adapts an AEC env.

An AEC env of two agents that take turns, with ``observation["action_mask"]`` and zero-sum
rewards (PettingZoo's classic games: connect four, tic-tac-toe, chess, Go, ...), becomes a
Gymnasium env under the two-player contract of :mod:`muzero_gym.envs.board`: ``info["to_play"]``
(the index of the agent to move among ``possible_agents``), ``info["action_mask"]``, the
observation of the agent to move (rank-3 observations as [C, H, W] float32 planes, as
muzero_gym's boards), and the reward of the agent who just moved. ``get_state``/``set_state``
copy the whole AEC env, which lets the true-simulator search and the opponents use it (slowly:
a deep copy per position).

Ids ``pettingzoo:<game>`` (``pettingzoo:connect_four_v3``) name PettingZoo's classic games:
``muzero-gym train pettingzoo:connect_four_v3`` trains one with no code. Needs the [pettingzoo]
extra.
"""

from __future__ import annotations

import copy
import importlib
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from muzero_gym.envs.board import IllegalMoveError, LegalMoves


class AECGame(gym.Env):
    """An AEC env of two alternating agents as a two-player Gymnasium env (see module doc)."""

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 1}

    def __init__(self, aec_env: Any, render_mode: str | None = None):
        agents = list(aec_env.possible_agents)
        if len(agents) != 2:
            raise ValueError(f"from_aec needs a two-player AEC env, this one has {len(agents)} "
                             "agents")
        self.aec = aec_env
        self.agents = agents
        self.render_mode = render_mode
        space = aec_env.observation_space(agents[0])
        if not isinstance(space, spaces.Dict) or "action_mask" not in space.spaces:
            raise ValueError("from_aec needs observations with an 'action_mask' (PettingZoo's "
                             "classic games have them)")
        inner = space["observation"]
        shape = inner.shape
        self._planes = len(shape) == 3
        if self._planes:
            shape = (shape[2], shape[0], shape[1])
            self.observation_space = spaces.Box(float(np.min(inner.low)),
                                                float(np.max(inner.high)), shape,
                                                dtype=np.float32)
        else:
            self.observation_space = inner
        num_actions = int(aec_env.action_space(agents[0]).n)
        self.action_space = LegalMoves(num_actions, self._current_mask)
        self._done = False

    def _observation(self) -> tuple[np.ndarray, dict]:
        agent = self.aec.agent_selection
        observation = self.aec.observe(agent)
        planes = np.asarray(observation["observation"])
        if self._planes:
            planes = np.ascontiguousarray(planes.transpose(2, 0, 1), dtype=np.float32)
        mask = np.asarray(observation["action_mask"], dtype=np.bool_)
        if self._done or not mask.any():
            mask = np.ones_like(mask)  # the game is over; keep the search's root well defined
        return planes, {"action_mask": mask, "to_play": self.agents.index(agent)}

    def _current_mask(self) -> np.ndarray:
        return self._observation()[1]["action_mask"]

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.aec.reset(seed=seed)
        self._done = False
        return self._observation()

    def step(self, action):
        if self._done:
            raise IllegalMoveError("the game is over; call reset()")
        agent = self.aec.agent_selection
        mask = np.asarray(self.aec.observe(agent)["action_mask"], dtype=np.bool_)
        action = int(action)
        if not 0 <= action < len(mask) or not mask[action]:
            raise IllegalMoveError(f"illegal move {action}: legal moves are "
                                   f"{np.flatnonzero(mask).tolist()}")
        self.aec.step(action)
        reward = float(self.aec.rewards[agent])
        nxt = self.aec.agent_selection
        terminated = bool(self.aec.terminations[nxt])
        truncated = bool(self.aec.truncations[nxt]) and not terminated
        self._done = terminated or truncated
        observation, info = self._observation()
        if self.render_mode == "human":
            self.render()
        return observation, reward, terminated, truncated, info

    def get_state(self) -> tuple:
        return _clone(self.aec), self._done

    def set_state(self, state: tuple) -> None:
        self.aec, self._done = _clone(state[0]), state[1]

    def render(self) -> str | None:
        board = np.asarray(self.aec.observe(self.aec.agent_selection)["observation"])
        text = f"{self.aec.metadata.get('name', 'game')}: {self.aec.agent_selection} to move\n"
        text += str(board.argmax(axis=-1) + (board.max(axis=-1) > 0)) if board.ndim == 3 \
            else str(board)
        if self.render_mode == "human":
            print(text)
            return None
        return text


def _clone(env: Any) -> Any:
    """A copy of an AEC env and its wrappers with the game's state. PettingZoo's envs pickle
    (and so deep-copy) as their constructor's arguments, i.e. as a fresh game: their attributes
    are copied here instead."""
    clone = object.__new__(type(env))
    for key, value in vars(env).items():
        setattr(clone, key, _clone(value) if key == "env" else copy.deepcopy(value))
    return clone


def from_aec(aec_env: Any) -> AECGame:
    """A two-player PettingZoo AEC env as a muzero_gym two-player game (see module doc)."""
    return AECGame(aec_env)


def make_classic(name: str, render_mode: str | None = None, **kwargs: Any) -> AECGame:
    """PettingZoo's classic game ``name`` (``connect_four_v3``) adapted by :func:`from_aec`."""
    try:
        module = importlib.import_module(f"pettingzoo.classic.{name}")
    except ImportError as e:
        raise gym.error.Error(f"pettingzoo.classic has no game {name!r} (or it needs more: "
                              f"{e})") from None
    return AECGame(module.env(**kwargs), render_mode=render_mode)


def register_classic(name: str) -> str:
    """Registers ``name`` (a PettingZoo classic game) with Gymnasium, so that the id
    ``pettingzoo:<name>`` makes it; returns the id."""
    if name not in gym.registry:
        gym.register(name, entry_point=make_classic, kwargs={"name": name},
                     disable_env_checker=True)
    return f"pettingzoo:{name}"
