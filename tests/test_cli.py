"""The command line and the Python surface as a new user meets them: bad input is one line and
exit status 2 with nothing written, own envs by ``module:EnvId``, ``predict`` on any preset."""

from __future__ import annotations

import gymnasium as gym
import pytest

from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.cli import main
from muzero_gym.config import ConfigError, load_config

TINY = ["search.num_simulations=4", "env.num_envs=2", "train.batch_size=8",
        "train.warmup_transitions=20", "train.eval_interval=0", "train.eval_episodes=2",
        "log.checkpoint_interval=50", "replay.capacity=2000", "log.progress=false"]


def sets(*overrides: str) -> list[str]:
    return [x for s in [*TINY, *overrides] for x in ("--set", s)]


@pytest.mark.parametrize("argv, message", [
    (["--env-steps", "-5"], "--env-steps = -5: must be >= 1"),
    (["--env-steps", "0"], "--env-steps = 0: must be >= 1"),
    (["--seed", str(2**80)], "train.seed = 1208925819614629174706176: allowed range"),
    (["--run-name", "../x"], "must be a plain folder name"),
    (["--run-name", "a/b"], "must be a plain folder name"),
    (["--set", "log.run_name=.."], "must be a plain folder name"),
])
def test_bad_train_arguments_are_one_line_and_write_nothing(argv, message, tmp_path, capsys):
    assert main(["train", "cartpole", "--logdir", str(tmp_path / "logs"), *argv,
                 *sets()]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not tmp_path.joinpath("logs").exists() and not tmp_path.parent.joinpath("x").exists()


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("cli")
    assert main(["train", "cartpole", "--env-steps", "30", "--logdir", str(logdir),
                 "--run-name", "r", "--no-progress", *sets()]) == 0
    return logdir / "r"


@pytest.mark.parametrize("argv, message", [
    (["--opponent", "random"], "--opponent: for two-player games; CartPole-v1 has one player"),
    (["--depth", "3", "--opening-plies", "2"], "--depth, --opening-plies: for two-player"),
    (["--episodes", "0"], "--episodes = 0: must be >= 1"),
    (["--simulations", "0"], "--simulations = 0: must be >= 1"),
    (["--draw-value", "-0.5"], "search.eval_draw_value needs search.simulator = true"),
    (["--env", "Acrobot-v1"], "is for env 'CartPole-v1', not 'Acrobot-v1'"),
])
def test_bad_eval_arguments_are_one_line(argv, message, cartpole_run, capsys):
    assert main(["eval", str(cartpole_run), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_render_without_pygame_is_one_line(cartpole_run, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pygame", None)  # as if it were not installed
    assert main(["eval", str(cartpole_run), "--render", "--episodes", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot render CartPole-v1" in err and "pygame" in err
    assert len(err.splitlines()) == 1, err


def test_an_env_module_that_cannot_be_imported_is_one_line(capsys):
    with pytest.raises(ConfigError, match="cannot import module 'no_such_module'"):
        load_config("no_such_module:Corridor-v0")
    assert main(["train", "no_such_module:X-v0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot import module 'no_such_module'" in err and len(err.splitlines()) == 1


def test_predict_on_a_true_simulator_preset_takes_the_env():
    agent = MuZeroAgent(load_config("tictactoe", ["search.num_simulations=8"]))
    env = gym.make("muzero_gym/TicTacToe-v0")
    observation, info = env.reset(seed=0)
    for move in (4, 0, 8):
        observation, _, _, _, info = env.step(move)
    with pytest.raises(ValueError, match="pass the env it plays"):
        agent.predict(observation, info=info)
    action = agent.predict(observation, info=info, env=env)
    assert info["action_mask"][action]
    assert agent.predict(observation, info=info, state=env.unwrapped.get_state()) == action


def test_evaluate_refuses_two_player_games():
    agent = MuZeroAgent(load_config("tictactoe", ["search.num_simulations=2"]))
    with pytest.raises(ValueError, match="two-player game.*play_against"):
        agent.evaluate(2)


def test_two_player_episode_returns_are_the_first_players_results():
    """The return of a two-player episode (charts/episodic_return, the progress line) is the
    first player's result, not the last mover's reward (always 1 after a win)."""
    agent = MuZeroAgent(load_config("tictactoe", ["search.num_simulations=4", "env.num_envs=4",
                                                  "replay.segment_length=0"]))
    selfplay = agent._start_selfplay()
    returns, games = [], []
    for _ in range(40):
        stats = selfplay.step()
        returns += stats.episode_returns
        games += stats.finished
    games += [g for g, pending in zip(selfplay.games, selfplay.pending_reset) if pending]

    def first_players_result(game):
        return sum(r if game.to_play(i) == 0 else -r for i, r in enumerate(game.rewards))

    assert len(returns) == len(games) >= 8
    assert sorted(returns) == sorted(first_players_result(g) for g in games)
    assert min(returns) == -1.0 and max(returns) == 1.0
