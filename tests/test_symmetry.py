"""Game symmetries and the training-batch augmentation built on them."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import muzero_gym.envs  # noqa: F401  (registers the envs)
from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.config import ConfigError, load_config
from muzero_gym.replay import Batch
from muzero_gym.symmetry import Symmetry, augment_batch, game_symmetries

MOVES = {"muzero_gym/TicTacToe-v0": [4, 0, 5, 7, 2],
         "muzero_gym/ConnectFour-v0": [3, 3, 4, 0, 6, 6, 6, 1, 5]}


@pytest.mark.parametrize("env_id", sorted(MOVES))
def test_symmetric_move_sequences_give_transformed_observations_and_masks(env_id):
    env = gym.make(env_id)
    symmetries = game_symmetries(env)
    assert len(symmetries) == {"muzero_gym/TicTacToe-v0": 7, "muzero_gym/ConnectFour-v0": 1}[
        env_id]
    for symmetry in symmetries:
        original, mirrored = gym.make(env_id), gym.make(env_id)
        obs, info = original.reset()
        obs_t, info_t = mirrored.reset()
        for move in MOVES[env_id]:
            obs, _, _, _, info = original.step(move)
            obs_t, _, _, _, info_t = mirrored.step(int(symmetry.action_permutation[move]))
            np.testing.assert_array_equal(symmetry.transform_observation(obs[None])[0], obs_t)
            np.testing.assert_array_equal(symmetry.permute_policy(info["action_mask"]),
                                          info_t["action_mask"])


def test_connect_four_mirror_reverses_columns():
    (mirror,) = game_symmetries(gym.make("muzero_gym/ConnectFour-v0"))
    assert mirror.action_permutation.tolist() == [6, 5, 4, 3, 2, 1, 0]
    policy = np.array([0.5, 0.2, 0.1, 0.1, 0.1, 0.0, 0.0])
    assert mirror.permute_policy(policy).tolist() == [0.0, 0.0, 0.1, 0.1, 0.1, 0.2, 0.5]


def test_a_symmetry_must_permute_the_actions():
    with pytest.raises(ValueError, match="not a permutation"):
        Symmetry("broken", lambda o: o, np.array([0, 0, 1]))


def _batch(num_samples: int, num_unroll: int = 1) -> Batch:
    rng = np.random.default_rng(1)
    policy = rng.dirichlet(np.ones(3), size=(num_samples, num_unroll + 1))
    return Batch(
        observations=rng.random((num_samples, 2, 2, 3)).astype(np.float32),
        actions=rng.integers(0, 3, size=(num_samples, num_unroll)),
        target_value=rng.random((num_samples, num_unroll + 1)),
        target_reward=np.zeros((num_samples, num_unroll + 1)), target_policy=policy,
        value_mask=np.ones((num_samples, num_unroll + 1), dtype=np.bool_),
        policy_mask=np.ones((num_samples, num_unroll + 1), dtype=np.bool_),
        weights=np.ones(num_samples, dtype=np.float32), slots=np.arange(num_samples),
        game_ids=np.zeros(num_samples, dtype=np.int64),
        reward_sum=np.zeros((num_samples, num_unroll + 1)),
        bootstrap_scale=np.zeros((num_samples, num_unroll + 1)),
        ages=np.zeros(num_samples, dtype=np.int64), td_horizons=np.full(num_samples, 10),
        legal_action_mask=rng.random((num_samples, 3)) < 0.5)


def test_augment_batch_moves_observations_actions_and_policies_together():
    mirror = Symmetry("mirror", lambda o: o[..., ::-1], np.array([2, 1, 0]))
    before = _batch(64)
    after = _batch(64)
    choice = augment_batch(after, [mirror], np.random.default_rng(0))
    flipped, kept = choice == 1, choice == 0
    assert flipped.any() and kept.any()
    np.testing.assert_array_equal(after.observations[kept], before.observations[kept])
    np.testing.assert_array_equal(after.observations[flipped],
                                  before.observations[flipped][..., ::-1])
    np.testing.assert_array_equal(after.actions[flipped], 2 - before.actions[flipped])
    np.testing.assert_array_equal(after.target_policy[flipped],
                                  before.target_policy[flipped][..., ::-1])
    np.testing.assert_array_equal(after.legal_action_mask[flipped],
                                  before.legal_action_mask[flipped][..., ::-1])
    np.testing.assert_array_equal(after.legal_action_mask[kept], before.legal_action_mask[kept])
    np.testing.assert_array_equal(after.target_value, before.target_value)


def test_agent_trains_on_symmetries_only_where_the_env_declares_them():
    tiny = ["search.num_simulations=4", "env.num_envs=2", "train.batch_size=8",
            "train.warmup_transitions=20", "train.eval_interval=0",
            "train.augment_symmetries=true"]
    agent = MuZeroAgent(load_config("tictactoe", tiny))
    assert len(agent.symmetries) == 7
    agent.learn(60, progress=False)
    assert agent.training_steps > 0
    with pytest.raises(ConfigError, match="declares no symmetries"):
        MuZeroAgent(load_config("cartpole", ["train.augment_symmetries=true"]))
