"""PettingZoo's classic games through :func:`muzero_gym.envs.pettingzoo.from_aec`: the same
games as muzero_gym's own Connect Four and TicTacToe, and trainable by id with no code."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pettingzoo", reason="the [pettingzoo] extra is not installed")
pytest.importorskip("pygame", reason="PettingZoo's classic games import pygame")

from muzero_gym.config import EnvConfig, load_config  # noqa: E402
from muzero_gym.environment import make_env  # noqa: E402
from muzero_gym.envs.board import IllegalMoveError  # noqa: E402


@pytest.mark.parametrize("theirs, ours", [("pettingzoo:connect_four_v3",
                                           "muzero_gym/ConnectFour-v0"),
                                          ("pettingzoo:tictactoe_v3",
                                           "muzero_gym/TicTacToe-v0")])
def test_random_games_match_our_own_env_move_by_move(theirs, ours):
    rng = np.random.default_rng(0)
    adapted, own = make_env(EnvConfig(id=theirs)), make_env(EnvConfig(id=ours))
    for game in range(20):
        a_obs, a_info = adapted.reset(seed=game)
        o_obs, o_info = own.reset(seed=game)
        done = False
        while not done:
            np.testing.assert_array_equal(a_info["action_mask"], o_info["action_mask"])
            assert a_info["to_play"] == o_info["to_play"]
            if theirs.endswith("connect_four_v3"):  # the same planes: mover's, opponent's
                np.testing.assert_array_equal(a_obs, o_obs[:2])
            action = int(rng.choice(np.flatnonzero(o_info["action_mask"])))
            a_obs, a_reward, a_done, _, a_info = adapted.step(action)
            o_obs, o_reward, o_done, _, o_info = own.step(action)
            assert (a_reward, a_done) == (o_reward, o_done)
            done = o_done
    with pytest.raises(IllegalMoveError):
        adapted.step(0)  # the game is over


def test_state_copies_let_the_simulator_search_use_it():
    env = make_env(EnvConfig(id="pettingzoo:tictactoe_v3"))
    env.reset(seed=0)
    env.step(4)
    state = env.unwrapped.get_state()
    env.step(0)
    env.unwrapped.set_state(state)
    _, info = env.unwrapped._observation()
    assert info["action_mask"][0] and not info["action_mask"][4]


def test_training_on_a_pettingzoo_id_needs_no_code(tmp_path):
    from muzero_gym.agents.muzero import MuZeroAgent

    config = load_config("tictactoe", ["env.id=pettingzoo:tictactoe_v3",
                                       "search.num_simulations=4", "env.num_envs=2",
                                       "train.eval_interval=0", "train.warmup_transitions=10",
                                       "train.batch_size=8", "log.progress=false"])
    agent = MuZeroAgent(config, run_dir=tmp_path / "run")
    agent.learn(40)
    assert agent.training_steps > 0 and agent.episodes > 0
    assert load_config("pettingzoo:connect_four_v3").env.id == "pettingzoo:connect_four_v3"
