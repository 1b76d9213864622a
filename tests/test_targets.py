"""n-step targets on hand-worked episodes, and agreement with the reference's make_target."""

from __future__ import annotations

import numpy as np
import pytest

from muzero_gym import targets

REWARDS = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
ROOT_VALUES = [10.0, 20.0, 30.0, 40.0, 50.0]
ONE_PLAYER = np.zeros(6, dtype=int)
POLICIES = np.eye(5, 3)  # any distinct rows


def target(terminated, index, k, td, discount, final=0.0, rewards=REWARDS, to_play=ONE_PLAYER,
           root_values=ROOT_VALUES, mix=0.0):
    values = np.array(list(root_values) + [final])
    policies = np.eye(len(rewards), 3)
    return targets.make_target(rewards, to_play, values, policies, terminated, index, k, td,
                               discount, mix)


def test_mid_episode_value_is_n_step_return_plus_discounted_search_value():
    t = target(True, index=1, k=1, td=2, discount=0.5)
    # j=1: 2 + 0.5*3 + 0.25*40 ; j=2: 3 + 0.5*4 + 0.25*50
    np.testing.assert_allclose(t.value, [13.5, 17.5])
    np.testing.assert_allclose(t.reward, [1.0, 2.0])  # last_reward: reward before each position
    np.testing.assert_array_equal(t.policy, np.eye(5, 3)[1:3])
    assert t.policy_mask.all() and t.value_mask.all()


def test_search_value_mix_averages_the_n_step_target_with_the_own_search_value():
    t = target(True, index=1, k=2, td=2, discount=0.5, mix=0.25)
    # n-step targets 13.5, 17.5, 6.5 (j = 1, 2, 3) against own search values 20, 30, 40
    np.testing.assert_allclose(t.value, [0.75 * 13.5 + 0.25 * 20, 0.75 * 17.5 + 0.25 * 30,
                                         0.75 * 6.5 + 0.25 * 40])
    # the absorbing terminal state keeps 0 (its value is 0) and the truncated end keeps its own
    np.testing.assert_allclose(target(True, index=5, k=0, td=2, discount=0.5, mix=0.5).value, [0])
    np.testing.assert_allclose(
        target(False, index=5, k=0, td=2, discount=0.5, final=60.0, mix=0.5).value, [60.0])


def test_mixed_parts_recompute_only_the_bootstrap_term():
    # A fresh bootstrap estimate (target network, reanalyse) enters with weight 1 - w; the own
    # search value stays the one stored when the game was played.
    stored = np.array(ROOT_VALUES + [0.0])
    fresh = np.array([-1.0, -2.0, -3.0, -4.0, -5.0, 0.0])
    parts = targets.n_step_parts(REWARDS, ONE_PLAYER, True, 2, 0.5)
    mixed = targets.mix_own_values(parts, stored, 0.25)
    np.testing.assert_allclose(targets.n_step_values(mixed, fresh),
                               0.75 * targets.n_step_values(parts, fresh) + 0.25 * stored)
    assert targets.mix_own_values(parts, stored, 0.0) is parts
    with pytest.raises(ValueError, match="must be in"):
        targets.mix_own_values(parts, stored, 1.5)
    with pytest.raises(ValueError, match="one value per state"):
        targets.mix_own_values(parts, stored[:-1], 0.5)


def test_near_a_terminal_state_values_stop_and_later_states_are_absorbing():
    t = target(True, index=3, k=3, td=2, discount=0.5)
    # j=3: 4 + 0.5*5 (episode ends) ; j=4: 5 ; j=5, 6: absorbing
    np.testing.assert_allclose(t.value, [6.5, 5.0, 0.0, 0.0])
    np.testing.assert_allclose(t.reward, [3.0, 4.0, 5.0, 0.0])
    np.testing.assert_array_equal(t.policy_mask, [True, True, False, False])
    np.testing.assert_array_equal(t.value_mask, [True, True, True, True])
    np.testing.assert_array_equal(t.policy[2:], 0.0)


