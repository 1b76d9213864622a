"""Self-play over vector envs: NEXT_STEP autoreset handled exactly, on a counting env."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from muzero_gym.config import EnvConfig, load_config
from muzero_gym.environment import make_vector_env
from muzero_gym.game import Game, ObservationEncoder
from muzero_gym.mcts import BatchedMCTS, SearchSettings
from muzero_gym.networks import build_network
from muzero_gym.selfplay import SelfPlay


class CountingEnv(gym.Env):
    """Observation t after t steps; reward t + 1 for step t; ends after ``length`` steps, where
    the length (3, 4 or 5) is drawn at reset, so parallel copies end at different times."""

    observation_space = spaces.Box(0, 100, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, truncate: bool = False):
        self.truncate = truncate
        self.t = 0
        self.length = 3

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.length = int(self.np_random.integers(3, 6))
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        end = self.t >= self.length
        return (np.array([float(self.t)], dtype=np.float32), float(self.t), end and not
                self.truncate, end and self.truncate, {})


gym.register("muzero_gym_test/Counting-v0", entry_point=CountingEnv)


def play(truncate: bool, num_steps: int = 40):
    config = load_config("cartpole", ["search.num_simulations=4"])
    envs = make_vector_env(EnvConfig(id="muzero_gym_test/Counting-v0", num_envs=3,
                                     kwargs={"truncate": truncate}))
    encoder = ObservationEncoder(envs.single_observation_space)
    network = build_network(config.model, (1,), 2)
    search = BatchedMCTS(SearchSettings(num_simulations=4), 2)
    player = SelfPlay(envs, network, search, lambda: Game(2, encoder), config.search,
                      np.random.default_rng(0))
    player.reset(seed=0)
    finished, transitions = [], 0
    for _ in range(num_steps):
        stats = player.step()
        finished += stats.finished
        transitions += stats.num_transitions
    envs.close()
    return finished, transitions, player


@pytest.mark.parametrize("truncate", [False, True])
def test_autoreset_step_never_becomes_a_transition(truncate):
    finished, transitions, player = play(truncate)
    assert len(finished) >= 10
    for game in finished:
        length = len(game)
        assert 3 <= length <= 5
        assert [float(o[0]) for o in game.observations] == list(range(length + 1))
        assert game.rewards == [float(t) for t in range(1, length + 1)]
        assert len(game.root_values) == length and len(game.child_visits) == length
        assert game.terminated is not truncate and game.truncated is truncate
        assert (game.final_value is not None) is truncate
    in_progress = sum(len(g) for g in player.games)
    assert transitions == sum(len(g) for g in finished) + in_progress


def test_vector_env_must_autoreset_next_step():
    envs = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    config = load_config("cartpole")
    with pytest.raises(ValueError, match="NEXT_STEP"):
        SelfPlay(envs, build_network(config.model, (4,), 2),
                 BatchedMCTS(SearchSettings(num_simulations=2), 2), lambda: None, config.search,
                 np.random.default_rng(0))
    envs.close()


def test_gumbel_self_play_at_temperature_zero_plays_the_greedy_pick():
    # search.temperatures scale Gumbel's noise: at 0 self-play (noise drawn) must play what
    # evaluation (no noise) plays, move for move; at 1 it draws and strays from it.
    def actions(temperature: float | None) -> list[list[int]]:
        overrides = ["search.num_simulations=8"]
        if temperature is not None:
            overrides += [f"search.temperatures=[{temperature}]", "search.temperature_steps=[]"]
        config = load_config("cartpole", overrides)
        envs = make_vector_env(EnvConfig(id="CartPole-v1", num_envs=4))
        encoder = ObservationEncoder(envs.single_observation_space)
        torch.manual_seed(0)
        network = build_network(config.model, (4,), 2)
        search = BatchedMCTS(SearchSettings.from_config(config), 2)
        greedy = temperature is None
        player = SelfPlay(envs, network, search, lambda: Game(2, encoder), config.search,
                          np.random.default_rng(0), add_noise=not greedy, greedy=greedy)
        player.reset(seed=0)
        finished = []
        for _ in range(40):
            finished += player.step().finished
        envs.close()
        return [g.actions for g in finished] + [g.actions for g in player.games]

    assert actions(0.0) == actions(None)
    assert actions(1.0) != actions(None)
