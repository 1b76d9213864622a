"""Replay: bounded by transitions, prioritized sampling, IS weights, save/load round trip."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from muzero_gym.config import ReplayConfig
from muzero_gym.game import Game, ObservationEncoder
from muzero_gym.replay import ReplayBuffer

ENCODER = ObservationEncoder(spaces.Box(-100, 100, (2,)))


def make_game(length, value=0.0, terminated=True, start=0.0):
    game = Game(3, ENCODER)
    game.start(np.array([start, 0.0]))
    for i in range(length):
        game.store_search_statistics(value, [0.2, 0.3, 0.5])
        game.record_step(i % 3, 1.0, np.array([start + i + 1, 0.0]), terminated and
                         i == length - 1, not terminated and i == length - 1)
    return game


def buffer(capacity=100, search_value_mix=0.0, **kwargs):
    return ReplayBuffer(ReplayConfig(capacity=capacity, **kwargs), num_actions=3,
                        num_unroll_steps=2, td_steps=2, discount=1.0,
                        search_value_mix=search_value_mix)


def test_capacity_counts_transitions_and_evicts_the_oldest_positions_first():
    replay = buffer(capacity=10)
    replay.add_game(make_game(4, start=0))
    replay.add_game(make_game(4, start=100))
    assert len(replay) == 8 and replay.num_games == 2
    replay.add_game(make_game(3, start=200))  # takes the slot of the first game's position 0
    assert replay.num_games == 3 and len(replay) == 10
    first = replay.games()[0]
    assert first.observations[0][0] == 0  # state 0 stays while position 1 needs its action
    positions = sorted(replay._slot_step[replay._slot_game == 0].tolist())
    assert positions == [1, 2, 3]
    replay.add_game(make_game(4, start=300))  # the rest of the first game, and position 0
    assert replay.num_games == 3 and len(replay) == 10  # of the second: the first leaves
    assert [g.observations[-1][0] for g in replay.games()] == [104, 203, 304]
    assert replay.games()[0].base == 0 and len(replay.games()[0]) == 4
    with pytest.raises(ValueError, match="does not fit"):
        replay.add_game(make_game(11))


def test_initial_priorities_are_search_value_errors():
    replay = buffer()
    replay.add_game(make_game(3, value=0.5))
    # targets with td 2, discount 1, reward 1 per step: 1 + 1 + 0.5, 1 + 1, 1
    expected = np.abs(0.5 - np.array([2.5, 2.0, 1.0])) + 1e-6
    np.testing.assert_allclose(replay.priorities()[:3], expected)


def test_search_value_mix_moves_targets_and_priorities_toward_the_search_value():
    replay = buffer(search_value_mix=0.5)
    replay.add_game(make_game(3, value=0.5))
    mixed = 0.5 * np.array([2.5, 2.0, 1.0]) + 0.5 * 0.5
    np.testing.assert_allclose(replay.priorities()[:3], np.abs(0.5 - mixed) + 1e-6)
    batch = replay.sample(16, np.random.default_rng(0), with_bootstrap_inputs=True)
    steps = replay._slot_step[batch.slots]
    np.testing.assert_allclose(batch.target_value[:, 0], mixed[steps])
    # the recomputable split: reward part + scale * stored search value gives the same target
    np.testing.assert_allclose(batch.reward_sum[:, 0] + batch.bootstrap_scale[:, 0] * 0.5,
                               mixed[steps])


def test_prioritized_sampling_follows_priorities_and_weights_correct_for_it():
    replay = buffer(capacity=4, priority_alpha=1.0, priority_beta=1.0)
    game_id = replay.add_game(make_game(4), priorities=np.array([1.0, 1.0, 2.0, 4.0]))
    rng = np.random.default_rng(0)
    batch = replay.sample(20000, rng)
    freq = np.bincount(batch.slots, minlength=4) / 20000
    np.testing.assert_allclose(freq, np.array([1, 1, 2, 4]) / 8, atol=0.01)
    # w = (N P)^-beta / max w: positions with P = 1/8 get 1, P = 1/2 gets 1/4
    weight_of = {int(s): float(w) for s, w in zip(batch.slots, batch.weights)}
    assert weight_of[0] == pytest.approx(1.0) and weight_of[3] == pytest.approx(0.25)
    assert (batch.game_ids == game_id).all()
    # Kish's effective size: weights 1, 1, 1/2, 1/4 -> 2.75^2 / 2.3125 = 3.27 of 4
    batch.weights = np.array([1.0, 1.0, 0.5, 0.25])
    assert batch.effective_size == pytest.approx(2.75 ** 2 / 2.3125)


def test_alpha_zero_and_uniform_mode_sample_uniformly():
    for replay in (buffer(capacity=4, priority_alpha=0.0), buffer(capacity=4, prioritized=False)):
        replay.add_game(make_game(4), priorities=np.array([1.0, 1.0, 2.0, 40.0]))
        batch = replay.sample(8000, np.random.default_rng(1))
        freq = np.bincount(batch.slots, minlength=4) / 8000
        np.testing.assert_allclose(freq, 0.25, atol=0.02)
        np.testing.assert_allclose(batch.weights, 1.0)
        assert batch.effective_size == pytest.approx(8000)


def test_update_priorities_changes_sampling_and_skips_reused_slots():
    replay = buffer(capacity=4)
    first = replay.add_game(make_game(4), priorities=np.ones(4))
    replay.update_priorities(np.array([0, 1]), np.array([first, first]), np.array([9.0, 0.0]))
    np.testing.assert_allclose(replay.priorities(), [9 + 1e-6, 1e-6, 1 + 1e-6, 1 + 1e-6])
    replay.add_game(make_game(4, start=50), priorities=np.ones(4))
    replay.update_priorities(np.array([0]), np.array([first]), np.array([123.0]))
    assert replay.priorities()[0] == pytest.approx(1.0)


def test_sampled_batch_has_unroll_targets_and_random_actions_past_the_end():
    replay = buffer(capacity=3)
    replay.add_game(make_game(3, value=0.0))
    batch = replay.sample(64, np.random.default_rng(0), with_bootstrap_inputs=True)
    assert batch.observations.shape == (64, 2) and batch.actions.shape == (64, 2)
    assert batch.target_policy.shape == (64, 3, 3)
    last = batch.slots == 2  # position 2: one real action, then one random
    assert last.any()
    np.testing.assert_array_equal(batch.actions[last, 0], 2)
    np.testing.assert_allclose(batch.target_value[last], [[1.0, 0.0, 0.0]] * last.sum())
    np.testing.assert_array_equal(batch.policy_mask[last], [[True, False, False]] * last.sum())
    np.testing.assert_allclose(batch.reward_sum + batch.bootstrap_scale * 0.0,
                               batch.target_value)
    assert batch.bootstrap.observations.shape == (64, 3, 2)


def test_save_and_load_round_trip_keeps_games_and_priorities(tmp_path):
    replay = buffer(capacity=12)
    replay.add_game(make_game(5, value=0.3, start=0))
    truncated = make_game(4, value=-0.2, terminated=False, start=10)
    truncated.set_final_value(2.5)
    replay.add_game(truncated)
    replay.update_priorities(np.array([1, 6]), np.array([0, 1]), np.array([3.0, 0.7]))
    path = tmp_path / "replay.pt"
    replay.save(path)
    restored = buffer(capacity=12)
    restored.load(path, encoder=ENCODER)
    np.testing.assert_array_equal(restored.priorities(), replay.priorities())
    assert restored.num_games == 2 and len(restored) == 9
    assert restored.games()[1].final_value == 2.5 and restored.games()[1].truncated
    a = replay.sample(32, np.random.default_rng(7))
    b = restored.sample(32, np.random.default_rng(7))
    for name in ("observations", "actions", "target_value", "target_reward", "target_policy",
                 "weights", "slots"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    restored.add_game(make_game(4, start=20))  # keeps its ring position: slots 9, 10, 11, 0
    assert restored.num_games == 3 and len(restored) == 12
    assert restored._slot_game[0] == 2 and restored._slot_step[0] == 3


def test_unfinished_games_and_empty_buffers_are_errors():
    replay = buffer()
    game = Game(3, ENCODER)
    game.start(np.zeros(2))
    with pytest.raises(ValueError, match="only finished games"):
        replay.add_game(game)
    with pytest.raises(ValueError, match="empty replay"):
        replay.sample(4, np.random.default_rng(0))


def test_unrolled_and_bootstrap_inputs_point_at_the_right_states():
    replay = buffer(capacity=10)
    replay.add_game(make_game(4, start=0))
    batch = replay.sample(64, np.random.default_rng(0), with_bootstrap_inputs=True,
                          with_unrolled_inputs=True)
    steps = replay._slot_step[batch.slots]
    for row, step in enumerate(steps):
        for k in range(3):
            position = step + k
            assert batch.unrolled.valid[row, k] == (position <= 4)
            if position <= 4:
                assert batch.unrolled.observations[row, k, 0] == position
            boot = position + 2  # td_steps = 2; the game terminates after 4 actions
            assert batch.bootstrap.valid[row, k] == (boot < 4)
            if boot < 4:
                assert batch.bootstrap.observations[row, k, 0] == boot


def test_a_batch_carries_the_legal_moves_of_each_sampled_position():
    replay = buffer()
    game = Game(3, ENCODER)
    game.start(np.array([0.0, 0.0]), {"action_mask": [True, True, False]})
    for i in range(5):
        game.store_search_statistics(0.0, [0.5, 0.5, 0.0])
        mask = np.arange(3) != (i + 1) % 3  # position i + 1: action (i + 1) % 3 is illegal
        game.record_step(0, 0.0, np.array([i + 1.0, 0.0]), i == 4, False,
                         {"action_mask": mask})
    replay.add_game(game)
    batch = replay.sample(32, np.random.default_rng(0))
    positions = batch.observations[:, 0].astype(int)
    assert len(set(positions.tolist())) > 1
    expected = np.arange(3)[None] != (positions % 3)[:, None]
    expected[positions == 0] = [True, True, False]
    np.testing.assert_array_equal(batch.legal_action_mask, expected)


def test_a_shallower_sample_holds_the_first_steps_of_the_full_one():
    """sample(num_unroll_steps=k) draws the same positions as the buffer's K and returns the
    first k + 1 steps of their targets; a k beyond the buffer's K is an error."""
    replay = buffer(capacity=20)
    replay.add_game(make_game(6, value=0.5))
    replay.add_game(make_game(4, value=-1.0, terminated=False))
    full = replay.sample(32, np.random.default_rng(5), with_bootstrap_inputs=True,
                         with_unrolled_inputs=True)
    short = replay.sample(32, np.random.default_rng(5), with_bootstrap_inputs=True,
                          with_unrolled_inputs=True, num_unroll_steps=1)
    np.testing.assert_array_equal(short.slots, full.slots)
    assert short.actions.shape == (32, 1) and short.target_value.shape == (32, 2)
    # every sampled position has a real next action: the first one is the game's, not random
    np.testing.assert_array_equal(short.actions, full.actions[:, :1])
    for name in ("target_value", "target_reward", "target_policy", "value_mask",
                 "policy_mask", "reward_sum", "bootstrap_scale"):
        np.testing.assert_array_equal(getattr(short, name), getattr(full, name)[:, :2])
    np.testing.assert_array_equal(short.unrolled.observations, full.unrolled.observations[:, :2])
    np.testing.assert_array_equal(short.bootstrap.valid, full.bootstrap.valid[:, :2])
    with pytest.raises(ValueError, match="num_unroll_steps = 3"):
        replay.sample(4, np.random.default_rng(0), num_unroll_steps=3)