def test_near_a_truncation_values_bootstrap_from_the_final_state_value():
    t = target(False, index=3, k=3, td=2, discount=0.5, final=60.0)
    # j=3: 4 + 0.5*5 + 0.25*60 ; j=4: 5 + 0.5*60 ; j=5 (final state): 60 ; j=6: unknown
    np.testing.assert_allclose(t.value[:3], [21.5, 35.0, 60.0])
    np.testing.assert_array_equal(t.value_mask, [True, True, True, False])
    np.testing.assert_array_equal(t.policy_mask, [True, True, False, False])
    np.testing.assert_allclose(t.reward[:3], [3.0, 4.0, 5.0])


def test_truncated_game_without_final_value_bootstraps_from_last_search_value():
    import gymnasium as gym

    from muzero_gym.game import Game, ObservationEncoder

    game = Game(2, ObservationEncoder(gym.spaces.Box(-1, 1, (1,))))
    game.start(np.zeros(1))
    for r, v in zip(REWARDS, ROOT_VALUES):
        game.store_search_statistics(v, [0.5, 0.5])
        game.record_step(0, r, np.zeros(1), False, r == REWARDS[-1])
    assert game.truncated and not game.terminated
    t = game.make_target(4, 0, 2, 0.5)
    np.testing.assert_allclose(t.value, [5.0 + 0.5 * 50.0])


def test_discount_one_and_n_beyond_the_end_is_the_monte_carlo_return():
    t = target(True, index=0, k=3, td=10, discount=1.0, rewards=np.ones(3),
               to_play=np.zeros(4, dtype=int), root_values=[7.0, 7.0, 7.0])
    np.testing.assert_allclose(t.value, [3.0, 2.0, 1.0, 0.0])


def test_discount_below_one_with_n_larger_than_remaining_episode():
    t = target(True, index=1, k=0, td=50, discount=0.9, rewards=np.array([1.0, 1.0, 1.0]),
               to_play=np.zeros(4, dtype=int), root_values=[5.0, 5.0, 5.0])
    np.testing.assert_allclose(t.value, [1.0 + 0.9])


def test_two_player_values_are_signed_by_the_player_to_move():
    rewards = np.array([0.0, 0.0, 1.0])  # player 0 wins with the last move
    to_play = np.array([0, 1, 0, 1])
    t = target(True, index=0, k=3, td=10, discount=1.0, rewards=rewards, to_play=to_play,
               root_values=[0.0, 0.0, 0.0])
    np.testing.assert_allclose(t.value, [1.0, -1.0, 1.0, 0.0])
    # reward targets stay in the frame of the player who acted
    np.testing.assert_allclose(t.reward, [0.0, 0.0, 0.0, 1.0])


def test_two_player_bootstrap_value_is_signed():
    rewards = np.array([0.0, 0.0, 0.0, 0.0])
    to_play = np.array([0, 1, 0, 1, 0])
    values = [0.1, 0.2, 0.3, 0.4]
    t = target(True, index=0, k=1, td=1, discount=1.0, rewards=rewards, to_play=to_play,
               root_values=values)
    # j=0 bootstraps from state 1, whose value belongs to the other player
    np.testing.assert_allclose(t.value, [-0.2, -0.3])


