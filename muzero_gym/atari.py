"""Atari through ale-py: the native multithreaded vector env for self-play and evaluation, and
the same preprocessing as Gymnasium wrappers for single envs (rendering, ``predict``, probing
the spaces).

Preprocessing is set in ``env.kwargs`` with the names of ``ale_py.vector_env.AtariVectorEnv``
(defaults in :data:`ALE_DEFAULTS`): ``frameskip``, ``maxpool`` (max over the last two frames
of a skip), ``noop_max`` (random no-op starts), ``img_height``/``img_width``, ``grayscale``,
``repeat_action_probability`` (sticky actions), ``full_action_space``,
``max_num_frames_per_episode`` and ``use_fire_reset``. muzero_gym fixes four settings itself
(:data:`FIXED`): frames are not stacked by the env (``Game.make_image`` stacks them, so replay
stores each frame once), rewards are not clipped by the env (``train.reward_clipping`` clips
them in the training targets only), and lives do not end episodes in the env
(``env.life_loss_terminal`` splits training games at a lost life, read from ``info["lives"]``,
while evaluation plays whole games). Those are the pitfalls of ale-py's own switches: its
``episodic_life`` resets the whole game at each lost life and its clipping hides the raw score.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from muzero_gym.config import EnvConfig

ALE_DEFAULTS: dict[str, Any] = {
    "frameskip": 4, "maxpool": True, "noop_max": 30, "img_height": 96, "img_width": 96,
    "grayscale": True, "repeat_action_probability": 0.0, "full_action_space": False,
    "max_num_frames_per_episode": 108_000, "use_fire_reset": False,
}
FIXED: dict[str, Any] = {"stack_num": 1, "reward_clipping": False, "episodic_life": False,
                         "life_loss_info": False}


# Random and human scores of the 26 Atari-100k games, as tabulated by the Atari-100k papers
# (SimPLe, SPR, EfficientZero), for human-normalised scores (score - random) / (human - random).
RANDOM_AND_HUMAN_SCORES: dict[str, tuple[float, float]] = {
    "Alien": (227.8, 7127.7), "Amidar": (5.8, 1719.5), "Assault": (222.4, 742.0),
    "Asterix": (210.0, 8503.3), "BankHeist": (14.2, 753.1), "BattleZone": (2360.0, 37187.5),
    "Boxing": (0.1, 12.1), "Breakout": (1.7, 30.5), "ChopperCommand": (811.0, 7387.8),
    "CrazyClimber": (10780.5, 35829.4), "DemonAttack": (152.1, 1971.0), "Freeway": (0.0, 29.6),
    "Frostbite": (65.2, 4334.7), "Gopher": (257.6, 2412.5), "Hero": (1027.0, 30826.4),
    "Jamesbond": (29.0, 302.8), "Kangaroo": (52.0, 3035.0), "Krull": (1598.0, 2665.5),
    "KungFuMaster": (258.5, 22736.3), "MsPacman": (307.3, 6951.6), "Pong": (-20.7, 14.6),
    "PrivateEye": (24.9, 69571.3), "Qbert": (163.9, 13455.0), "RoadRunner": (11.5, 7845.0),
    "Seaquest": (68.4, 42054.7), "UpNDown": (533.4, 11693.2),
}


def game_name(env_id: str) -> str:
    """``ALE/MsPacman-v5`` -> ``MsPacman``."""
    name = env_id.split("/", 1)[-1]
    return name.rsplit("-v", 1)[0] if "-v" in name else name


def human_normalized_score(env_id: str, score: float) -> float | None:
    """(score - random) / (human - random) for the 26 Atari-100k games; None for others."""
    scores = RANDOM_AND_HUMAN_SCORES.get(game_name(env_id))
    if scores is None:
        return None
    random, human = scores
    return (score - random) / (human - random)


class AtariConfigError(ValueError):
    """An Atari setting muzero_gym cannot honour."""


def is_ale_id(env_id: str) -> bool:
    return env_id.startswith("ALE/")


def ale_settings(config: EnvConfig) -> dict[str, Any]:
    """The preprocessing settings of ``config`` (defaults filled in), checked."""
    fixed = sorted(set(config.kwargs) & set(FIXED))
    if fixed:
        raise AtariConfigError(
            f"env.kwargs sets {fixed}, which muzero_gym fixes for Atari: use "
            "env.num_stacked_observations for stacking, train.reward_clipping for clipping and "
            "env.life_loss_terminal for lives")
    unknown = sorted(set(config.kwargs) - set(ALE_DEFAULTS))
    if unknown:
        raise AtariConfigError(f"env.kwargs has unknown Atari settings {unknown}; known are "
                               f"{sorted(ALE_DEFAULTS)}")
    settings = {**ALE_DEFAULTS, **config.kwargs}
    if config.max_episode_steps > 0:
        settings["max_num_frames_per_episode"] = config.max_episode_steps * settings["frameskip"]
    return settings


class _DropStackAxis(gym.vector.VectorObservationWrapper):
    """[N, 1, H, W, 3] colour frames of the native env as [N, H, W, 3] (grayscale frames stay
    [N, 1, H, W], one channel)."""

    def __init__(self, env: gym.vector.VectorEnv):
        super().__init__(env)
        single = env.single_observation_space
        self.single_observation_space = spaces.Box(0, 255, single.shape[1:], dtype=np.uint8)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space,
                                                              env.num_envs)

    def observations(self, observations: np.ndarray) -> np.ndarray:
        return observations[:, 0]


def make_ale_vector_env(config: EnvConfig, num_envs: int) -> gym.vector.VectorEnv:
    """ale-py's native vector env (NEXT_STEP autoreset) with the settings of ``config``."""
    settings = ale_settings(config)
    envs = gym.make_vec(config.id, num_envs=num_envs, vectorization_mode="vector_entry_point",
                        num_threads=config.num_env_threads, **settings, **FIXED)
    if not settings["grayscale"]:
        envs = _DropStackAxis(envs)
    return envs


def make_ale_env(config: EnvConfig, render_mode: str | None = None) -> gym.Env:
    """One env with the same preprocessing through Gymnasium's ``AtariPreprocessing`` (on a
    frameskip-1 env), for what the vector env cannot do: render, single observations."""
    settings = ale_settings(config)
    if not settings["maxpool"] or settings["use_fire_reset"]:
        raise AtariConfigError(
            "maxpool = false and use_fire_reset = true exist only in ale-py's vector env; a "
            "single env (rendering, predict) cannot reproduce them")
    from gymnasium.wrappers import AtariPreprocessing

    kwargs: dict[str, Any] = {"frameskip": 1,
                              "repeat_action_probability": settings["repeat_action_probability"],
                              "full_action_space": settings["full_action_space"],
                              "max_num_frames_per_episode":
                                  settings["max_num_frames_per_episode"]}
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    env = gym.make(config.id, **kwargs)
    return AtariPreprocessing(env, noop_max=settings["noop_max"],
                              frame_skip=settings["frameskip"],
                              screen_size=(settings["img_width"], settings["img_height"]),
                              terminal_on_life_loss=False, grayscale_obs=settings["grayscale"],
                              grayscale_newaxis=False, scale_obs=False)
