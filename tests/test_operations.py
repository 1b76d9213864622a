"""What an operator relies on: runs that end, stops that save, one writer per run folder,
atomic files, poisoned env data refused, an agent that stays usable after an error."""

from __future__ import annotations

import errno
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import fake_envs
import numpy as np
import pytest
import torch

from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.checkpoint import load_checkpoint
from muzero_gym.cli import main
from muzero_gym.config import EnvConfig, load_config
from muzero_gym.environment import DEFAULT_MAX_EPISODE_STEPS, episode_step_limit, make_env
from muzero_gym.learner import TrainingDivergedError
from muzero_gym.run_folder import RunFolderError, RunLock, atomic_write, remove_stale_temp_files
from muzero_gym.stops import (
    Stopped,
    deferred_stops,
    exit_status,
    stop_name,
    stop_signals,
    stops_deferred,
)

TINY = ["search.num_simulations=4", "env.num_envs=2", "train.batch_size=8",
        "train.warmup_transitions=20", "train.replay_ratio=0.5", "train.eval_interval=0",
        "train.eval_episodes=2", "log.log_interval=20", "log.checkpoint_interval=50",
        "train.weight_sync_interval=5", "replay.capacity=2000", "log.progress=false"]
TESTS = Path(__file__).parent


def tiny(env_id: str = "CartPole-v1", *extra: str):
    return load_config("cartpole", [*TINY, f"env.id={env_id}", *extra])


def cli_tiny(*extra: str) -> list[str]:
    return [x for s in [*TINY, *extra] for x in ("--set", s)]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


# ---- episodes end -----------------------------------------------------------------------

def test_every_episode_has_a_step_cap():
    assert episode_step_limit(EnvConfig(id="CartPole-v1")) == 500  # the env's own
    assert episode_step_limit(EnvConfig(id="CliffWalking-v1")) == DEFAULT_MAX_EPISODE_STEPS
    assert episode_step_limit(EnvConfig(id="CliffWalking-v1", max_episode_steps=7)) == 7
    env = make_env(EnvConfig(id="fake_envs:EndlessWalk-v0", max_episode_steps=9))
    env.reset(seed=0)
    for step in range(1, 10):
        _, _, terminated, truncated, _ = env.step(0)
        assert not terminated and truncated == (step == 9)


def test_an_endless_env_trains_and_evaluates_to_the_end(tmp_path):
    agent = MuZeroAgent(tiny("fake_envs:EndlessWalk-v0", "env.max_episode_steps=15"),
                        run_dir=tmp_path / "run")
    agent.learn(60)
    assert agent.episodes >= 2
    assert all(g.truncated and len(g) == 15 for g in agent.replay.games())
    assert len(agent.evaluate(3)) == 3


# ---- the run folder ---------------------------------------------------------------------

def test_a_second_writer_is_refused_and_a_dead_ones_lock_is_stale(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from muzero_gym.run_folder import RunLock; "
         "lock = RunLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)",
         str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunFolderError, match=f"in use by process {holder.pid} on "):
            RunLock(tmp_path).acquire()
    finally:
        holder.kill()
        holder.wait()
    # The lock file still names the killed process, but its lock died with it.
    assert str(holder.pid) in (tmp_path / "run.lock").read_text()
    with RunLock(tmp_path) as lock:
        assert lock.held
        with pytest.raises(RunFolderError, match=f"process {os.getpid()}"):
            RunLock(tmp_path).acquire()
    RunLock(tmp_path).acquire().release()


def test_two_trains_of_one_run_name_the_second_is_refused(tmp_path, capsys):
    args = ["train", "cartpole", "--env-steps", "40", "--logdir", str(tmp_path), "--run-name",
            "same", "--no-progress", *cli_tiny()]
    with RunLock(tmp_path / "same"):  # a first run holds the folder
        assert main(args) == 2
        assert "is in use by process" in one_error_line(capsys)
        assert main(["train", "--resume", str(tmp_path / "same"), "--no-progress"]) == 2
    assert not (tmp_path / "same" / "checkpoint.pt").exists()
    assert main(args) == 0