def test_sampled_policy_targets_are_the_games_own_also_after_its_front_was_evicted():
    """Policy targets are read from the game's held positions when sampled: they equal
    ``Game.make_target``'s for each sampled position, before and after evictions drop the
    game's first positions (zeros past the last search)."""
    rng = np.random.default_rng(0)
    game = Game(3, ENCODER)
    game.start(np.array([0.0, 0.0]))
    for i in range(6):  # a different policy at each position
        game.store_search_statistics(0.0, rng.dirichlet(np.ones(3)))
        game.record_step(i % 3, 1.0, np.array([i + 1.0, 0.0]), i == 5, False)
    replay = buffer(capacity=10)
    replay.add_game(game)

    def assert_game_targets(expected_positions):
        batch = replay.sample(64, np.random.default_rng(1))
        positions = batch.observations[:, 0].astype(int)
        assert set(positions[positions < 100].tolist()) == expected_positions
        for row, position in enumerate(positions):
            if position >= 100:  # the other game's
                continue
            target = game.make_target(int(position), 2, 2, 1.0)
            np.testing.assert_array_equal(batch.target_policy[row], target.policy)
            np.testing.assert_array_equal(batch.policy_mask[row], target.policy_mask)

    assert_game_targets(set(range(6)))
    replay.add_game(make_game(7, start=100))  # takes the slots of positions 0, 1 and 2
    assert replay.games()[0].base > 0
    held = set(replay._slot_step[replay._slot_game == 0].tolist())
    assert held == {3, 4, 5}
    assert_game_targets(held)


