"""MuZeroAgent and the CLI: tiny learn runs, TensorBoard tags, save/load, resume, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.checkpoint import CheckpointError, load_checkpoint
from muzero_gym.cli import main
from muzero_gym.config import load_config

TINY = ["search.num_simulations=4", "env.num_envs=2", "train.batch_size=8",
        "train.warmup_transitions=20", "train.replay_ratio=0.5", "train.eval_interval=60",
        "train.eval_episodes=2", "log.log_interval=20", "log.checkpoint_interval=50",
        "train.weight_sync_interval=5", "replay.capacity=2000"]

TAGS = ["charts/episodic_return", "charts/episodic_length", "eval/return_mean", "losses/total",
        "losses/value", "losses/reward", "losses/policy", "train/lr", "train/grad_norm",
        "search/root_value", "search/visit_entropy", "search/max_depth",
        "perf/env_steps_per_s", "perf/train_steps_per_s", "replay/size",
        "replay/effective_batch_size"]


def tiny_agent(tmp_path, env_id="CartPole-v1", extra=()):
    config = load_config("cartpole", [*TINY, f"env.id={env_id}", *extra])
    return MuZeroAgent(config, run_dir=tmp_path / "run")


def test_tiny_learn_on_cartpole_logs_every_tag_and_checkpoints(tmp_path):
    agent = tiny_agent(tmp_path)
    agent.learn(120, progress=False)
    assert agent.env_steps >= 120 and agent.training_steps > 0 and agent.episodes > 0
    run = tmp_path / "run"
    assert (run / "checkpoint.pt").exists() and (run / "config.toml").exists()
    events = EventAccumulator(str(run))
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    assert set(TAGS) <= scalars, set(TAGS) - scalars
    assert load_config(run / "config.toml").to_dict() == agent.config.to_dict()
    # recent_returns: the last (at most 20) episodes' returns, as logged, oldest first
    logged = [event.value for event in events.Scalars("charts/episodic_return")]
    assert len(agent.recent_returns) == min(20, agent.episodes) == min(20, len(logged))
    np.testing.assert_allclose(agent.recent_returns, logged[-len(agent.recent_returns):])


def test_tiny_learn_on_taxi_with_action_masks_and_reanalyse(tmp_path):
    agent = tiny_agent(tmp_path, "Taxi-v4", ["env.max_episode_steps=30",
                                             "train.reanalyse_fraction=0.5",
                                             "train.reanalyse_policy=true",
                                             "train.reanalyse_simulations=3"])
    agent.learn(100, progress=False)
    assert agent.training_steps > 0
    for game in agent.replay.games():
        for i, action in enumerate(game.actions):
            assert game.legal_masks[i][action]  # never an illegal move


def test_save_load_gives_identical_actions(tmp_path):
    agent = tiny_agent(tmp_path)
    agent.learn(60, progress=False)
    path = agent.save(tmp_path / "agent.pt", include_replay=False)
    loaded = MuZeroAgent.load(path)
    observations = np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32)
    for obs in observations:
        assert agent.predict(obs) == loaded.predict(obs)
    for a, b in zip(agent.network.parameters(), loaded.network.parameters()):
        assert torch.equal(a, b)


def test_evaluation_and_play_use_the_averaged_weights_and_self_play_the_trained(tmp_path):
    plain = tiny_agent(tmp_path / "plain")
    agent = tiny_agent(tmp_path / "averaged", extra=["train.averaged_weights_tau=0.05"])
    for a in (plain, agent):
        a.learn(120, progress=False)
    averaged = agent.learner.averaged_network.state_dict()
    assert not all(torch.equal(a, b) for a, b in zip(
        averaged.values(), agent.learner.network.state_dict().values()))
    # The same play as an agent whose trained weights are the average, with no average kept;
    # other play than the trained weights'.
    twin, trained = (MuZeroAgent(load_config("cartpole", TINY)) for _ in range(2))
    twin.learner.network.load_state_dict(averaged)
    trained.learner.network.load_state_dict(agent.learner.network.state_dict())

    def root_values(a):
        return np.concatenate([g.root_values for g in a.evaluate_games(2, seed=3)])

    plain.evaluate_games(2, seed=3)
    values = root_values(agent)
    np.testing.assert_array_equal(values, root_values(twin))
    others = root_values(trained)
    n = min(len(values), len(others))
    assert not np.array_equal(values[:n], others[:n])
    observations = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    expected = [twin.predict(o) for o in observations]
    assert [agent.predict(o) for o in observations] == expected
    [plain.predict(o) for o in observations]
    # The checkpoint keeps the average: a loaded agent plays it.
    loaded = MuZeroAgent.load(agent.save(tmp_path / "agent.pt", include_replay=False))
    assert [loaded.predict(o) for o in observations] == expected
    # Training is untouched: self-play acted on the trained weights, as without an average.
    for a in (plain, agent):
        a.learn(240, progress=False)
    assert agent.training_steps == plain.training_steps > loaded.training_steps
    for a, b in zip(plain.learner.network.parameters(), agent.learner.network.parameters()):
        assert torch.equal(a, b)


def test_an_agent_loaded_without_its_replay_plays_alike_and_refuses_to_train(tmp_path):
    agent = tiny_agent(tmp_path)
    agent.learn(80, progress=False)
    path = tmp_path / "run" / "checkpoint.pt"
    whole = MuZeroAgent.load(path)
    light = MuZeroAgent.load(path, include_replay=False)
    assert len(whole.replay) > 0 and len(light.replay) == 0
    assert light.env_steps == whole.env_steps and light.training_steps == whole.training_steps
    observations = np.random.default_rng(1).normal(size=(10, 4)).astype(np.float32)
    assert [light.predict(o) for o in observations] == [whole.predict(o) for o in observations]
    for a, b in zip(whole.network.parameters(), light.network.parameters()):
        assert torch.equal(a, b)
    before = path.read_bytes()
    with pytest.raises(CheckpointError, match="without its replay"):
        light.learn(200, progress=False)
    with pytest.raises(CheckpointError, match="without its replay"):
        light.save(path)
    assert path.read_bytes() == before  # the saved replay is not written over
    weights_only = light.save(tmp_path / "weights.pt", include_replay=False)
    assert "replay" not in load_checkpoint(weights_only)
    # leave_out drops the named entries and nothing else
    state, lean = load_checkpoint(path), load_checkpoint(path, leave_out=("replay", "selfplay"))
    assert "replay" in state and set(lean) == set(state) - {"replay", "selfplay"}
    assert torch.equal(lean["rng"]["torch"], state["rng"]["torch"])


def test_resume_continues_counters_and_replay(tmp_path):
    agent = tiny_agent(tmp_path)
    agent.learn(80, progress=False)
    steps, learner_steps, episodes = agent.env_steps, agent.training_steps, agent.episodes
    priorities = agent.replay.priorities()
    assert agent.recent_returns
    resumed = MuZeroAgent.load(tmp_path / "run", run_dir=tmp_path / "run")
    assert (resumed.env_steps, resumed.training_steps, resumed.episodes) == (
        steps, learner_steps, episodes)
    # the progress line's window of recent returns and its eval field go on where they stopped
    assert resumed.recent_returns == agent.recent_returns
    assert agent.last_eval_return is not None
    assert resumed.last_eval_return == agent.last_eval_return
    np.testing.assert_array_equal(resumed.replay.priorities(), priorities)
    assert len(resumed.replay) == len(agent.replay)
    assert resumed.rng.bit_generator.state == agent.rng.bit_generator.state
    resumed.learn(160, progress=False)
    assert resumed.env_steps >= 160 and resumed.training_steps > learner_steps
    assert resumed.replay.num_games_added > agent.replay.num_games_added
    state = load_checkpoint(tmp_path / "run")
    assert state["counters"]["env_steps"] == resumed.env_steps


def test_progress_line_shows_the_recent_returns_or_a_dash_before_any_episode(tmp_path):
    import io

    from muzero_gym.progress import Progress

    class Terminal(io.StringIO):  # a line is drawn at once on a terminal
        def isatty(self):
            return True

    agent = tiny_agent(tmp_path)
    stream = Terminal()
    agent.after_moves(0, Progress(100, "env steps", stream=stream))
    assert "| episodes 0 | return - |" in stream.getvalue()
    agent.learn(80, progress=False)
    stream = Terminal()
    agent.after_moves(agent.env_steps, Progress(100, "env steps", stream=stream))
    assert f"| return {np.mean(agent.recent_returns):.2f} |" in stream.getvalue()


def test_concurrent_learner_trains_in_its_own_thread_and_is_deterministic(tmp_path,
                                                                           monkeypatch):
    import threading

    threads = set()
    from muzero_gym.workers import LearnerWorker

    train_once = LearnerWorker._train_once

    def recording(self, *args, **kwargs):
        threads.add(threading.current_thread().name)
        return train_once(self, *args, **kwargs)

    monkeypatch.setattr(LearnerWorker, "_train_once", recording)
    agents = [tiny_agent(tmp_path / str(i), extra=["train.concurrent_learner=true"])
              for i in range(2)]
    for agent in agents:
        agent.learn(150, progress=False)
    assert threads and all(name.startswith("learner") for name in threads)
    first, second = agents
    assert first.training_steps > 0
    assert (first.env_steps, first.training_steps) == (second.env_steps, second.training_steps)
    for a, b in zip(first.network.parameters(), second.network.parameters()):
        assert torch.equal(a, b)
    np.testing.assert_array_equal(first.replay.priorities(), second.replay.priorities())
    # Its own generator is saved and restored with the checkpoint.
    resumed = MuZeroAgent.load(tmp_path / "0" / "run")
    assert resumed.learner_rng is not resumed.rng
    assert resumed.learner_rng.bit_generator.state == first.learner_rng.bit_generator.state


def test_cli_train_and_eval(tmp_path, capsys):
    args = ["train", "cartpole", "--env-steps", "60", "--logdir", str(tmp_path),
            "--run-name", "r", "--no-progress", *[x for s in TINY for x in ("--set", s)]]
    assert main(args) == 0
    assert "done: " in capsys.readouterr().out
    assert main(["eval", str(tmp_path / "r"), "--episodes", "2"]) == 0
    assert "CartPole-v1: return" in capsys.readouterr().out
    assert main(["train", "--resume", str(tmp_path / "r"), "--env-steps", "90",
                 "--no-progress"]) == 0
    assert load_checkpoint(tmp_path / "r")["counters"]["env_steps"] >= 90
    # the same run name again would overwrite: refused
    assert main(args) == 2
    assert "already holds a run" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["train", "NoSuchEnv-v0"], "neither a preset"),
    (["train", "Pendulum-v1"], "needs a Discrete action space"),
    (["train", "cartpole", "--set", "search.num_simulations=-1"],
     "search.num_simulations = -1: allowed range"),
    (["train", "cartpole", "--set", "search.num_simulation=5"], "unknown config key"),
])
def test_cli_bad_input_is_one_clear_line(argv, message, capsys, tmp_path):
    assert main([*argv, "--logdir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not any(tmp_path.iterdir())  # nothing written


def test_corrupt_and_foreign_checkpoints_are_refused(tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "checkpoint.pt").write_bytes(b"not a checkpoint")
    assert main(["eval", str(bad)]) == 2
    assert "not a readable muzero_gym checkpoint" in capsys.readouterr().err
    assert main(["train", "--resume", str(bad)]) == 2
    assert (bad / "checkpoint.pt").read_bytes() == b"not a checkpoint"

    agent = tiny_agent(tmp_path)
    agent.save(tmp_path / "run", include_replay=False)
    before = (tmp_path / "run" / "checkpoint.pt").read_bytes()
    assert main(["train", "Acrobot-v1", "--resume", str(tmp_path / "run")]) == 2
    assert "is for env 'CartPole-v1', not 'Acrobot-v1'" in capsys.readouterr().err
    assert (tmp_path / "run" / "checkpoint.pt").read_bytes() == before
    with pytest.raises(CheckpointError):
        MuZeroAgent.load(tmp_path / "missing")


def test_num_threads_caps_torch_and_numpy_blas_threads():
    """``train.num_threads`` sets torch's threads and numpy's BLAS threads alike: OpenBLAS's
    extra threads otherwise spin on cores that a second run or the learner needs."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from muzero_gym.numpy_inference import limit_blas_threads

    torch_threads = torch.get_num_threads()
    try:
        with threadpool_limits(limits=2, user_api="blas"):  # restores numpy's threads after
            # numpy's BLAS (loaded with numpy); libraries that other imports load later are
            # not what numpy's products run on
            loaded = {p["filepath"] for p in threadpool_info() if p["user_api"] == "blas"}
            MuZeroAgent(load_config("cartpole", ["train.num_threads=1"]))
            blas = [p for p in threadpool_info() if p["filepath"] in loaded]
            assert blas and all(p["num_threads"] == 1 for p in blas)
            assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(torch_threads)
    with pytest.raises(ValueError, match="threads = 0"):
        limit_blas_threads(0)