def test_atomic_write_gives_the_usual_file_mode_and_removes_its_temp_file(tmp_path):
    path = atomic_write(tmp_path / "f.bin", lambda f: f.write(b"new"), "test file")
    umask = os.umask(0)
    os.umask(umask)
    assert path.read_bytes() == b"new" and (path.stat().st_mode & 0o777) == 0o666 & ~umask

    def full_disk(file):
        file.write(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(RunFolderError, match="could not write the test file .*No space left on "
                                             "device; old one kept"):
        atomic_write(path, full_disk, "test file", keeps="old one kept")
    assert path.read_bytes() == b"new" and sorted(tmp_path.iterdir()) == [path]


def test_stale_temp_files_are_removed_when_a_run_resumes(tmp_path):
    agent = MuZeroAgent(tiny(), run_dir=tmp_path / "run")
    agent.learn(30)
    stale = tmp_path / "run" / ".checkpoint.pt.k1ll3d.tmp"
    stale.write_bytes(b"x" * 1000)
    assert remove_stale_temp_files(tmp_path / "none") == []
    resumed = MuZeroAgent.load(tmp_path / "run", run_dir=tmp_path / "run")
    resumed.learn(50)
    assert not stale.exists() and (tmp_path / "run" / "checkpoint.pt").exists()


def test_checkpoint_files_get_the_usual_mode(tmp_path):
    agent = MuZeroAgent(tiny(), run_dir=tmp_path / "run")
    agent.learn(30)
    umask = os.umask(0)
    os.umask(umask)
    for name in ("checkpoint.pt", "config.toml"):
        assert (tmp_path / "run" / name).stat().st_mode & 0o777 == 0o666 & ~umask


def test_a_full_disk_is_one_line_and_keeps_the_previous_checkpoint(tmp_path, capsys,
                                                                   monkeypatch):
    args = ["train", "cartpole", "--env-steps", "30", "--logdir", str(tmp_path), "--run-name",
            "r", "--no-progress", *cli_tiny()]
    assert main(args) == 0
    before = (tmp_path / "r" / "checkpoint.pt").read_bytes()

    def no_space(obj, file, *args, **kwargs):
        file.write(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", no_space)
    assert main(["train", "--resume", str(tmp_path / "r"), "--env-steps", "60",
                 "--no-progress"]) == 2
    err = one_error_line(capsys)
    assert "could not write the checkpoint" in err and "No space left on device" in err
    assert "previous checkpoint checkpoint.pt is intact" in err
    assert (tmp_path / "r" / "checkpoint.pt").read_bytes() == before
    assert not list((tmp_path / "r").glob(".*.tmp"))


def test_a_read_only_logdir_or_a_file_in_the_way_is_one_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "file").write_text("")
    assert main(["train", "cartpole", "--logdir", str(tmp_path / "file"), *cli_tiny()]) == 2
    assert "is a file, not a folder" in one_error_line(capsys)

    def read_only(self, *args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))

    monkeypatch.setattr(Path, "mkdir", read_only)
    assert main(["train", "cartpole", "--logdir", str(tmp_path / "ro"), *cli_tiny()]) == 2
    assert "cannot create run folder" in (err := one_error_line(capsys))
    assert "Permission denied" in err


# ---- stopping ---------------------------------------------------------------------------

def test_sigterm_saves_and_says_how_to_resume(tmp_path):
    run = tmp_path / "r"
    process = subprocess.Popen(
        [sys.executable, "-m", "muzero_gym.cli", "train", "cartpole", "--env-steps",
         "1000000", "--logdir", str(tmp_path), "--run-name", "r", "--no-progress",
         *cli_tiny("log.checkpoint_interval=20")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300  # however slow the machine: the run has made steps
    while not (run / "checkpoint.pt").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "stopped (SIGTERM)" in lines[0], err
    saved = load_checkpoint(run)["counters"]["env_steps"]
    assert saved > 0 and f"checkpoint of {saved:,} env steps" in lines[0]
    assert f"muzero-gym train --resume {run}" in lines[0]


@pytest.fixture
def sighup_default():
    """SIGHUP at its default for the test (under nohup it starts ignored), restored after."""
    before = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGHUP, before)


def test_sighup_stops_a_run_like_ctrl_c(tmp_path, capsys, monkeypatch, sighup_default):
    learn = MuZeroAgent.learn

    def learn_then_hang_up(self, *args, **kwargs):
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGHUP)).start()
        return learn(self, 10**9, progress=False)

    monkeypatch.setattr(MuZeroAgent, "learn", learn_then_hang_up)
    code = main(["train", "cartpole", "--logdir", str(tmp_path), "--run-name", "r",
                 *cli_tiny("log.checkpoint_interval=1000000")])
    assert code == 128 + signal.SIGHUP
    err = one_error_line(capsys)
    saved = load_checkpoint(tmp_path / "r")["counters"]["env_steps"]
    assert "stopped (SIGHUP)" in err and f"checkpoint of {saved:,} env steps" in err
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL  # restored


