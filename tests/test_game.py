"""Game: space encoding, legal actions, players, stacking, terminated vs truncated."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from muzero_gym.config import EnvConfig
from muzero_gym.environment import EnvError, make_env
from muzero_gym.game import Game, ObservationEncoder, SpaceError, stacked_shape


def test_box_vector_observations_are_flattened_float32():
    enc = ObservationEncoder(spaces.Box(-1, 1, (2, 3)))
    out = enc.encode(np.arange(6).reshape(2, 3))
    assert enc.shape == (6,) and out.dtype == np.float32
    np.testing.assert_array_equal(out, np.arange(6))


def test_images_are_channels_first_uint8():
    hwc = ObservationEncoder(spaces.Box(0, 255, (96, 96, 3), np.uint8))
    assert hwc.is_image and hwc.shape == (3, 96, 96)
    frame = np.random.default_rng(0).integers(0, 255, (96, 96, 3), dtype=np.uint8)
    np.testing.assert_array_equal(hwc.encode(frame)[1], frame[:, :, 1])
    gray = ObservationEncoder(spaces.Box(0, 255, (84, 84), np.uint8))
    assert gray.shape == (1, 84, 84)
    chw = ObservationEncoder(spaces.Box(0, 255, (4, 84, 84), np.uint8))
    assert chw.shape == (4, 84, 84)


def test_float_planes_keep_their_shape_and_stack_on_channels():
    enc = ObservationEncoder(spaces.Box(0.0, 1.0, (3, 6, 7), np.float32))
    assert enc.is_planes and enc.is_spatial and not enc.is_image
    assert enc.shape == (3, 6, 7) and enc.dtype == np.float32
    board = np.random.default_rng(0).random((3, 6, 7)).astype(np.float32)
    np.testing.assert_array_equal(enc.encode(board), board)
    assert stacked_shape(enc, 2, True, 7) == (8, 6, 7)
    game = Game(7, enc, num_stacked_observations=2, stack_actions=True)
    game.start(board)
    game.record_step(3, 0.0, board + 1, False, False)
    stack = game.make_image()
    assert stack.shape == (8, 6, 7) and stack.dtype == np.float32
    np.testing.assert_array_equal(stack[:3], board)
    np.testing.assert_array_equal(stack[3:6], board + 1)
    assert (stack[6] == 0).all() and np.allclose(stack[7], 4 / 7)  # none, then action 3 of 7


def test_bool_planes_are_held_as_bytes_and_read_by_the_model_as_floats():
    """MinAtar's planes: stored as uint8 0/1 (a quarter of float32's memory), model inputs
    float32 with the same values."""
    enc = ObservationEncoder(spaces.Box(0, 1, (10, 10, 4), np.bool_), "channels_last")
    assert enc.is_planes and enc.shape == (4, 10, 10)
    assert enc.dtype == np.uint8 and enc.input_dtype == np.float32
    rng = np.random.default_rng(0)
    frames = rng.random((2, 10, 10, 4)) < 0.3
    planes = enc.encode(frames[0])
    assert planes.dtype == np.uint8
    np.testing.assert_array_equal(planes, frames[0].transpose(2, 0, 1))
    np.testing.assert_array_equal(enc.encode_batch(frames)[1], frames[1].transpose(2, 0, 1))
    for stack_actions in (False, True):
        game = Game(3, enc, num_stacked_observations=2, stack_actions=stack_actions)
        game.start(frames[0])
        game.record_step(1, 0.0, frames[1], False, False)
        stack = game.make_image()
        assert stack.dtype == np.float32
        np.testing.assert_array_equal(stack[:8], np.concatenate(
            [frames[0].transpose(2, 0, 1), frames[1].transpose(2, 0, 1)]).astype(np.float32))
        if stack_actions:
            assert (stack[8] == 0).all() and np.allclose(stack[9], 2 / 3)  # none, action 1


def test_discrete_multibinary_tuple_and_dict_are_flattened():
    assert ObservationEncoder(spaces.Discrete(4, start=1)).encode(2).tolist() == [0, 1, 0, 0]
    assert ObservationEncoder(spaces.MultiBinary(3)).encode([1, 0, 1]).tolist() == [1, 0, 1]
    tup = ObservationEncoder(spaces.Tuple((spaces.Discrete(2), spaces.Box(0, 1, (2,)))))
    assert tup.shape == (4,)
    assert tup.encode((1, np.array([0.5, 0.25]))).tolist() == [0, 1, 0.5, 0.25]
    dic = ObservationEncoder(spaces.Dict({"a": spaces.Discrete(3), "b": spaces.MultiBinary(2)}))
    assert dic.encode({"a": 2, "b": [1, 1]}).tolist() == [0, 0, 1, 1, 1]


def test_unsupported_spaces_get_one_clear_error():
    with pytest.raises(SpaceError, match="MultiDiscrete.*supported are Box, Discrete"):
        ObservationEncoder(spaces.MultiDiscrete([2, 3]))
    with pytest.raises(SpaceError, match="needs a Discrete action space.*Box"):
        make_env(EnvConfig(id="Pendulum-v1"))


def test_unknown_env_id_is_a_clear_error():
    with pytest.raises(EnvError, match="cannot create env 'NoSuchEnv-v9'"):
        make_env(EnvConfig(id="NoSuchEnv-v9"))


def test_action_mask_from_info_taxi():
    env = make_env(EnvConfig(id="Taxi-v4"))
    game = Game.for_env(env)
    game.reset(seed=0)
    mask = game.legal_action_mask()
    assert mask.dtype == np.bool_ and mask.shape == (6,)
    assert 0 < mask.sum() < 6  # Taxi-v4 forbids some moves at the start
    assert game.encoder.shape == (500,)
    action = game.legal_actions()[0]
    game.store_search_statistics(0.0, np.ones(6) / 6)
    game.apply(action)
    assert len(game) == 1 and len(game.observations) == 2


def test_to_play_from_info_and_alternation_without_it():
    enc = ObservationEncoder(spaces.Box(0, 1, (1,)))
    game = Game(2, enc, num_players=2)
    game.start(np.zeros(1))
    game.record_step(0, 0.0, np.zeros(1), False, False)
    game.record_step(1, 0.0, np.zeros(1), False, False, {"to_play": 1})
    assert game.to_play_history == [0, 1, 1]


def test_terminated_and_truncated_are_kept_apart():
    env = make_env(EnvConfig(id="CartPole-v1", max_episode_steps=5))
    game = Game.for_env(env)
    game.reset(seed=0)
    while not game.done:
        game.store_search_statistics(1.0, [0.5, 0.5])
        game.apply(len(game) % 2)
    assert game.truncated and not game.terminated and len(game) == 5
    np.testing.assert_allclose(game.state_values(), [1.0] * 6)

    game = Game.for_env(make_env(EnvConfig(id="CartPole-v1")))
    game.reset(seed=0)
    while not game.done:
        game.store_search_statistics(1.0, [0.5, 0.5])
        game.apply(1)  # always push right: the pole falls
    assert game.terminated and not game.truncated
    assert game.state_values()[-1] == 0.0


def test_make_image_stacks_observations_and_actions():
    enc = ObservationEncoder(spaces.Box(-10, 10, (2,)))
    game = Game(3, enc, num_stacked_observations=3, stack_actions=True)
    game.start(np.array([1.0, 1.0]))
    game.record_step(2, 0.0, np.array([2.0, 2.0]), False, False)
    game.record_step(0, 0.0, np.array([3.0, 3.0]), False, False)
    image = game.make_image(1)
    # frames: obs0 (repeated before the start), obs0, obs1; actions: none, none, 2
    np.testing.assert_array_equal(image[:6], [1, 1, 1, 1, 2, 2])
    np.testing.assert_array_equal(image[6:], [0, 0, 0, 0, 0, 0, 0, 0, 1])
    np.testing.assert_array_equal(game.make_image()[:6], [1, 1, 2, 2, 3, 3])

    images = ObservationEncoder(spaces.Box(0, 255, (4, 4), np.uint8))
    game = Game(4, images, num_stacked_observations=2, stack_actions=True)
    game.start(np.full((4, 4), 7, np.uint8))
    game.record_step(3, 0.0, np.full((4, 4), 9, np.uint8), False, False)
    stack = game.make_image(1)
    assert stack.shape == (4, 4, 4) and stack.dtype == np.uint8
    assert stack[0, 0, 0] == 7 and stack[1, 0, 0] == 9
    assert stack[2, 0, 0] == 0 and stack[3, 0, 0] == 255  # action 3 of 4 -> 255


def test_recording_errors():
    enc = ObservationEncoder(spaces.Box(0, 1, (1,)))
    game = Game(2, enc)
    game.start(np.zeros(1))
    with pytest.raises(ValueError, match="search_policy has 3 entries"):
        game.store_search_statistics(0.0, [0.2, 0.3, 0.5])
    game.record_step(0, 1.0, np.zeros(1), True, False)
    with pytest.raises(RuntimeError, match="game is over"):
        game.record_step(0, 1.0, np.zeros(1), True, False)
    with pytest.raises(ValueError, match="action_mask"):
        Game(2, enc).start(np.zeros(1), {"action_mask": np.ones(3)})


def test_discrete_action_space_with_offset_is_mapped(monkeypatch):
    class OffsetEnv(gym.Env):
        observation_space = spaces.Box(0, 1, (1,))
        action_space = spaces.Discrete(2, start=5)

        def reset(self, *, seed=None, options=None):
            return np.zeros(1, dtype=np.float32), {}

        def step(self, action):
            assert action in (5, 6)
            return np.zeros(1, dtype=np.float32), float(action), True, False, {}

    game = Game.for_env(OffsetEnv())
    game.reset()
    game.store_search_statistics(0.0, [1.0, 0.0])
    assert game.apply(1) == 6.0
