"""Atari through ale-py: protocol semantics of the native vector env and of muzero_gym's own
handling (frame stacks rebuilt from stored frames, lives, reward clipping), and a tiny Pong
training run."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.config import ReplayConfig, load_config
from muzero_gym.environment import EnvError, make_env, make_vector_env, register_envs
from muzero_gym.game import Game, ObservationEncoder
from muzero_gym.replay import ReplayBuffer

FAST = ["env.num_env_threads=1", "train.num_threads=1"]


def ale_config(preset="atari100k", extra=()):
    return load_config(preset, [*FAST, *extra]).env


def native(config_env, num_envs=2, **fixed):
    """ale-py's vector env directly, with settings muzero_gym does not allow (stacking)."""
    from muzero_gym.atari import FIXED, ale_settings

    register_envs()
    return gym.make_vec(config_env.id, num_envs=num_envs, vectorization_mode="vector_entry_point",
                        num_threads=1, **ale_settings(config_env), **{**FIXED, **fixed})


def random_actions(rng, envs, steps):
    return [rng.integers(0, envs.single_action_space.n, envs.num_envs) for _ in range(steps)]


def test_frame_skip_advances_the_emulator_by_that_many_frames():
    for skip in (4, 3):
        envs = make_vector_env(ale_config(extra=[f"env.kwargs={{frameskip = {skip}, "
                                                 "noop_max = 0}"]), 2)
        _, info = envs.reset(seed=0)
        start = info["episode_frame_number"].copy()
        for actions in random_actions(np.random.default_rng(0), envs, 5):
            _, _, terminated, truncated, info = envs.step(actions)
            assert not terminated.any() and not truncated.any()
        assert (info["episode_frame_number"] - start == 5 * skip).all()
        envs.close()


def test_max_pool_takes_the_brighter_of_the_last_two_frames():
    pooled = make_vector_env(ale_config(extra=["env.kwargs={noop_max = 0, maxpool = true}"]), 2)
    plain = make_vector_env(ale_config(extra=["env.kwargs={noop_max = 0, maxpool = false}"]), 2)
    pooled.reset(seed=0)
    plain.reset(seed=0)
    differs = 0
    for actions in random_actions(np.random.default_rng(1), pooled, 60):
        a = pooled.step(actions)[0].astype(int)
        b = plain.step(actions)[0].astype(int)
        assert (a >= b).all()
        differs += bool((a != b).any())
    assert differs > 30  # Breakout's ball and paddle flicker between frames


def test_no_op_starts_vary_the_first_frame_within_the_limit():
    envs = make_vector_env(ale_config(extra=["env.kwargs={noop_max = 30}"]), 8)
    _, info = envs.reset(seed=3)
    frames = info["episode_frame_number"]
    assert ((0 <= frames) & (frames <= 30)).all() and len(set(frames.tolist())) > 1
    envs.close()
    none = make_vector_env(ale_config(extra=["env.kwargs={noop_max = 0}"]), 4)
    assert (none.reset(seed=3)[1]["episode_frame_number"] == 0).all()


def test_stacks_rebuilt_from_stored_frames_equal_the_envs_own_stacks():
    config = ale_config(extra=["env.kwargs={noop_max = 0}"])
    ours, theirs = make_vector_env(config, 2), native(config, stack_num=4)
    obs, _ = ours.reset(seed=1)
    theirs.reset(seed=1)
    encoder = ObservationEncoder(ours.single_observation_space)
    games = [Game(int(ours.single_action_space.n), encoder, num_stacked_observations=4)
             for _ in range(2)]
    for i, game in enumerate(games):
        game.start(obs[i])
    for step, actions in enumerate(random_actions(np.random.default_rng(2), ours, 12)):
        obs, rewards, terminated, truncated, _ = ours.step(actions)
        stacked = theirs.step(actions)[0]
        for i, game in enumerate(games):
            game.store_search_statistics(0.0, np.ones(game.num_actions) / game.num_actions)
            game.record_step(int(actions[i]), float(rewards[i]), obs[i], False, False)
            if step >= 3:  # ale-py pads its first stacks with black frames, Game with frame 0
                assert np.array_equal(game.make_image(), stacked[i])


def test_single_env_preprocessing_matches_the_vector_env():
    config = ale_config(extra=["env.kwargs={noop_max = 0}"])
    single, vector = make_env(config), make_vector_env(config, 1)
    a, _ = single.reset(seed=0)
    b, _ = vector.reset(seed=0)
    assert np.array_equal(ObservationEncoder(single.observation_space).encode(a), b[0])
    for action in np.random.default_rng(3).integers(0, 4, 20):
        a = single.step(int(action))[0]
        b = vector.step(np.array([action]))[0]
    assert np.array_equal(a[None], b[0])


