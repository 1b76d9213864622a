"""``Game``: one episode of any Gymnasium env in the reward/history interface of the reference.

A game records what the reference records (observations, actions, rewards, root search values,
child visit distributions, the player to move) plus what Gymnasium adds: terminated and truncated
kept apart, legal actions from ``info["action_mask"]`` and the player to move from
``info["to_play"]`` when the env provides them.

Observations are encoded once, when they arrive, by an :class:`ObservationEncoder` built from the
env's observation space: ``Box`` (images kept as [C, H, W] uint8, anything else flattened to
float32), ``Discrete`` (one-hot), ``MultiBinary`` and ``Tuple``/``Dict`` of those (flattened and
concatenated). ``make_image(i)`` stacks the last N encoded observations, optionally with the
actions that led to them, as the model's input; :func:`stack_observations` does the same for
many states of stored arrays at once (the replay's frames).

A game that self-play hands to the replay in segments is trimmed as it goes
(:meth:`Game.trim`): it then holds only its newest states, and indices stay those of the whole
game (``base`` is the first state still held).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from muzero_gym import targets


class SpaceError(TypeError):
    """The env's observation or action space is not one muzero_gym can handle."""


def check_action_space(space: gym.Space) -> spaces.Discrete:
    """The env's action space if it is ``Discrete``; otherwise a SpaceError saying what to do."""
    if not isinstance(space, spaces.Discrete):
        raise SpaceError(
            f"muzero_gym needs a Discrete action space, but this env has {space}. MuZero plans "
            "over a finite set of actions: wrap the env in a gymnasium.ActionWrapper that maps "
            "a Discrete(n) choice to its actions (e.g. a few fixed continuous actions).")
    return space


def _is_image(space: spaces.Box) -> bool:
    return space.dtype == np.uint8 and len(space.shape) in (2, 3)


