"""The Ray backend: the same training with self-play in Ray actors, loopback only, a killed
actor restarted, checkpoints shared with the local backend, and a two-node cluster."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.checkpoint import load_checkpoint
from muzero_gym.cli import main
from muzero_gym.config import load_config

ray = pytest.importorskip("ray", reason="the [distributed] extra is not installed")

TINY = ["search.num_simulations=4", "env.num_envs=2", "train.batch_size=16",
        "train.warmup_transitions=40", "train.replay_ratio=0.25", "train.eval_interval=150",
        "train.eval_episodes=2", "log.log_interval=50", "log.checkpoint_interval=100",
        "train.weight_sync_interval=5", "replay.capacity=5000", "log.progress=false",
        "train.actor_moves=2", "replay.segment_length=20"]


def tiny(*extra: str):
    return load_config("cartpole", [*TINY, "train.backend=ray", "train.num_actors=2", *extra])


STOP_SIGNALS = ("SIGTERM", "SIGHUP", "SIGINT")


@pytest.fixture(scope="module")
def local_cluster():
    """One Ray cluster on this machine for the module's tests (as the driver starts it)."""
    from muzero_gym.ray_driver import start_ray

    before = {name: signal.getsignal(getattr(signal, name)) for name in STOP_SIGNALS}
    started = start_ray(None, 2)
    yield before
    if started:
        ray.shutdown()


def tags(run: Path) -> set[str]:
    events = EventAccumulator(str(run))
    events.Reload()
    return set(events.Tags()["scalars"])


def test_ray_training_logs_as_local_and_resumes_on_either_backend(local_cluster, tmp_path):
    run = tmp_path / "run"
    agent = MuZeroAgent(tiny(), run_dir=run)
    agent.learn(300)
    assert agent.env_steps >= 300 and agent.training_steps > 0
    assert agent.replay.running_games() == []  # the actors' games end in the replay
    assert agent.replay.num_transitions_added == agent.env_steps
    logged = tags(run)
    assert {"losses/total", "charts/episodic_return", "perf/env_steps_per_s",
            "perf/actor_env_steps_per_s", "faults/actor_restarts",
            "replay/size", "search/root_value", "eval/return_mean"} <= logged
    # Per-actor rates are written at log ticks, so in a short run under load an actor's first
    # result may miss every tick: at least one actor's tag must be there.
    assert any(t.startswith("perf/actor_env_steps_per_s/actor_") for t in logged)
    saved = load_checkpoint(run)["counters"]["env_steps"]
    # The same checkpoint resumes on the local backend, and back on Ray.
    local = MuZeroAgent.load(run, run_dir=run, overrides=["train.backend=local"])
    local.learn(saved + 60)
    local.close()
    again = MuZeroAgent.load(run, run_dir=run, overrides=["train.backend=ray"])
    assert again.env_steps >= saved + 60
    again.learn(again.env_steps + 100)
    assert load_checkpoint(run)["counters"]["env_steps"] >= saved + 160


def test_a_killed_actor_is_restarted_and_training_goes_on(local_cluster, tmp_path):
    """Killed with calls queued (they fail) or while paused for the learner (only its new
    process's first result shows the death), the actor is counted once and its games end."""
    run = tmp_path / "run"
    agent = MuZeroAgent(tiny("train.eval_interval=0"), run_dir=run)
    killed = []

    def actor_pids() -> list[str]:
        return subprocess.run(["pgrep", "-f", "ray::SelfPlayActor"], capture_output=True,
                              text=True).stdout.split()

    earlier = set(actor_pids())  # actors of the module's earlier runs, on their way out

    learning = threading.Event()
    learning.set()

    def kill_one_actor():  # actors start slowly on a busy machine: watch the whole run
        while learning.is_set() and not killed:
            pids = [pid for pid in actor_pids() if pid not in earlier]
            if pids and agent.training_steps > 5:
                os.kill(int(pids[0]), signal.SIGKILL)
                killed.append(int(pids[0]))
            time.sleep(0.2)

    killer = threading.Thread(target=kill_one_actor)
    killer.start()
    try:
        agent.learn(900)
    finally:
        learning.clear()
        killer.join()
    assert killed, "no actor process was found"
    assert agent.env_steps >= 900
    events = EventAccumulator(str(run))
    events.Reload()
    assert max(e.value for e in events.Scalars("faults/actor_restarts")) == 1
    assert agent.replay.running_games() == []


class InProcessRay:
    """The Ray calls the driver's evaluation makes, run in this process: objects pass by
    value and each actor is an instance here (``actors`` keeps them)."""

    exceptions = ray.exceptions

    def __init__(self):
        self.actors: list = []

    def put(self, value):
        return value

    def get(self, ref):
        return ref

    def wait(self, refs, timeout=None):
        return refs, []

    def remote(self, **options):
        def actor_class(cls):
            def start(*args):
                instance = cls(*args)
                self.actors.append(instance)
                return SimpleNamespace(evaluate=SimpleNamespace(remote=instance.evaluate))
            return SimpleNamespace(remote=start)
        return actor_class


def test_evaluations_on_ray_play_the_averaged_weights():
    """With ``train.averaged_weights_tau`` the evaluation actor plays the driver's average,
    as a local evaluation does, not the trained weights nor an average of its own."""
    from muzero_gym.ray_driver import _Driver

    agent = MuZeroAgent(load_config("cartpole", [*TINY, "train.averaged_weights_tau=0.05"]))
    agent.learn(150, progress=False)
    fake = InProcessRay()
    driver = _Driver(agent, fake)
    driver.evaluator = driver.eval_class.remote(agent.config.to_dict(), agent.config.preset)
    driver.eval_pending.append(agent.env_steps)
    driver.poll_evaluation()  # sends the weights and evaluates
    driver.poll_evaluation()  # logs the result
    evaluator = fake.actors[0].agent

    def root_values(a):
        return np.concatenate([g.root_values for g in a.evaluate_games(2, seed=3)])

    np.testing.assert_array_equal(root_values(evaluator), root_values(agent))
    trained = MuZeroAgent(load_config("cartpole", TINY))
    trained.learner.network.load_state_dict(agent.learner.network.state_dict())
    assert not np.array_equal(root_values(evaluator)[:5], root_values(trained)[:5])


