"""Two-player MuZero: legal masks below the root, true-simulator search, board-game targets,
matches against opponents, the play command and tiny learn runs on the shipped games."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from muzero_gym import targets
from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.cli import main
from muzero_gym.config import ConfigError, load_config
from muzero_gym.environment import make_env
from muzero_gym.envs.opponents import RandomOpponent
from muzero_gym.mcts import BatchedMCTS, SearchSettings
from muzero_gym.play import play_in_terminal

TINY = ["search.num_simulations=8", "env.num_envs=2", "train.batch_size=8",
        "train.warmup_transitions=20", "train.eval_interval=60", "train.eval_episodes=4",
        "train.eval_opponent=random", "log.log_interval=20", "log.checkpoint_interval=1000"]


def tictactoe_agent(tmp_path=None, extra=()):
    config = load_config("tictactoe", [*TINY, *extra])
    return MuZeroAgent(config, run_dir=None if tmp_path is None else tmp_path / "run")


def test_search_never_takes_an_action_masked_below_the_root():
    num_actions = 4
    search = BatchedMCTS(SearchSettings(num_simulations=60, num_players=2), num_actions)
    taken = []

    def recurrent_fn(parent, action, node):
        taken.append((node, parent.copy(), action.copy()))
        legal = np.zeros((2, num_actions), dtype=np.bool_)
        legal[:, node % num_actions] = True  # a different single legal action at every node
        legal[:, (node + 1) % num_actions] = True
        return np.zeros(2), np.zeros(2), np.zeros((2, num_actions)), legal

    search.run(np.zeros(2), np.zeros((2, num_actions)), recurrent_fn, rng=np.random.default_rng(0))
    legal_at = {0: None}
    for node, parent, action in taken:
        for b in range(2):
            p = int(parent[b])
            if p != 0:  # the root's children were all legal
                assert action[b] in (p % num_actions, (p + 1) % num_actions)
        legal_at[node] = True
    assert len(taken) == 60


def zero_agent(extra=()):
    """A TicTacToe agent whose network says value 0 and uniform priors everywhere."""
    agent = tictactoe_agent(extra=["search.num_simulations=200", *extra])
    with torch.no_grad():
        for p in agent.network.parameters():
            p.zero_()
    agent.sync_selfplay_weights()
    return agent


def position(env, moves):
    obs, info = env.reset()
    for move in moves:
        obs, _, _, _, info = env.step(move)
    return obs, info


@pytest.mark.parametrize("moves,best", [
    ([0, 3, 1, 4], 2),      # X to move completes the top row
    ([0, 4, 8, 2], 6),      # X must block O's diagonal 2-4-6 (and wins no faster elsewhere)
])
def test_simulator_search_finds_wins_and_blocks_with_an_untrained_network(moves, best):
    import gymnasium as gym

    agent = zero_agent()
    env = gym.make("muzero_gym/TicTacToe-v0").unwrapped
    obs, info = position(env, moves)
    game = agent.new_game()
    game.start(obs, info)
    result = agent.search_positions(game.make_image()[None], info["action_mask"][None],
                                    np.array([info["to_play"]]), [env.get_state()])
    assert result.visit_counts[0].argmax() == best
    assert (result.visit_counts[0][~info["action_mask"]] == 0).all()


def test_simulator_search_sees_the_same_nodes_with_batched_and_node_by_node_rules():
    """Connect Four offers ``simulate``; what the search is told about each new node (reward,
    value, priors, legal moves) must not depend on whether a simulation's nodes are made by one
    call of it or by a set_state/step/get_state round per node."""
    import gymnasium as gym

    from muzero_gym.simulator import SimulatorSearchAdapter

    agent = MuZeroAgent(load_config("connect4", ["env.num_envs=2"]))
    torch.manual_seed(0)
    with torch.no_grad():  # random weights: values and priors that depend on the position
        for p in agent.network.parameters():
            p.normal_(0.0, 0.3)
    env = gym.make("muzero_gym/ConnectFour-v0").unwrapped
    rng = np.random.default_rng(1)
    images, masks, to_play, states = [], [], [], []
    for length in (0, 5, 11, 20, 30, 34):
        done = True
        while done:  # a random game of ``length`` moves that is not over yet
            obs, info = position(env, [])
            for _ in range(length):
                obs, _, done, _, info = env.step(
                    int(rng.choice(np.flatnonzero(info["action_mask"]))))
                if done:
                    break
            done = done and length > 0
        images.append(obs)
        masks.append(info["action_mask"])
        to_play.append(info["to_play"])
        states.append(env.get_state())
    adapters = [SimulatorSearchAdapter(agent.network.eval(), agent.encoder,
                                       make_env(agent.config.env), agent.num_actions)
                for _ in range(2)]
    assert adapters[0]._simulate is not None
    adapters[1]._simulate = None
    calls, told = [], [[], []]
    for i, adapter in enumerate(adapters):
        adapter.initial(np.stack(images), states)

        def recurrent_fn(parent, action, node, adapter=adapter, i=i):
            if i == 0:
                calls.append((parent.copy(), action.copy(), node))
            out = adapter.recurrent_fn(parent, action, node)
            told[i].append(out)
            return out

        if i == 0:
            search = BatchedMCTS(SearchSettings(num_simulations=300, num_players=2,
                                                known_bounds=(-1.0, 1.0)), agent.num_actions)
            with torch.inference_mode():
                search.run(*adapter.initial(np.stack(images), states), recurrent_fn,
                           np.stack(masks), np.array(to_play), np.random.default_rng(7))
        else:
            with torch.inference_mode():
                for parent, action, node in calls:
                    recurrent_fn(parent, action, node)
    assert len(told[0]) == len(told[1]) == 300
    assert any(out[0].any() for out in told[0])  # the search reached won positions
    for batched, single in zip(*told):
        for a, b in zip(batched, single):
            np.testing.assert_array_equal(a, b)


def test_simulator_needs_an_env_that_copies_its_state():
    from muzero_gym.simulator import SimulatorError

    with pytest.raises(SimulatorError, match="get_state"):
        MuZeroAgent(load_config("cartpole", ["search.simulator=true"]))
    with pytest.raises(SimulatorError, match="num_stacked_observations"):
        tictactoe_agent(extra=["env.num_stacked_observations=2"])


def test_board_game_targets_are_monte_carlo_results_for_the_player_to_move():
    # X (player 0) wins with its third stone: moves 0..4, X moves at 0, 2, 4.
    rewards = np.array([0.0, 0.0, 0.0, 0.0, 1.0])
    to_play = np.array([0, 1, 0, 1, 0, 1])
    values = np.zeros(6)
    policies = np.full((5, 9), 1 / 9)
    t = targets.make_target(rewards, to_play, values, policies, True, 0, 5, 9, 1.0)
    # X to move: +1; O to move: -1; alternately, then the absorbing terminal state's 0.
    assert t.value.tolist() == [1.0, -1.0, 1.0, -1.0, 1.0, 0.0]
    assert t.reward[1:].tolist() == [0.0, 0.0, 0.0, 0.0, 1.0]
    # Mixed with the searches' own values (each for its player to move): Q + Z averaging.
    searched = np.array([0.2, -0.6, 0.4, -0.8, 0.9, 0.0])
    t = targets.make_target(rewards, to_play, searched, policies, True, 0, 5, 9, 1.0, 0.5)
    np.testing.assert_allclose(t.value, [0.6, -0.8, 0.7, -0.9, 0.95, 0.0])


def test_matches_count_every_game_and_alternate_seats():
    agent = tictactoe_agent(extra=["search.num_simulations=4"])
    result = agent.play_against(RandomOpponent(0), 10, seed=0)
    assert result.games == 10
    assert sum(x[0] for x in (result.wins, result.draws, result.losses)) == 5
    assert result.win_rate + result.draw_rate + result.loss_rate == pytest.approx(1.0)


def test_match_results_count_outcomes_by_seat_and_by_ending():
    from muzero_gym.arena import MatchResult

    result = MatchResult()
    result.add(0, 1, "checkmate")
    result.add(1, -1, "checkmate")
    result.add(1, 0, "512 moves")
    result.add(0, 1)  # an env that does not say how its games end
    assert (result.wins, result.draws, result.losses) == ([2, 0], [0, 1], [0, 1])
    assert result.endings == {"checkmate": [1, 0, 1], "512 moves": [0, 1, 0]}
    assert result.summary() == (
        "4 games: won 2, drawn 1, lost 1 (as first: 2/0/0, as second: 0/1/1); "
        "ended by (won/drawn/lost): checkmate 1/0/1, 512 moves 0/1/0")
    assert MatchResult().summary().endswith("as second: 0/0/0)")


def test_random_openings_are_legal_unfinished_and_varied():
    from muzero_gym.arena import random_openings
    from muzero_gym.environment import make_env

    config = load_config("connect4")
    env = make_env(config.env)
    openings = random_openings(env, 20, 3, np.random.default_rng(0))
    assert len(openings) == 20 and all(len(o) == 3 for o in openings)
    assert all(0 <= a < 7 for o in openings for a in o)
    assert len({tuple(o) for o in openings}) == 20  # no repeats while others remain
    # Connect Four has 7 * 7 openings of 2 plies: all of them, then over again in the same order.
    openings = random_openings(env, 50, 2, np.random.default_rng(0))
    assert sorted(map(tuple, openings[:49])) == [(a, b) for a in range(7) for b in range(7)]
    assert openings[49] == openings[0]
    with pytest.raises(ValueError, match="openings"):  # TicTacToe is over within 9 plies
        random_openings(make_env(load_config("tictactoe").env), 1, 9, np.random.default_rng(0))


class FirstBoardsOpponent:
    """Plays the lowest legal move and remembers the stones on the board at its first turn."""

    def __init__(self):
        self.first_stones: dict[int, int] = {}

    def choose(self, env, legal_mask):
        board = env.unwrapped.get_state().board
        self.first_stones.setdefault(id(env), int((board > 0).sum()))
        return int(np.flatnonzero(legal_mask)[0])


def test_matches_start_after_the_random_opening():
    agent = tictactoe_agent(extra=["search.num_simulations=4"])
    opponent = FirstBoardsOpponent()
    result = agent.play_against(opponent, 6, seed=0, opening_plies=2)
    assert result.games == 6
    # As second player the opponent first moves on the 2-stone opening, as first player after
    # the agent's reply to it.
    assert sorted(opponent.first_stones.values()) == [2, 2, 2, 3, 3, 3]
    with pytest.raises(ValueError, match="opening_plies"):
        agent.play_against(opponent, 2, opening_plies=-1)


def test_alphazero_mode_trains_without_unrolling():
    agent = tictactoe_agent(extra=["train.num_unroll_steps=0"])
    agent.learn(100, progress=False)
    assert agent.training_steps > 0
    batch = agent.replay.sample(4, agent.rng)
    assert batch.actions.shape == (4, 0) and batch.target_policy.shape == (4, 1, 9)
    with pytest.raises(ConfigError, match="simulator"):
        MuZeroAgent(load_config("cartpole", ["train.num_unroll_steps=0"]))


def test_tiny_learn_on_tictactoe_logs_win_rates(tmp_path):
    agent = tictactoe_agent(tmp_path)
    agent.learn(130, progress=False)
    assert agent.training_steps > 0
    events = EventAccumulator(str(tmp_path / "run"))
    events.Reload()
    assert {"eval/win_rate", "eval/draw_rate", "eval/loss_rate"} <= set(events.Tags()["scalars"])
    for game in agent.replay.games():
        held = len(game.to_play_history)  # games in progress at the last checkpoint are short
        assert game.to_play_history == [(game.base + i) % 2 for i in range(held)]
        for i, action in enumerate(game.actions):
            assert game.legal_masks[i][action]


@pytest.mark.parametrize("simulator", ["true", "false"])
def test_tiny_learn_on_2048(tmp_path, simulator):
    config = load_config("cartpole", [
        "env.id=muzero_gym/2048-v0", "env.max_episode_steps=30", "search.num_simulations=4",
        "env.num_envs=2",
        "train.batch_size=8", "train.warmup_transitions=20", "train.eval_interval=0",
        f"search.simulator={simulator}", "model.value_support_size=50",
        "model.reward_support_size=20"])
    agent = MuZeroAgent(config)
    agent.learn(80, progress=False)
    assert agent.training_steps > 0 and agent.env_steps >= 80


def test_2048_runs_and_evaluations_repeat_for_a_seed():
    """2048's spawns inside the true-simulator search come from a scratch env seeded from the
    run's seed (self-play) or the evaluation's seed: the same seed plays the same games, and
    the search's spawns are not the operating system's entropy."""
    def run(seed: int, eval_seed: int) -> tuple[list, list]:
        agent = MuZeroAgent(load_config("g2048", [
            "env.max_episode_steps=40", "search.num_simulations=8", "env.num_envs=2",
            "train.batch_size=8", "train.warmup_transitions=40", "train.eval_interval=0",
            f"train.seed={seed}", "log.progress=false"]))
        agent.learn(120, progress=False)
        played = [list(g.actions) + list(g.rewards) for g in agent.replay.games()]
        games = agent.evaluate_games(2, seed=eval_seed)
        return played, [list(g.actions) + list(g.rewards) for g in games]

    first = run(0, 5)
    assert first[0] and run(0, 5) == first
    assert run(0, 6)[1] != first[1]


def test_a_resumed_2048_run_searches_with_chance_draws_of_its_own(tmp_path):
    """The scratch env's spawns restart from the run's seed only at the run's start: a resumed
    run (games already started) seeds it afresh, so it does not repeat the first draws."""
    def scratch_draws(agent: MuZeroAgent) -> np.ndarray:
        selfplay, _ = agent.selfplay_worker.start()
        return selfplay.simulator.scratch.unwrapped.np_random.integers(2**31, size=4)

    config = load_config("g2048", ["env.max_episode_steps=40", "search.num_simulations=4",
                                   "env.num_envs=2", "train.batch_size=8",
                                   "train.warmup_transitions=40", "train.eval_interval=0",
                                   "log.progress=false"])
    first = scratch_draws(MuZeroAgent(config))
    np.testing.assert_array_equal(scratch_draws(MuZeroAgent(config)), first)  # a seed's start
    agent = MuZeroAgent(config, run_dir=tmp_path / "run")
    agent.learn(60, progress=False)
    resumed = MuZeroAgent.load(tmp_path / "run", run_dir=tmp_path / "run")
    assert resumed.selfplay_worker.num_games_started > 0
    assert not np.array_equal(scratch_draws(resumed), first)


def test_a_restarted_ray_actor_plays_games_of_its_own():
    """Ray reruns a killed actor's constructor with the same arguments: the first process
    draws from the run's seed, a restarted one from a key of its own, for its games (the
    generator) and for its search's chance draws (the scratch env)."""
    from muzero_gym.ray_driver import actor_generator
    from muzero_gym.workers import SelfPlayWorker

    first, key = actor_generator(3, 1, restarted=False)
    assert key is None
    np.testing.assert_array_equal(first.integers(2**31, size=4),
                                  np.random.default_rng([3, 1]).integers(2**31, size=4))
    (again, key_a), (other, key_b) = (actor_generator(3, 1, restarted=True) for _ in range(2))
    assert key_a != key_b
    draws = [g.integers(2**31, size=4) for g in (np.random.default_rng([3, 1]), again, other)]
    assert len({tuple(d) for d in draws}) == 3

    config = load_config("g2048", ["search.num_simulations=4", "env.num_envs=2",
                                   "train.eval_interval=0", "log.progress=false"])
    model = MuZeroAgent(config).selfplay_worker

    def scratch_draws(restart_key: int | None) -> np.ndarray:
        worker = SelfPlayWorker(config, model.facts, model.network, np.random.default_rng(0),
                                1, restart_key)
        selfplay, _ = worker.start()
        return selfplay.simulator.scratch.unwrapped.np_random.integers(2**31, size=4)

    np.testing.assert_array_equal(scratch_draws(None), scratch_draws(None))
    assert not np.array_equal(scratch_draws(key_a), scratch_draws(None))
    assert not np.array_equal(scratch_draws(key_a), scratch_draws(key_b))