def test_lost_lives_end_training_games_but_not_episodes():
    config = load_config("breakout", [*FAST, "env.num_envs=1", "search.num_simulations=2",
                                      "train.warmup_transitions=1000000", "train.eval_interval=0",
                                      "replay.segment_length=0"])  # whole games
    agent = MuZeroAgent(config)
    selfplay = agent._start_selfplay()
    games, returns, lengths = [], [], []
    while len(games) < 5:  # the last game of the episode comes out on the step after it ends
        stats = selfplay.step()
        games += stats.finished
        returns += stats.episode_returns
        lengths += stats.episode_lengths
    # Breakout has 5 lives: one episode, five training games, each ended as terminated and each
    # starting from the frame where the previous one lost its life.
    assert len(returns) == 1 and all(g.terminated for g in games)
    assert lengths[0] == sum(len(g) for g in games)
    assert returns[0] == sum(sum(g.rewards) for g in games)
    for before, after in zip(games, games[1:]):
        assert np.array_equal(after.observations[0], before.observations[-1])
    agent.close()


def test_reward_clipping_applies_to_training_targets_only():
    encoder = ObservationEncoder(gym.spaces.Box(-1.0, 1.0, (2,), np.float32))
    game = Game(2, encoder)
    game.start(np.zeros(2, np.float32))
    for reward in (4.0, -7.0, 0.0):
        game.store_search_statistics(0.0, np.array([0.5, 0.5]))
        game.record_step(0, reward, np.zeros(2, np.float32), reward == 0.0, False)
    replay = ReplayBuffer(ReplayConfig(capacity=100, prioritized=False), num_actions=2,
                          num_unroll_steps=2, td_steps=5, discount=1.0, reward_clipping=True)
    replay.add_game(game)
    batch = replay.sample(4, np.random.default_rng(0))
    assert game.rewards == [4.0, -7.0, 0.0]  # the game keeps the raw rewards
    assert set(np.unique(batch.target_reward[batch.value_mask])) <= {-1.0, 0.0, 1.0}
    assert set(np.unique(batch.target_value[batch.value_mask])) <= {-1.0, 0.0, 1.0}


def test_muzero_gym_fixes_stacking_clipping_and_lives_itself():
    with pytest.raises(EnvError, match="env.num_stacked_observations"):
        make_vector_env(ale_config(extra=["env.kwargs={stack_num = 4}"]))
    with pytest.raises(EnvError, match="unknown Atari settings"):
        make_vector_env(ale_config(extra=["env.kwargs={frame_skip = 4}"]))
    with pytest.raises(EnvError, match="needs an ALE/ id"):
        make_vector_env(load_config("cartpole", ["env.vectorization=ale"]).env)


def test_tiny_pong_learns_before_any_game_ends_and_writes_logs_and_a_checkpoint(tmp_path):
    """A Pong game lasts hundreds of moves; its segments reach the replay while it runs, so
    the learner starts after the warm-up, long before the first game ends."""
    config = load_config("pong", [*FAST, "env.num_envs=2", "search.num_simulations=4",
                                  "train.batch_size=8", "train.warmup_transitions=100",
                                  "train.eval_interval=0", "log.log_interval=50",
                                  "replay.segment_length=50"])
    agent = MuZeroAgent(config, run_dir=tmp_path / "run")
    agent.learn(300, progress=False)
    assert agent.episodes == 0 and agent.replay.num_games_added == 0
    assert len(agent.replay) >= 200 and agent.training_steps > 0
    stored = agent.replay.games()[0]
    assert stored.observations[0].shape == (1, 96, 96) and stored.observations[0].dtype == np.uint8
    assert (tmp_path / "run" / "checkpoint.pt").exists()
    events = EventAccumulator(str(tmp_path / "run"))
    events.Reload()
    assert {"replay/bytes", "losses/total"} <= set(events.Tags()["scalars"])
    agent.close()


def test_human_normalized_scores_of_the_atari_100k_games():
    from muzero_gym.atari import RANDOM_AND_HUMAN_SCORES, human_normalized_score

    assert len(RANDOM_AND_HUMAN_SCORES) == 26
    assert human_normalized_score("ALE/Pong-v5", 14.6) == pytest.approx(1.0)
    assert human_normalized_score("ALE/Pong-v5", -20.7) == pytest.approx(0.0)
    assert human_normalized_score("ALE/MsPacman-v5", 307.3 + (6951.6 - 307.3) / 2) == \
        pytest.approx(0.5)
    assert human_normalized_score("ALE/Tennis-v5", 0.0) is None
    assert human_normalized_score("CartPole-v1", 100.0) is None
    register_envs()
    for name in RANDOM_AND_HUMAN_SCORES:  # every name is a real ALE id
        assert f"ALE/{name}-v5" in gym.registry