def test_ray_listens_on_loopback_only(local_cluster):
    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) is not installed")
    out = subprocess.run(["ss", "-ltnp"], capture_output=True, text=True).stdout
    ray_lines = [line for line in out.splitlines()
                 if any(name in line for name in ("raylet", "gcs_server", "ray::"))]
    assert ray_lines
    for line in ray_lines:
        local = line.split()[3]
        assert local.startswith(("127.0.0.1:", "[::ffff:127.0.0.1]:")), line


def test_starting_ray_keeps_the_stop_signal_handlers(local_cluster):
    # ray.init puts in a SIGTERM handler that exits at once; a run must still checkpoint.
    # (The native handler it also installs is checked end to end by the two-node test.)
    for name, handler in local_cluster.items():
        assert signal.getsignal(getattr(signal, name)) == handler, name


def test_ray_backend_without_ray_is_one_line(monkeypatch, capsys, tmp_path):
    import builtins

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray":
            raise ImportError("no ray here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    assert main(["train", "cartpole", "--set", "train.backend=ray", "--logdir",
                 str(tmp_path), "--env-steps", "50", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "pip install -e '.[distributed]'" in err and len(err.splitlines()) == 1


TWO_NODES = textwrap.dedent("""
    set -e
    ip link set lo up
    export RAY_AUTH_MODE=disabled HOME="$WORK/home"
    mkdir -p "$HOME"
    ray start --head --node-ip-address=127.0.0.1 --port=6399 --num-cpus=2 \\
        --include-dashboard=false --disable-usage-stats >/dev/null
    ray start --address=127.0.0.1:6399 --node-ip-address=127.0.0.1 --num-cpus=2 \\
        --resources='{"second_node": 2}' --disable-usage-stats >/dev/null
    set +e
    "$PYTHON" "$WORK/driver.py"
    status=$?
    ray stop --force >/dev/null 2>&1
    exit $status
""")

DRIVER = textwrap.dedent("""
    import os, signal, subprocess, sys, threading, time
    import ray
    from muzero_gym.agents.muzero import MuZeroAgent
    from muzero_gym.cli import main
    from muzero_gym.config import load_config
    from muzero_gym.checkpoint import load_checkpoint

    run = os.path.join(os.environ["WORK"], "runs", "two")
    overrides = {overrides!r}
    args = ["train", "cartpole", "--logdir", os.path.join(os.environ["WORK"], "runs"),
            "--run-name", "two", "--env-steps", "1000000", "--no-progress",
            "--ray-address", "127.0.0.1:6399"]
    for item in overrides:
        args += ["--set", item]

    def actor_pids():
        return set(subprocess.run(["pgrep", "-f", "ray::SelfPlayActor"], capture_output=True,
                                  text=True).stdout.split())

    def checkpointed_steps():
        try:
            return load_checkpoint(run)["counters"]["env_steps"]
        except Exception:  # not written yet
            return None

    # However slow the machine, the run goes on until one actor was killed, a new process took
    # its place and the run checkpointed 200 more env steps; then SIGTERM stops it (status 143).
    killed, replaced = [], []
    def kill_one_then_stop():
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not replaced:
            pids = actor_pids()
            if not killed and len(pids) >= 3 and checkpointed_steps() is not None:
                victim = sorted(pids)[0]
                os.kill(int(victim), signal.SIGKILL)
                killed.append((victim, pids - {{victim}}, checkpointed_steps()))
            elif killed:
                victim, others, at_kill = killed[0]
                now = checkpointed_steps()
                if pids - others - {{victim}} and now is not None and now >= at_kill + 200:
                    replaced.append(now)
            time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=kill_one_then_stop, daemon=True).start()
    code = main(args)
    assert code == 128 + signal.SIGTERM, code
    assert killed, "no actor was killed"
    assert replaced, "the killed actor was not replaced, or the run made no progress after it"
    ray.init(address="127.0.0.1:6399")
    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    ray.shutdown()
    steps = load_checkpoint(run)["counters"]["env_steps"]
    assert main(["train", "--resume", run, "--env-steps", str(steps + 150), "--no-progress",
                 "--ray-address", "127.0.0.1:6399"]) == 0
    assert load_checkpoint(run)["counters"]["env_steps"] >= steps + 150
    print("two-node run ok", steps, flush=True)
""")


@pytest.mark.slow
@pytest.mark.ray_cluster
def test_a_two_node_cluster_over_loopback_trains_survives_a_kill_and_resumes(tmp_path):
    """A head node and a second node (with a custom resource) on this machine, inside a network
    namespace that has only loopback, so nothing Ray starts can be reached from outside."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs unshare and ip (util-linux, iproute2)")
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("cannot make a network namespace here (needs root)")
    ray_bin = Path(sys.executable).parent / "ray"
    overrides = [*TINY, "train.backend=ray", "train.num_actors=4", "train.eval_interval=0"]
    (tmp_path / "driver.py").write_text(DRIVER.format(overrides=overrides))
    env = {**os.environ, "WORK": str(tmp_path), "PYTHON": sys.executable,
           "PATH": f"{ray_bin.parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(["unshare", "-n", "bash", "-c", TWO_NODES], env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "two-node run ok" in result.stdout