def test_play_in_terminal_re_asks_bad_input_and_quits_cleanly(capsys):
    import io

    agent = tictactoe_agent(extra=["search.num_simulations=4"])
    answers = iter(["hello", "9", "4", "4", "q"])
    out = io.StringIO()
    outcome = play_in_terminal(agent, human_first=True, read=lambda prompt: next(answers),
                               out=out)
    text = out.getvalue()
    assert outcome == "quit"
    assert "'hello' is not a move" in text and "9 is not legal here" in text
    assert "4 is not legal here" in text  # the human's own stone is on 4 by then
    assert "root: visits" in text and "agent plays" in text


def test_play_in_terminal_agent_vs_agent_finishes_a_game():
    import io

    agent = tictactoe_agent(extra=["search.num_simulations=4"])
    outcome = play_in_terminal(agent, watch=True, read=lambda prompt: "q", out=io.StringIO())
    assert outcome == "draw" or outcome.startswith("player")


def test_play_command_with_piped_input(tmp_path):
    agent = tictactoe_agent(extra=["search.num_simulations=4"])
    path = agent.save(tmp_path / "agent.pt", include_replay=False)
    done = subprocess.run([sys.executable, "-m", "muzero_gym.cli", "play", str(path),
                           "--human-first"], input="x\n0\n1\n2\n3\n4\n5\n6\n7\n8\n",
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "'x' is not a move" in done.stdout
    assert "won" in done.stdout or "draw" in done.stdout or "quit" in done.stdout
    assert main(["eval", str(path), "--episodes", "4", "--opponent", "random"]) == 0
    assert main(["eval", str(path), "--episodes", "2", "--simulations", "6"]) == 0
    assert main(["eval", str(path), "--simulations", "0"]) == 2
    assert main(["eval", str(path), "--episodes", "2", "--draw-value", "-0.3"]) == 0
    assert main(["eval", str(path), "--draw-value", "-3"]) == 2


def test_evaluation_and_play_search_with_eval_simulations():
    agent = tictactoe_agent(extra=["search.num_simulations=4", "search.eval_simulations=12"])
    game = agent.new_game()
    env = make_env(agent.config.env)
    game.start(*env.reset(seed=0))
    assert agent.search_games([game], [env]).visit_counts.sum() == 12
    assert agent.search.settings.num_simulations == 4  # self-play keeps its own
    agent.set_eval_simulations(0)
    assert agent.search_games([game], [env]).visit_counts.sum() == 4
    agent.set_eval_simulations(9)
    assert agent.config.search.eval_simulations == 9
    assert agent.search_games([game], [env]).visit_counts.sum() == 9


def test_evaluation_and_play_search_with_eval_pb_c_init(monkeypatch):
    from muzero_gym.envs.tictactoe import TicTacToeEnv

    # the network's values alone: the rules' proven wins would decide the search by themselves
    monkeypatch.setattr(TicTacToeEnv, "proven_values", None)
    default = load_config("tictactoe").search.pb_c_init
    flat = ["search.eval_simulations=40", "search.exploration_constant=0"]
    greedy = tictactoe_agent(extra=[*flat, "search.eval_pb_c_init=0"])
    exploring = tictactoe_agent(extra=flat)
    assert greedy.acting_search.settings.pb_c_init == 0
    assert greedy.search.settings.pb_c_init == exploring.acting_search.settings.pb_c_init == default
    plain = tictactoe_agent(extra=["search.eval_simulations=0"])
    assert plain.acting_search is plain.search  # -1 and 0: self-play's own search
    visits = []
    for agent in (greedy, exploring):
        env = make_env(agent.config.env)
        game = agent.new_game()
        game.start(*env.reset(seed=0))
        for action in (0, 3, 1, 4):  # X on 0 and 1, O on 3 and 4: X wins on 2
            observation, reward, terminated, truncated, info = env.step(action)
            game.record_step(action, float(reward), observation, terminated, truncated, info)
        visits.append(agent.search_games([game], [env]).visit_counts[0])
    # Both find the win; without the prior's bonus the search spends more on it.
    assert visits[0].argmax() == visits[1].argmax() == 2
    assert visits[0][2] > visits[1][2]
    with pytest.raises(ConfigError, match="eval_pb_c_init"):
        load_config("tictactoe", ["search.eval_pb_c_init=-0.5"])


def test_play_needs_an_env_that_renders_as_text():
    from muzero_gym.environment import EnvError

    agent = MuZeroAgent(load_config("cartpole", ["search.num_simulations=4"]))
    with pytest.raises(EnvError, match="renders only as"):
        play_in_terminal(agent, read=lambda prompt: "q")