def reference_make_target(rewards, root_values, child_visits, state_index, num_unroll_steps,
                          td_steps, discount, num_actions):
    """The reference pseudocode's Game.make_target (single player, every end terminal)."""
    out = []
    for current_index in range(state_index, state_index + num_unroll_steps + 1):
        bootstrap_index = current_index + td_steps
        if bootstrap_index < len(root_values):
            value = root_values[bootstrap_index] * discount**td_steps
        else:
            value = 0
        for i, reward in enumerate(rewards[current_index:bootstrap_index]):
            value += reward * discount**i
        if 0 < current_index <= len(rewards):
            last_reward = rewards[current_index - 1]
        else:
            last_reward = 0
        if current_index < len(root_values):
            out.append((value, last_reward, child_visits[current_index], True))
        else:
            out.append((value, last_reward, [0] * num_actions, False))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_agrees_with_reference_make_target_on_terminated_episodes(seed):
    rng = np.random.default_rng(seed)
    length = int(rng.integers(1, 30))
    rewards = rng.normal(size=length)
    root_values = rng.normal(size=length)
    policies = rng.dirichlet(np.ones(4), size=length)
    discount = float(rng.choice([1.0, 0.99, 0.5]))
    td = int(rng.integers(1, 12))
    index = int(rng.integers(0, length))
    mine = targets.make_target(rewards, np.zeros(length + 1, dtype=int),
                               np.append(root_values, 0.0), policies, True, index, 5, td,
                               discount)
    ref = reference_make_target(list(rewards), list(root_values), list(policies), index, 5, td,
                                discount, 4)
    np.testing.assert_allclose(mine.value, [r[0] for r in ref], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mine.reward, [r[1] for r in ref])
    np.testing.assert_allclose(mine.policy, np.array([r[2] for r in ref], dtype=float))
    np.testing.assert_array_equal(mine.policy_mask, [r[3] for r in ref])


@pytest.mark.parametrize("seed", range(8))
def test_windows_with_their_own_horizons_equal_the_whole_games_parts(seed):
    """n_step_window_parts of windows cut anywhere in a game, each with its own n, are
    bit for bit n_step_parts (and mix_own_values) of the whole game with that n."""
    rng = np.random.default_rng(seed)
    length = int(rng.integers(1, 20))
    players = 1 + seed % 2
    to_play = np.arange(length + 1) % 2 if players == 2 else np.zeros(length + 1, dtype=int)
    rewards = rng.normal(size=length) if players == 1 else rng.integers(-1, 2, length) * 1.0
    state_values = rng.normal(size=length + 1)
    terminated = bool(seed % 3 == 0)
    discount = float(rng.choice([1.0, 0.997, 0.9]))
    mix = 0.3 if seed % 4 == 1 else 0.0
    num_states = 4
    starts = np.arange(length + 1)
    horizons = rng.integers(1, 9, size=starts.size)
    width = num_states - 1 + int(horizons.max())
    window_rewards = np.zeros((starts.size, width))
    window_players = np.zeros((starts.size, width + 1), dtype=int)
    window_values = np.zeros((starts.size, width + 1))
    for b, start in enumerate(starts):
        end = min(length, start + width)
        window_rewards[b, :end - start] = rewards[start:end]
        window_players[b, :end + 1 - start] = to_play[start:end + 1]
        window_values[b, :end + 1 - start] = state_values[start:end + 1]
    parts = targets.n_step_window_parts(
        window_rewards, window_players, window_values, length - starts,
        np.full(starts.size, terminated), horizons, num_states, discount, mix)
    for b, start in enumerate(starts):
        whole = targets.mix_own_values(targets.n_step_parts(
            rewards, to_play, terminated, int(horizons[b]), discount), state_values, mix)
        for q in range(num_states):
            state = start + q
            if state > length:  # past the final state: no target
                assert (parts.reward_sum[b, q], parts.bootstrap_index[b, q],
                        parts.bootstrap_scale[b, q]) == (0.0, -1, 0.0)
                continue
            assert parts.reward_sum[b, q] == whole.reward_sum[state]
            assert parts.bootstrap_scale[b, q] == whole.bootstrap_scale[state]
            index = whole.bootstrap_index[state]
            assert parts.bootstrap_index[b, q] == (index - start if index >= 0 else -1)


def test_bad_inputs_are_rejected():
    with pytest.raises(ValueError, match="to_play"):
        targets.n_step_parts(np.ones(3), np.zeros(3), True, 2, 1.0)
    with pytest.raises(ValueError, match="td_steps"):
        targets.n_step_parts(np.ones(3), np.zeros(4), True, 0, 1.0)