def test_a_stop_signal_during_a_move_takes_effect_once_the_move_is_in_the_replay(
        tmp_path, capsys, monkeypatch):
    # Compiled code (numba's search) calls back into Python, where an exception raised by a
    # signal handler turns into a SystemError: a stop waits for the move to end instead.
    import gymnasium as gym

    env_step = gym.vector.SyncVectorEnv.step
    moves = []

    def step_signalled_on_the_fifth_move(self, actions):
        moves.append(len(actions))
        if len(moves) == 5:
            signal.raise_signal(signal.SIGTERM)  # its handler runs here, in the middle of the move
        return env_step(self, actions)

    monkeypatch.setattr(gym.vector.SyncVectorEnv, "step", step_signalled_on_the_fifth_move)
    code = main(["train", "cartpole", "--env-steps", "10000", "--logdir", str(tmp_path),
                 "--run-name", "r", *cli_tiny()])
    assert code == 128 + signal.SIGTERM
    assert moves == [2] * 5  # no move after the one the signal came in
    err = one_error_line(capsys)
    assert "stopped (SIGTERM) at 10 env steps; checkpoint of 10 env steps" in err
    assert load_checkpoint(tmp_path / "r")["counters"]["env_steps"] == 10


@pytest.fixture
def sigint_default():
    """SIGINT at Python's default handler for the test (a command a script starts in the
    background starts with it ignored), restored after."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_a_second_stop_signal_during_deferred_work_stops_it_at_once(sigint_default):
    done = []
    with stop_signals(), pytest.raises(Stopped) as stop:
        with deferred_stops():
            # raise_signal runs the handler before it returns, in this thread
            signal.raise_signal(signal.SIGINT)  # the handler defers the stop
            done.append("after the first")
            signal.raise_signal(signal.SIGTERM)
            done.append("after the second")
    assert stop.value.signum == signal.SIGTERM and done == ["after the first"]
    assert not stops_deferred()
    with stop_signals(), pytest.raises(KeyboardInterrupt):  # the same work with one stop
        with deferred_stops():
            signal.raise_signal(signal.SIGINT)
            done.append("to the end")
    assert done[-1] == "to the end"


def test_work_that_fails_drops_the_stop_deferred_during_it():
    with stop_signals():
        with pytest.raises(ValueError), deferred_stops():
            signal.raise_signal(signal.SIGTERM)
            raise ValueError("the work's own error")
        with deferred_stops():  # the next work does not get the old stop
            time.sleep(0.01)


def test_a_stop_during_the_final_save_names_the_checkpoint_on_disk(tmp_path, capsys,
                                                                   monkeypatch):
    import muzero_gym.agents.muzero as agent_module

    saves = []
    real_save = agent_module.save_checkpoint

    def second_ctrl_c_on_the_final_save(state, path):
        saves.append(state["counters"]["env_steps"])
        if state["counters"]["env_steps"] >= 100:  # the final save
            raise KeyboardInterrupt
        return real_save(state, path)

    monkeypatch.setattr(agent_module, "save_checkpoint", second_ctrl_c_on_the_final_save)
    assert main(["train", "cartpole", "--env-steps", "101", "--logdir", str(tmp_path),
                 "--run-name", "r", *cli_tiny()]) == 130
    err = one_error_line(capsys)
    on_disk = load_checkpoint(tmp_path / "r")["counters"]["env_steps"]
    assert on_disk == 50 and saves[-1] >= 100
    assert f"checkpoint of {on_disk:,} env steps" in err


def test_ctrl_c_during_eval_is_one_line(tmp_path, capsys, monkeypatch):
    agent = MuZeroAgent(tiny(), run_dir=tmp_path / "run")
    agent.learn(30)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(MuZeroAgent, "evaluate", interrupted)
    assert main(["eval", str(tmp_path / "run")]) == 130
    assert "stopped (Ctrl-C)" in one_error_line(capsys)
    assert main(["train", "--resume", str(tmp_path / "run"), "--env-steps", "40",
                 "--no-progress"]) == 130  # the final evaluation
    assert "final evaluation stopped (Ctrl-C)" in one_error_line(capsys)


def _purge_steps(run: Path) -> list[int]:
    """Steps of the SessionLog START events (TensorBoard's purge marks) in a run's files."""
    from tensorboard.compat.proto.event_pb2 import Event

    steps = []
    for path in sorted(run.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset:offset + 8])
            event = Event.FromString(data[offset + 12:offset + 12 + length])
            offset += 12 + length + 4
            if event.HasField("session_log") and event.session_log.status == 1:
                steps.append(event.step)
    return steps


def test_a_resumed_run_purges_what_was_logged_after_its_checkpoint(tmp_path):
    agent = MuZeroAgent(tiny(), run_dir=tmp_path / "run")
    agent.learn(60)
    saved = agent.saved_env_steps
    agent._logger.scalars({"losses/total": 9.0}, saved + 500)  # logged, then killed
    agent._logger.flush()
    assert _purge_steps(tmp_path / "run") == []
    resumed = MuZeroAgent.load(tmp_path / "run", run_dir=tmp_path / "run")
    resumed.learn(100)
    assert _purge_steps(tmp_path / "run") == [saved + 1]


def test_the_final_evaluation_of_a_short_run_is_logged(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert main(["train", "cartpole", "--env-steps", "30", "--logdir", str(tmp_path),
                 "--run-name", "r", "--no-progress", *cli_tiny()]) == 0
    events = EventAccumulator(str(tmp_path / "r"))
    events.Reload()
    [point] = events.Scalars("eval/return_mean")
    assert point.step == load_checkpoint(tmp_path / "r")["counters"]["env_steps"]


# ---- errors inside a run ----------------------------------------------------------------

def test_an_agent_stays_usable_after_its_env_raised(tmp_path):
    fake_envs.Walk.steps_taken = 0
    agent = MuZeroAgent(tiny("fake_envs:BreakingWalk-v0"), run_dir=tmp_path / "run")
    with pytest.raises(fake_envs.EnvBroke):
        agent.learn(200)
    steps = agent.env_steps
    assert load_checkpoint(tmp_path / "run")["counters"]["env_steps"] == steps
    agent.learn(steps + 80)  # fresh envs; Walk raises only once
    assert agent.env_steps >= steps + 80 and agent.training_steps > 0


@pytest.mark.parametrize("env_id, what", [("NaNRewardWalk-v0", "reward nan at step 7"),
                                          ("NaNObservationWalk-v0",
                                           "observation with NaN or infinite entries at step 5")])
def test_non_finite_env_data_stops_the_run_with_one_line(env_id, what, tmp_path, capsys):
    args = ["train", f"fake_envs:{env_id}", "--env-steps", "100", "--logdir", str(tmp_path),
            "--run-name", "r", "--no-progress", *cli_tiny()]
    assert main(args) == 2
    err = one_error_line(capsys)
    assert f"env 'fake_envs:{env_id}'" in err and what in err and "drop_game" in err
    assert main(["train", "--resume", str(tmp_path / "r"), "--env-steps", "200"]) == 2
    assert "plays env 'fake_envs:" in one_error_line(capsys)  # a module id: not imported


def test_drop_game_discards_poisoned_games_and_trains_on(tmp_path):
    agent = MuZeroAgent(tiny("fake_envs:NaNRewardWalk-v0", "env.non_finite=drop_game"),
                        run_dir=tmp_path / "run")
    agent.learn(150)
    games = agent.replay.games()
    # Every Walk reaches its NaN at step 7: no game ever ends, and the replay holds only what
    # the checkpoints flushed of the games in progress, before their NaN.
    assert agent.env_steps >= 150 and agent.episodes == 0
    assert games and all(len(g) < 7 and np.isfinite(g.rewards).all() for g in games)
    with pytest.raises(ValueError, match="NaN or infinite reward"):
        game = agent.new_game()
        game.start(np.zeros(4, dtype=np.float32))
        game.store_search_statistics(0.0, np.array([0.5, 0.5]))
        game.record_step(0, float("nan"), np.zeros(4, dtype=np.float32), True, False)
        agent.replay.add_game(game)


def test_weights_that_diverged_are_never_saved(tmp_path):
    agent = MuZeroAgent(tiny(), run_dir=tmp_path / "run")
    agent.learn(60)
    before = (tmp_path / "run" / "checkpoint.pt").read_bytes()
    with torch.no_grad():
        next(agent.network.parameters()).fill_(float("nan"))
    with pytest.raises(TrainingDivergedError, match="checkpoint of .* env steps is kept"):
        agent.save(tmp_path / "run")
    assert (tmp_path / "run" / "checkpoint.pt").read_bytes() == before


def test_a_loss_that_diverges_stops_training_before_the_weights_change(tmp_path, monkeypatch):
    from muzero_gym.learner import Learner

    agent = MuZeroAgent(tiny(), run_dir=tmp_path / "run")
    compute_loss = Learner.compute_loss

    def nan_after_three_steps(self, batch):
        total, parts, priorities = compute_loss(self, batch)
        return (total * float("nan") if self.training_step >= 3 else total), parts, priorities

    monkeypatch.setattr(Learner, "compute_loss", nan_after_three_steps)
    with pytest.raises(TrainingDivergedError, match="the loss is nan at learner step 4"):
        agent.learn(200)
    assert agent.training_steps == 3
    assert all(torch.isfinite(p).all() for p in agent.network.parameters())
    state = load_checkpoint(tmp_path / "run")  # the stop saved the last good weights
    assert state["learner"]["training_step"] == 3


# ---- checkpoints that name code ---------------------------------------------------------

def test_a_checkpoint_never_imports_a_module_by_itself(tmp_path, capsys):
    agent = MuZeroAgent(tiny("fake_envs:Walk-v0"), run_dir=tmp_path / "run")
    agent.learn(30)
    assert main(["eval", str(tmp_path / "run"), "--episodes", "1"]) == 2
    assert "whose module 'fake_envs' would be imported" in one_error_line(capsys)
    assert main(["eval", str(tmp_path / "run"), "--episodes", "1", "--env",
                 "fake_envs:Walk-v0"]) == 0
    assert main(["eval", str(tmp_path / "run"), "--episodes", "1",
                 "--trust-env-module"]) == 0
    assert main(["train", "fake_envs:Walk-v0", "--resume", str(tmp_path / "run"),
                 "--env-steps", "40", "--no-progress"]) == 0


def test_a_stop_signal_turned_into_a_plain_keyboard_interrupt_is_still_named():
    # Ray's waits catch the handler's Stopped and raise a bare KeyboardInterrupt instead.
    with stop_signals():
        try:
            signal.raise_signal(signal.SIGTERM)  # the handler raises before it returns
        except KeyboardInterrupt:
            pass
        bare = KeyboardInterrupt()
        assert exit_status(bare) == 128 + signal.SIGTERM
        assert stop_name(bare) == "SIGTERM"
    with stop_signals():  # a new run forgets the last one's signal
        assert exit_status(KeyboardInterrupt()) == 128 + signal.SIGINT
        assert stop_name(KeyboardInterrupt()) == "Ctrl-C"


def test_a_run_started_ignoring_sighup_keeps_ignoring_it():
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    try:
        with stop_signals():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN  # still stops the run
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


def test_a_stop_signal_during_a_checkpoint_write_takes_effect_once_the_file_is_whole(tmp_path):
    def write(file):
        file.write(b"first half, ")
        signal.raise_signal(signal.SIGTERM)  # handled before it returns, in the write
        for _ in range(1000):
            file.write(b"")
        file.write(b"second half")

    with stop_signals(), pytest.raises(Stopped):
        atomic_write(tmp_path / "checkpoint.pt", write, "checkpoint")
    assert (tmp_path / "checkpoint.pt").read_bytes() == b"first half, second half"
    assert not stops_deferred()


def test_only_the_main_threads_writes_defer_stops(tmp_path):
    seen = []
    writer = threading.Thread(target=atomic_write, args=(
        tmp_path / "replay.pt", lambda file: seen.append(stops_deferred()), "replay"))
    writer.start()
    writer.join()
    atomic_write(tmp_path / "checkpoint.pt", lambda file: seen.append(stops_deferred()),
                 "checkpoint")
    assert seen == [False, True] and not stops_deferred()