def test_a_saved_buffer_keeps_only_the_policies_nonzero_entries_and_loads_the_older_format():
    rng = np.random.default_rng(2)
    game = Game(3, ENCODER)
    game.start(np.array([0.0, 0.0]), {"action_mask": [True, True, False]})
    for i in range(5):  # one or two visited moves per position, some rows with a zero
        policy = np.zeros(3)
        policy[rng.choice(2, size=1 + i % 2, replace=False)] = 1.0 / (1 + i % 2)
        game.store_search_statistics(0.0, policy)
        game.record_step(0, 0.0, np.array([i + 1.0, 0.0]), i == 4, False,
                         {"action_mask": np.arange(3) != i % 3})
    replay = buffer(capacity=20)
    replay.add_game(game)
    replay.add_game(make_game(4, start=10))
    state = replay.state_dict()
    assert state["policy_values"].shape == (sum(1 + i % 2 for i in range(5)) + 4 * 3,)
    assert state["legal_bits"].dtype == np.uint8 and state["legal_bits"].shape[1] == 1
    restored = buffer(capacity=20)
    restored.load_state_dict(state, encoder=ENCODER)
    # the same buffer as saved by the previous format: dense policies and masks
    older = {k: v for k, v in state.items() if not k.startswith(("policy_", "legal_bits"))}
    older["format"] = 2
    older["legal_masks"] = np.concatenate([g.legal_masks for g in replay.games()])
    older["child_visits"] = np.concatenate([np.asarray(g.child_visits, np.float32)
                                            for g in replay.games()])
    from_older = buffer(capacity=20)
    from_older.load_state_dict(older, encoder=ENCODER)
    expected = replay.sample(64, np.random.default_rng(4))
    for other in (restored, from_older):
        batch = other.sample(64, np.random.default_rng(4))
        for name in ("observations", "target_policy", "policy_mask", "legal_action_mask",
                     "target_value"):
            np.testing.assert_array_equal(getattr(batch, name), getattr(expected, name),
                                          err_msg=name)
        for a, b in zip(other.games(), replay.games()):
            np.testing.assert_array_equal(a.child_visits, b.child_visits)
            np.testing.assert_array_equal(a.legal_masks, b.legal_masks)
