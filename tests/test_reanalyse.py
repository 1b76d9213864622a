"""Reanalyse: fresh value (and policy) targets from a new search."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from muzero_gym.config import ModelConfig, ReplayConfig
from muzero_gym.game import Game, ObservationEncoder
from muzero_gym.inference import plan
from muzero_gym.mcts import BatchedMCTS, SearchSettings
from muzero_gym.networks import build_network
from muzero_gym.reanalyse import reanalyse
from muzero_gym.replay import ReplayBuffer

ENCODER = ObservationEncoder(spaces.Box(-5, 5, (3,)))


def replay_with_games():
    rng = np.random.default_rng(0)
    replay = ReplayBuffer(ReplayConfig(capacity=200), num_actions=2, num_unroll_steps=2,
                          td_steps=2, discount=0.9)
    for _ in range(4):
        game = Game(2, ENCODER)
        game.start(rng.normal(size=3))
        for i in range(8):
            game.store_search_statistics(5.0, [0.5, 0.5])
            game.record_step(int(rng.integers(2)), 1.0, rng.normal(size=3), False, i == 7)
        replay.add_game(game)
    return replay


def network_search_and_batch():
    """A network whose values vary (so fresh searches differ from the stored 5.0 and 50/50),
    its search, and 16 sampled positions with the inputs reanalyse needs."""
    torch.manual_seed(0)
    net = build_network(ModelConfig(hidden_size=8, layer_size=16, value_support_size=5,
                                    reward_support_size=2), (3,), 2)
    for p in net.value_head.parameters():
        torch.nn.init.normal_(p, std=1.0)
    search = BatchedMCTS(SearchSettings(num_simulations=6, discount=0.9), 2)
    batch = replay_with_games().sample(16, np.random.default_rng(1), with_bootstrap_inputs=True,
                                       with_unrolled_inputs=True)
    return net, search, batch


def test_reanalysed_values_bootstrap_from_a_fresh_search():
    net, search, batch = network_search_and_batch()
    stored_values = batch.target_value.copy()
    changed = reanalyse(batch, net, search, 1.0, np.random.default_rng(2), refresh_policy=True)
    assert changed == 16
    inputs = batch.bootstrap
    rows, steps = np.nonzero(inputs.valid)
    fresh = plan(net, search, inputs.observations[rows, steps],
                 inputs.legal_action_mask[rows, steps], rng=np.random.default_rng(0),
                 add_noise=False)
    np.testing.assert_allclose(batch.target_value[rows, steps],
                               batch.reward_sum[rows, steps]
                               + batch.bootstrap_scale[rows, steps] * fresh.root_value)
    assert not np.allclose(batch.target_value[rows, steps], stored_values[rows, steps])
    searched = batch.policy_mask
    assert not np.allclose(batch.target_policy[searched], 0.5)  # fresh visit distributions
    np.testing.assert_allclose(batch.target_policy[searched].sum(-1), 1.0)


def test_values_left_out_keep_their_targets_while_policies_refresh():
    net, search, batch = network_search_and_batch()
    stored_values = batch.target_value.copy()
    assert reanalyse(batch, net, search, 1.0, np.random.default_rng(2), refresh_policy=True,
                     refresh_values=False) == 16
    np.testing.assert_array_equal(batch.target_value, stored_values)
    assert not np.allclose(batch.target_policy[batch.policy_mask], 0.5)


def test_a_gpu_learners_pinned_arrays_reanalyse_as_numpy_ones():
    """On a GPU the learner hands reanalyse batches whose read-only arrays are already host
    tensors (pinned for the copy to the device): the same targets as with numpy arrays."""
    net, search, batch = network_search_and_batch()
    _, _, as_tensors = network_search_and_batch()
    for name in ("observations", "actions", "target_reward", "value_mask", "policy_mask",
                 "weights"):  # what pin_batch turns into tensors (here without pinning)
        setattr(as_tensors, name, torch.from_numpy(getattr(as_tensors, name)))
    for refresh_values in (True, False):
        assert reanalyse(batch, net, search, 0.5, np.random.default_rng(2), refresh_policy=True,
                         refresh_values=refresh_values) > 0
        assert reanalyse(as_tensors, net, search, 0.5, np.random.default_rng(2),
                         refresh_policy=True, refresh_values=refresh_values) > 0
        np.testing.assert_array_equal(as_tensors.target_value, batch.target_value)
        np.testing.assert_array_equal(as_tensors.target_policy, batch.target_policy)


def test_reanalyse_needs_the_inputs():
    net = build_network(ModelConfig(hidden_size=8, layer_size=16), (3,), 2)
    search = BatchedMCTS(SearchSettings(num_simulations=2), 2)
    batch = replay_with_games().sample(4, np.random.default_rng(0))
    with pytest.raises(ValueError, match="with_bootstrap_inputs"):
        reanalyse(batch, net, search, 0.5, np.random.default_rng(0))
    assert reanalyse(batch, net, search, 0.0, np.random.default_rng(0)) == 0