class ObservationEncoder:
    """Encodes observations of one Gymnasium space into the arrays games hold and the model
    reads.

    ``shape`` and ``dtype`` describe one encoded observation, as games and the replay hold it:
    [C, H, W] uint8 for images (a 2-D image gets C = 1, channels-last images are transposed);
    [C, H, W] for any other Box of rank 3 (board planes, MinAtar's bool planes: ``is_planes``),
    as uint8 0/1 if the space's dtype is bool, else float32; [F] float32 for everything else.
    ``input_dtype`` is the dtype of the model inputs built from them (``Game.make_image``,
    :func:`stack_observations`): float32 for planes (bool planes take a quarter of the memory
    stored as uint8 and reach the model as the same 0.0 / 1.0), ``dtype`` otherwise. Images
    and planes (``is_spatial``) stack on the channel axis, so convolutional models can read
    them. ``layout`` (``env.observation_layout``) says how rank-3 planes come:
    ``auto`` and ``channels_first`` take them as [C, H, W], ``channels_last`` as [H, W, C]
    (then transposed); images are recognised by themselves.
    """

    def __init__(self, space: gym.Space, layout: str = "auto"):
        if layout not in ("auto", "channels_first", "channels_last"):
            raise ValueError(f"layout = {layout!r}: use auto, channels_first or channels_last")
        self.space = space
        self.is_image = isinstance(space, spaces.Box) and _is_image(space)
        self.is_planes = (isinstance(space, spaces.Box) and not self.is_image
                          and len(space.shape) == 3)
        self.is_spatial = self.is_image or self.is_planes
        self._channels_last = False
        if self.is_image:
            shape = space.shape
            if len(shape) == 2:
                shape = (1, *shape)
            elif shape[-1] <= 4 < shape[0]:
                self._channels_last = True
                shape = (shape[2], shape[0], shape[1])
            self.shape: tuple[int, ...] = tuple(int(d) for d in shape)
            self.dtype = np.dtype(np.uint8)
        elif self.is_planes:
            self._channels_last = layout == "channels_last"
            shape = tuple(int(d) for d in space.shape)
            self.shape = (shape[2], shape[0], shape[1]) if self._channels_last else shape
            self.dtype = np.dtype(np.uint8 if space.dtype == np.bool_ else np.float32)
        else:
            self.shape = (self._flat_size(space, "observation space"),)
            self.dtype = np.dtype(np.float32)
        self.input_dtype = np.dtype(np.float32) if self.is_planes else self.dtype

    @classmethod
    def _flat_size(cls, space: gym.Space, where: str) -> int:
        if isinstance(space, spaces.Box):
            return int(np.prod(space.shape))
        if isinstance(space, spaces.Discrete):
            return int(space.n)
        if isinstance(space, spaces.MultiBinary):
            return int(np.prod(space.shape))
        if isinstance(space, spaces.Tuple):
            return sum(cls._flat_size(s, where) for s in space.spaces)
        if isinstance(space, spaces.Dict):
            return sum(cls._flat_size(s, where) for s in space.spaces.values())
        raise SpaceError(
            f"muzero_gym cannot encode the {where} {space}: supported are Box, Discrete, "
            "MultiBinary and Tuple/Dict of those. Wrap the env in a gymnasium.ObservationWrapper "
            "that returns one of them.")

    def encode(self, observation: Any) -> np.ndarray:
        """One observation as an array of ``shape`` and ``dtype``."""
        if self.is_image:
            # A copy: a row of a vector env's batch would keep the whole batch alive in replay.
            image = np.array(observation, dtype=np.uint8, copy=True)
            if image.ndim == 2:
                return image[None]
            return np.ascontiguousarray(image.transpose(2, 0, 1)) if self._channels_last \
                else image
        if self.is_planes:
            planes = np.asarray(observation, dtype=self.dtype)
            return np.ascontiguousarray(planes.transpose(2, 0, 1)) if self._channels_last \
                else planes.copy()
        return self._flatten(self.space, observation)

    def encode_batch(self, observations: Any) -> np.ndarray:
        """A batch of observations (a sequence, or an array with a leading batch axis) as one
        array [B, *shape] of ``dtype``; unlike :meth:`encode` it may share memory with its input
        (the caller copies what it keeps)."""
        if self.is_planes:
            planes = np.asarray(observations, dtype=self.dtype)
            if self._channels_last:
                return planes.reshape(-1, *planes.shape[-3:]).transpose(0, 3, 1, 2)
            return planes.reshape(-1, *self.shape)
        return np.stack([self.encode(observation) for observation in observations])

    def _flatten(self, space: gym.Space, observation: Any) -> np.ndarray:
        if isinstance(space, spaces.Discrete):
            out = np.zeros(space.n, dtype=np.float32)
            out[int(observation) - int(space.start)] = 1.0
            return out
        if isinstance(space, (spaces.Box, spaces.MultiBinary)):
            return np.asarray(observation, dtype=np.float32).reshape(-1)
        if isinstance(space, spaces.Tuple):
            return np.concatenate([self._flatten(s, o) for s, o in zip(space.spaces, observation)])
        return np.concatenate([self._flatten(s, observation[k]) for k, s in space.spaces.items()])


def stacked_shape(encoder: ObservationEncoder, num_stacked_observations: int,
                  stack_actions: bool, num_actions: int) -> tuple[int, ...]:
    """Shape of ``Game.make_image`` for these settings."""
    if encoder.is_spatial:
        channels = encoder.shape[0] * num_stacked_observations
        if stack_actions:
            channels += num_stacked_observations
        return (channels, *encoder.shape[1:])
    size = encoder.shape[0] * num_stacked_observations
    if stack_actions:
        size += num_actions * num_stacked_observations
    return (size,)


def _action_level(action: int, num_actions: int, as_uint8: bool) -> float:
    """Value of the plane of ``action`` (-1: none): (a + 1) / A, or round(255 (a + 1) / A)."""
    if action < 0:
        return 0.0
    if as_uint8:
        return round(255 * (action + 1) / num_actions)
    return (action + 1) / num_actions


