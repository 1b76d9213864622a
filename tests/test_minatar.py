"""MinAtar (the [minatar] extra): its planes read channels-last and a short run trains."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("minatar", reason="the [minatar] extra is not installed")

from muzero_gym.agents.muzero import MuZeroAgent  # noqa: E402
from muzero_gym.config import ConfigError, load_config  # noqa: E402
from muzero_gym.environment import make_env  # noqa: E402
from muzero_gym.game import ObservationEncoder  # noqa: E402
from muzero_gym.symmetry import game_symmetries  # noqa: E402


@pytest.mark.parametrize("game", ["asterix", "breakout", "freeway", "seaquest",
                                  "space_invaders"])
def test_every_game_has_a_preset_whose_planes_are_channels_first(game):
    config = load_config(f"minatar_{game}")
    env = make_env(config.env)
    raw, _ = env.reset(seed=0)
    encoder = ObservationEncoder(env.observation_space, config.env.observation_layout)
    planes = encoder.encode(raw)
    assert planes.shape == (raw.shape[2], 10, 10)
    np.testing.assert_array_equal(planes, np.transpose(raw, (2, 0, 1)))
    assert load_config(config.env.id).preset == f"minatar_{game}"  # the id picks the preset


def test_a_short_minatar_run_trains(tmp_path):
    config = load_config("minatar_breakout", [
        "env.num_envs=4", "search.num_simulations=4", "train.batch_size=16",
        "train.warmup_transitions=100", "replay.segment_length=20", "train.eval_interval=0",
        "log.progress=false"])
    agent = MuZeroAgent(config, run_dir=tmp_path / "run")
    agent.learn(300)
    assert agent.training_steps > 0 and agent.episodes > 0
    assert len(agent.evaluate(2)) == 2


def test_minatar_ids_are_minatars_own_and_registering_them_does_not_import_it():
    """muzero_gym registers MinAtar's ids by name (importing minatar costs seconds); the specs
    must be the ones minatar.gym.register_envs makes, with minatar's env extended by
    muzero_gym's MinAtarEnv (which adds symmetries()) as the entry point."""
    code = (
        "import sys, gymnasium as gym\n"
        "from muzero_gym.environment import register_envs\n"
        "register_envs()\n"
        "assert 'minatar' not in sys.modules\n"
        "ours = {k: (s.entry_point, s.kwargs) for k, s in gym.registry.items()"
        " if k.startswith('MinAtar/')}\n"
        "for k in ours: del gym.registry[k]\n"
        "import minatar.gym\n"
        "from muzero_gym.minatar_env import MinAtarEnv\n"
        "assert issubclass(MinAtarEnv, minatar.gym.BaseEnv)\n"
        "minatar.gym.register_envs()\n"
        "theirs = {k: (s.entry_point, s.kwargs) for k, s in gym.registry.items()"
        " if k.startswith('MinAtar/')}\n"
        "assert {k: kwargs for k, (_, kwargs) in ours.items()}"
        " == {k: kwargs for k, (_, kwargs) in theirs.items()} and len(ours) == 10\n"
        "assert {e for e, _ in ours.values()} == {'muzero_gym.minatar_env:MinAtarEnv'}\n"
        "assert {e for e, _ in theirs.values()} == {'minatar.gym:BaseEnv'}\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def _mirror_breakout_state(source, target) -> None:
    """Sets minatar Breakout game ``target`` to the left-right mirror image of ``source``."""
    target.ball_x, target.last_x, target.pos = 9 - source.ball_x, 9 - source.last_x, \
        9 - source.pos
    target.ball_y, target.last_y = source.ball_y, source.last_y
    target.ball_dir = [1, 0, 3, 2][source.ball_dir]  # up-left <-> up-right, etc.
    target.brick_map = source.brick_map[:, ::-1].copy()
    target.strike, target.terminal = source.strike, source.terminal


@pytest.mark.parametrize("env_id", ["MinAtar/Breakout-v1", "MinAtar/Breakout-v0"])
def test_breakout_mirror_maps_games_to_games_move_for_move(env_id):
    """A game and its mirror image, played with mirrored moves (sticky actions included, from
    the same seed), give mirrored planes, equal rewards and equal ends, over whole games."""
    original, mirrored = make_env(load_config("minatar_breakout", [f"env.id={env_id}"]).env), \
        make_env(load_config("minatar_breakout", [f"env.id={env_id}"]).env)
    (symmetry,) = game_symmetries(original)
    encoder = ObservationEncoder(original.observation_space, "channels_last")
    rng = np.random.default_rng(0)
    games, rewards = 0, 0.0
    for episode in range(6):
        obs, _ = original.reset(seed=episode)
        mirrored.reset(seed=episode)
        _mirror_breakout_state(original.unwrapped.game.env, mirrored.unwrapped.game.env)
        obs_m = mirrored.unwrapped.game.state()
        for _ in range(400):
            np.testing.assert_array_equal(symmetry.transform_observation(encoder.encode(obs)),
                                          encoder.encode(obs_m))
            action = int(rng.integers(original.action_space.n))
            obs, reward, terminated, truncated, _ = original.step(action)
            obs_m, reward_m, terminated_m, truncated_m, _ = mirrored.step(
                int(symmetry.action_permutation[action]))
            assert (reward_m, terminated_m, truncated_m) == (reward, terminated, truncated)
            rewards += reward
            if terminated or truncated:
                games += 1
                break
    assert games >= 3 and rewards > 0  # the games ended, and bricks were broken on the way


def test_only_breakout_declares_a_symmetry():
    for game in ("asterix", "freeway", "seaquest", "space_invaders"):
        assert game_symmetries(make_env(load_config(f"minatar_{game}").env)) == []
    with pytest.raises(ConfigError, match="declares no symmetries"):
        MuZeroAgent(load_config("minatar_freeway", ["train.augment_symmetries=true"]))
