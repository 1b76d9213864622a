"""MinAtar (the [minatar] extra): its planes read channels-last and a short run trains."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("minatar", reason="the [minatar] extra is not installed")

from muzero_gym.agents.muzero import MuZeroAgent  # noqa: E402
from muzero_gym.config import load_config  # noqa: E402
from muzero_gym.environment import make_env  # noqa: E402
from muzero_gym.game import ObservationEncoder  # noqa: E402


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
    must be the ones minatar.gym.register_envs makes."""
    code = (
        "import sys, gymnasium as gym\n"
        "from muzero_gym.environment import register_envs\n"
        "register_envs()\n"
        "assert 'minatar' not in sys.modules\n"
        "ours = {k: (s.entry_point, s.kwargs) for k, s in gym.registry.items()"
        " if k.startswith('MinAtar/')}\n"
        "for k in ours: del gym.registry[k]\n"
        "import minatar.gym\n"
        "minatar.gym.register_envs()\n"
        "theirs = {k: (s.entry_point, s.kwargs) for k, s in gym.registry.items()"
        " if k.startswith('MinAtar/')}\n"
        "assert ours == theirs and len(ours) == 10, (ours, theirs)\n")
    subprocess.run([sys.executable, "-c", code], check=True)
