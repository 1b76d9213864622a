"""Learning runs (slow; run with ``pytest -m slow``)."""

from __future__ import annotations

import pytest

from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.config import load_config


@pytest.mark.slow
def test_cartpole_preset_learns():
    agent = MuZeroAgent(load_config("cartpole", ["train.eval_interval=0"]))
    untrained = agent.evaluate(10, seed=0).mean()
    agent.learn(10_000, progress=False)
    trained = agent.evaluate(10, seed=0).mean()
    assert trained > max(3 * untrained, 50.0), (untrained, trained)
