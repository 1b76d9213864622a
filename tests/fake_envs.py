"""Small envs that misbehave on purpose, for the robustness tests; importing this module
registers them (``fake_envs:Walk-v0`` etc. from a test, a subprocess, or a checkpoint).

``Walk``: 4 float features, 2 actions, +1 reward a step; it can end after ``length`` steps
(``None``: never), return a NaN reward or observation at one step, or raise at one step.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class EnvBroke(RuntimeError):
    """What ``Walk`` raises at ``raise_at``."""


class Walk(gym.Env):
    metadata = {"render_modes": []}
    # Steps taken by every Walk of this process; ``raise_at`` counts them, so a vector env
    # raises once, not once per copy.
    steps_taken = 0

    def __init__(self, length: int | None = 20, nan_reward_at: int | None = None,
                 nan_observation_at: int | None = None, raise_at: int | None = None):
        self.observation_space = spaces.Box(-np.inf, np.inf, (4,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.length = length
        self.nan_reward_at = nan_reward_at
        self.nan_observation_at = nan_observation_at
        self.raise_at = raise_at
        self.t = 0

    def _observation(self) -> np.ndarray:
        value = np.float32(np.nan) if self.t == self.nan_observation_at else np.float32(self.t)
        return np.array([value, self.t % 2, 1.0, -1.0], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observation(), {}

    def step(self, action):
        Walk.steps_taken += 1
        if self.raise_at is not None and Walk.steps_taken == self.raise_at:
            raise EnvBroke(f"broken at step {Walk.steps_taken}")
        self.t += 1
        reward = float("nan") if self.t == self.nan_reward_at else 1.0
        terminated = self.length is not None and self.t >= self.length
        return self._observation(), reward, terminated, False, {}


for _id, _kwargs in {"Walk-v0": {}, "EndlessWalk-v0": {"length": None},
                     "NaNRewardWalk-v0": {"nan_reward_at": 7},
                     "NaNObservationWalk-v0": {"nan_observation_at": 5},
                     "BreakingWalk-v0": {"raise_at": 40}}.items():
    if _id not in gym.registry:
        gym.register(_id, entry_point=Walk, kwargs=_kwargs)