class Game:
    """One episode: the reference's ``Game`` over a Gymnasium env.

    With ``env`` given, :meth:`reset` and :meth:`apply` step it; without one (vectorised
    self-play steps its own envs), :meth:`start` and :meth:`record_step` take the env's outputs.
    Index ``i`` counts states: state 0 is the reset observation, state ``i`` follows action
    ``i - 1``; a finished game has ``len(actions) + 1`` observations.
    """

    def __init__(self, num_actions: int, encoder: ObservationEncoder,
                 num_stacked_observations: int = 1, stack_actions: bool = False,
                 num_players: int = 1, env: gym.Env | None = None):
        if num_stacked_observations < 1:
            raise ValueError(f"num_stacked_observations = {num_stacked_observations}: must be "
                             ">= 1")
        self.num_actions = num_actions
        self.encoder = encoder
        self.num_stacked_observations = num_stacked_observations
        self.stack_actions = stack_actions
        self.num_players = num_players
        self.env = env
        self._action_start = 0
        if env is not None:
            self._action_start = int(check_action_space(env.action_space).start)
        self.observations: list[np.ndarray] = []
        self.actions: list[int] = []
        self.rewards: list[float] = []
        self.root_values: list[float] = []
        self.child_visits: list[np.ndarray] = []
        self.to_play_history: list[int] = []
        self.legal_masks: list[np.ndarray] = []
        self.terminated = False
        self.truncated = False
        self.final_value: float | None = None
        self.base = 0  # index of the first state (and position) still held, see trim()

    @classmethod
    def for_env(cls, env: gym.Env, num_stacked_observations: int = 1,
                stack_actions: bool = False, num_players: int = 1,
                encoder: ObservationEncoder | None = None) -> Game:
        """A game that steps ``env``; the spaces are checked here."""
        action_space = check_action_space(env.action_space)
        return cls(int(action_space.n), encoder or ObservationEncoder(env.observation_space),
                   num_stacked_observations, stack_actions, num_players, env)

    # ---- recording -----------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> None:
        """Resets the env and records the first observation."""
        if self.env is None:
            raise RuntimeError("this Game has no env; call start() with the first observation")
        observation, info = self.env.reset(seed=seed)
        self.start(observation, info)

    def start(self, observation: Any, info: dict | None = None) -> None:
        """Records the first observation (and the legal actions / player in ``info``)."""
        if self.observations:
            raise RuntimeError("this game has already started")
        self._record_state(observation, info or {})

    def apply(self, action: int) -> float:
        """Steps the env with ``action`` (an index in [0, num_actions)) and records the result."""
        if self.env is None:
            raise RuntimeError("this Game has no env; use record_step() with the env's outputs")
        self._check_action(action)
        observation, reward, terminated, truncated, info = self.env.step(
            action + self._action_start)
        self.record_step(action, float(reward), observation, terminated, truncated, info)
        return float(reward)

    def record_step(self, action: int, reward: float, observation: Any, terminated: bool,
                    truncated: bool, info: dict | None = None) -> None:
        """Records an action, its reward and the state it led to."""
        if self.done:
            raise RuntimeError("this game is over; start a new one")
        self.actions.append(int(action))
        self.rewards.append(float(reward))
        self.terminated = bool(terminated)
        self.truncated = bool(truncated) and not self.terminated
        self._record_state(observation, info or {})

    def _record_state(self, observation: Any, info: dict) -> None:
        self.observations.append(self.encoder.encode(observation))
        mask = info.get("action_mask")
        if mask is None:
            mask = np.ones(self.num_actions, dtype=np.bool_)
        else:
            mask = np.asarray(mask).astype(np.bool_).reshape(-1)
            if mask.shape[0] != self.num_actions:
                raise ValueError(f"info['action_mask'] has {mask.shape[0]} entries; the action "
                                 f"space has {self.num_actions}")
        self.legal_masks.append(mask)
        player = info.get("to_play")
        if player is None:
            player = len(self) % self.num_players
        self.to_play_history.append(int(player))

    def _check_action(self, action: int) -> None:
        if not 0 <= action < self.num_actions:
            raise ValueError(f"action {action} is outside [0, {self.num_actions})")

    def store_search_statistics(self, root_value: float, search_policy: np.ndarray) -> None:
        """Records the search at the current state: root value and the policy target (the
        reference's child visit distribution)."""
        policy = np.asarray(search_policy, dtype=np.float32).reshape(-1)
        if policy.shape[0] != self.num_actions:
            raise ValueError(f"search_policy has {policy.shape[0]} entries, expected "
                             f"{self.num_actions}")
        self.root_values.append(float(root_value))
        self.child_visits.append(policy)

    def set_final_value(self, value: float) -> None:
        """Value of the final state of a truncated game (from a search or the model there);
        without it :meth:`state_values` falls back to the last search value."""
        self.final_value = float(value)

    # ---- queries --------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    def __len__(self) -> int:
        """Number of actions taken (in the whole game, trimmed states included)."""
        return self.base + len(self.actions)

    def _local(self, index: int) -> int:
        """Position in the held lists of state ``index`` (negative: from the newest)."""
        if index < 0:
            return index
        if index < self.base:
            raise IndexError(f"state {index} was trimmed from this game (it holds states from "
                             f"{self.base})")
        return index - self.base

    def trim(self, keep_from: int) -> None:
        """Forgets the states and positions before ``keep_from`` (self-play does, once the
        replay has them), keeping what later states need: call with ``keep_from`` at most the
        newest state minus ``num_stacked_observations`` to keep the stacks of the held states
        whole."""
        drop = keep_from - self.base
        if drop <= 0:
            return
        if keep_from > len(self):
            raise ValueError(f"cannot trim to state {keep_from}: the game has {len(self)} "
                             "actions")
        for values in (self.observations, self.legal_masks, self.to_play_history, self.actions,
                       self.rewards, self.root_values, self.child_visits):
            del values[:drop]
        self.base = keep_from

    def terminal(self) -> bool:
        """The reference's name for ``done``."""
        return self.done

    def legal_action_mask(self, index: int = -1) -> np.ndarray:
        """[A] bool, True = legal, at state ``index``."""
        return self.legal_masks[self._local(index)]

    def legal_actions(self, index: int = -1) -> list[int]:
        return np.flatnonzero(self.legal_action_mask(index)).tolist()

    def to_play(self, index: int = -1) -> int:
        """Player to move at state ``index``."""
        return self.to_play_history[self._local(index)]

    def make_image(self, index: int = -1) -> np.ndarray:
        """Model input at state ``index``: the last N observations (the first repeated before the
        start), stacked on the first axis; with ``stack_actions``, the actions that led to them
        (images: a constant plane of round(255 * (a + 1) / A), 0 before the start; vectors: a
        one-hot of A, zeros before the start; planes: a constant plane of (a + 1) / A)."""
        if index < 0:
            index += self.base + len(self.observations)
        first = index - self.num_stacked_observations + 1
        if max(first, 0) < self.base:
            raise IndexError(f"the stack of state {index} reaches trimmed states")
        frames = [self.observations[max(i, 0) - self.base] for i in range(first, index + 1)]
        if not self.stack_actions:
            return np.concatenate(frames, axis=0).astype(self.encoder.input_dtype, copy=False)
        previous = [self.actions[i - 1 - self.base] if i > 0 else -1
                    for i in range(first, index + 1)]
        if self.encoder.is_spatial:
            planes = [np.full((1, *self.encoder.shape[1:]),
                              _action_level(a, self.num_actions, self.encoder.is_image),
                              dtype=self.encoder.input_dtype) for a in previous]
            return np.concatenate(frames + planes, axis=0, dtype=self.encoder.input_dtype)
        one_hots = np.zeros((len(previous), self.num_actions), dtype=np.float32)
        for row, a in enumerate(previous):
            if a >= 0:
                one_hots[row, a] = 1.0
        return np.concatenate(frames + [one_hots.reshape(-1)], axis=0)

    def state_values(self) -> np.ndarray:
        """[T + 1] search value of every state, then the final state's value: 0 after a
        termination, the recorded final value (or the last search value) after a truncation."""
        if self.base:
            raise RuntimeError("this game was trimmed; its targets live in the replay")
        if len(self.root_values) != len(self.actions):
            raise RuntimeError(f"{len(self.actions)} actions but {len(self.root_values)} "
                               "searches stored: call store_search_statistics before each action")
        final = 0.0
        if self.truncated:
            final = self.final_value if self.final_value is not None else (
                self.root_values[-1] if self.root_values else 0.0)
        return np.asarray(self.root_values + [final], dtype=np.float64)

    def make_target(self, index: int, num_unroll_steps: int, td_steps: int,
                    discount: float) -> targets.UnrollTargets:
        """Targets of positions ``index .. index + num_unroll_steps`` (see :mod:`targets`)."""
        return targets.make_target(
            np.asarray(self.rewards), np.asarray(self.to_play_history), self.state_values(),
            np.asarray(self.child_visits).reshape(len(self.child_visits), self.num_actions),
            self.terminated, index, num_unroll_steps, td_steps, discount)


def stack_observations(observations: np.ndarray, actions: np.ndarray, base: int,
                       indices: np.ndarray, encoder: ObservationEncoder,
                       num_stacked_observations: int, stack_actions: bool,
                       num_actions: int) -> np.ndarray:
    """:meth:`Game.make_image` of many states at once: ``observations`` [S, *shape] holds the
    encoded observations of states ``base .. base + S - 1`` and ``actions`` [>= S - 1] the
    actions taken in them; returns the model inputs of states ``indices`` [n] (absolute), equal
    to what ``make_image`` gives."""
    indices = np.asarray(indices, dtype=np.int64)
    offsets = np.arange(-num_stacked_observations + 1, 1)
    states = indices[:, None] + offsets  # [n, N]: the stacked states, oldest first
    clipped = np.maximum(states, 0)
    if (clipped < base).any():
        raise IndexError("a stack reaches states that are no longer held")
    frames = observations[clipped - base].astype(encoder.input_dtype, copy=False)  # [n, N, ...]
    count = indices.shape[0]
    if encoder.is_spatial:
        stacked = frames.reshape(count, -1, *encoder.shape[1:])
    else:
        stacked = frames.reshape(count, -1)
    if not stack_actions:
        return stacked
    actions = np.asarray(actions, dtype=np.int64)
    if actions.size == 0:
        previous = np.full(states.shape, -1, dtype=np.int64)
    else:
        previous = np.where(states > 0, actions[np.clip(states - 1 - base, 0, actions.size - 1)],
                            -1)
    if encoder.is_spatial:
        if encoder.is_image:
            levels = np.where(previous >= 0, np.round(255 * (previous + 1) / num_actions), 0)
        else:
            levels = np.where(previous >= 0, (previous + 1) / num_actions, 0.0)
        planes = np.broadcast_to(levels.astype(encoder.input_dtype)[:, :, None, None],
                                 (count, num_stacked_observations, *encoder.shape[1:]))
        return np.concatenate([stacked, planes], axis=1)
    one_hots = np.zeros((count, num_stacked_observations, num_actions), dtype=np.float32)
    rows, cols = np.nonzero(previous >= 0)
    one_hots[rows, cols, previous[rows, cols]] = 1.0
    return np.concatenate([stacked, one_hots.reshape(count, -1)], axis=1)
