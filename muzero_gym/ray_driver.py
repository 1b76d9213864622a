"""The Ray backend: self-play in Ray actors, the learner and the replay in the driver's process.

``train.backend = "ray"`` runs the same training as the local backend, split over processes
and machines:

- ``train.num_actors`` self-play actors (:class:`SelfPlayActor`), each a
  :class:`~muzero_gym.workers.SelfPlayWorker` with its own vector env, search and copy of the
  network (on the CPU, or a share of a GPU with ``train.inference_device = "cuda"``). An actor
  makes ``train.actor_moves`` moves in all its envs per call and returns what they produced
  (segments of its games). Each actor has its next call queued while the driver takes in the
  last one, so actors never wait for the learner unless the replay ratio says so.
- The learner and the replay stay in the driver's process (on its GPU if it has one): sampling
  needs the whole replay for every batch, and keeping it beside the learner saves moving a
  batch across processes each step, while segments cross once. Priorities, reanalyse and
  symmetry augmentation are those of the local backend (:class:`~muzero_gym.workers.
  LearnerWorker`).
- Weights go out through Ray's object store every ``train.weight_sync_interval`` learner
  steps; an actor fetches the newest ones between its calls, once per version.
- ``train.replay_ratio`` learner steps per env step is the target. The learner may run ahead
  of it by ``train.max_ratio_drift`` (as a fraction) while it waits for data, and actors pause
  when it falls further behind than that, so a slow learner does not train on stale data and a
  fast one does not overfit.
- Evaluations run in an evaluation actor while training goes on; their results are logged at
  the env step they were made for.
- A killed actor is restarted by Ray (``max_restarts``); the games it had not finished end in
  the replay where its last segment left them, at most its unsent positions are lost, and
  ``faults/actor_restarts`` counts it when the first result of the new process arrives (a
  restart still under way when the run ends is not counted); the new process plays from a
  random key of its own (:func:`actor_generator`). Checkpoints are those of
  the local backend (a run started on one backend resumes on the other); the games actors
  have in progress at a checkpoint are not in it. Ctrl-C, SIGTERM and SIGHUP stop the driver
  as they stop a local run (a checkpoint, then how to resume): the handlers ``ray.init``
  replaces are put back.

Networking: without an address Ray starts a cluster on this machine that listens on 127.0.0.1
only, with no dashboard. With ``--ray-address`` the driver joins a running cluster (see the
README for a head node and worker nodes).
"""

from __future__ import annotations

import os
import secrets
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from muzero_gym.config import Config, ConfigError, config_from_dict
from muzero_gym.progress import Progress
from muzero_gym.selfplay import SOURCE_ID_STRIDE
from muzero_gym.stops import stop_handlers_kept
from muzero_gym.workers import PlayResult, SelfPlayWorker, build_model, inspect_env

if TYPE_CHECKING:
    from muzero_gym.agents.muzero import MuZeroAgent

ACTOR_TIMEOUT_S = 120.0  # how long the end of a run waits for an actor's last results
CALLS_PER_ACTOR = 2  # an actor's next call waits in its queue while the driver takes a result
RETRY_S = 1.0  # the wait before calling an actor again whose call failed (it is restarting)


def import_ray():
    """The ``ray`` module, or a ConfigError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError("train.backend = 'ray' needs Ray: pip install -e '.[distributed]' "
                          "(or pip install 'muzero-gym[distributed]')") from None
    return ray


def start_ray(address: str | None, num_actors: int) -> bool:
    """Connects to the cluster at ``address``, or starts one on this machine bound to
    127.0.0.1; returns whether this call started Ray (and should shut it down)."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    with stop_handlers_kept():
        _init_ray(ray, address, num_actors)
    return True


def _init_ray(ray: Any, address: str | None, num_actors: int) -> None:
    # Ray workers import env modules (module:EnvId) from where the driver does.
    path = os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH", "")) if p)
    runtime_env = {"env_vars": {"PYTHONPATH": path}}
    if address is None:
        # Ray binds its servers to every interface unless it runs as a single-node cluster,
        # which its RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 says. Ray reads that when imported:
        # the environment carries it to the processes Ray starts, the constant to this one.
        # The variable is put back afterwards: a `ray start` this program runs later (a
        # cluster of its own) must not inherit it.
        before = os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = False
        try:
            ray.init(include_dashboard=False, _node_ip_address="127.0.0.1",
                     num_cpus=max(os.cpu_count() or 1, num_actors + 1),
                     runtime_env=runtime_env, logging_level="ERROR", log_to_driver=False)
        finally:
            if before is None:
                del os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"]
            else:
                os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = before
    else:
        ray.init(address=address, runtime_env=runtime_env, logging_level="ERROR",
                 log_to_driver=False)


def actor_generator(seed: int, worker_id: int,
                    restarted: bool) -> tuple[np.random.Generator, int | None]:
    """A self-play actor's random generator, and its restart key (None for the first
    process). Ray reruns the constructor of a killed actor with the same arguments; a
    restarted process takes a key of its own from the operating system's entropy, so that
    its games (env seeds, exploration noise, chance draws) do not replay those of the
    actor's start. (A restart cannot be replayed exactly in any case: it comes at a time the
    run does not choose.)"""
    restart_key = secrets.randbits(62) if restarted else None
    keys = [seed, worker_id] + ([] if restart_key is None else [restart_key])
    return np.random.default_rng(keys), restart_key


class SelfPlayActor:
    """A :class:`~muzero_gym.workers.SelfPlayWorker` in its own process (a Ray actor)."""

    def __init__(self, config: dict[str, Any], preset: str, worker_id: int, seed: int):
        # Only small arguments: Ray reruns this constructor to restart a killed actor, and
        # weights passed here would have left the object store by then. The first play call
        # brings them.
        import torch

        from muzero_gym.learner import resolve_device
        from muzero_gym.numpy_inference import limit_blas_threads

        torch.set_num_threads(1)
        limit_blas_threads(1)
        self.config = config_from_dict(config, preset=preset)
        facts = inspect_env(self.config)
        device = resolve_device(self.config.train.inference_device)
        network = build_model(self.config, facts).to(device).eval()
        import ray

        # Said with this process's first result, so that the driver counts the restart and
        # ends the games of the process that died, even if that death failed no call.
        self.restarted = bool(ray.get_runtime_context().was_current_actor_reconstructed)
        rng, restart_key = actor_generator(seed, worker_id, self.restarted)
        self.worker = SelfPlayWorker(self.config, facts, network, rng, worker_id, restart_key)
        self.version = -1

    def pid(self) -> int:
        return os.getpid()

    def play(self, num_moves: int, training_step: int, weights: list) -> PlayResult:
        """``num_moves`` moves with the newest weights (``weights`` = [version, ref])."""
        version, ref = weights
        if version != self.version:
            import ray

            self.worker.set_weights(ray.get(ref))
            self.version = version
        return self.first_news(self.worker.play(num_moves, training_step))

    def flush(self) -> PlayResult:
        """What is played and unsent, and the ids of the games that end with this actor."""
        segments, running = self.worker.close()
        return self.first_news(PlayResult(segments=segments, abandoned=running,
                                          worker_id=self.worker.worker_id))

    def first_news(self, result: PlayResult) -> PlayResult:
        result.restarted, self.restarted = self.restarted, False
        return result


class EvaluationActor:
    """Runs the run's evaluations (:meth:`MuZeroAgent.run_evaluation`) beside training."""

    def __init__(self, config: dict[str, Any], preset: str):
        import torch

        from muzero_gym.agents.muzero import MuZeroAgent

        torch.set_num_threads(1)
        config_obj = config_from_dict(config, preset=preset)
        # It plays the weights it is sent, which are already those evaluation plays (the
        # driver's moving average, if the run keeps one): it keeps no average of its own.
        self.agent = MuZeroAgent(config_obj.replace(["train.backend=local",
                                                     "train.averaged_weights_tau=0"]))

    def evaluate(self, weights: dict[str, Any], seed: int):
        """The run's evaluation of ``weights`` (:meth:`LearnerWorker.playing_weights`)."""
        self.agent.learner.network.load_state_dict(weights)
        return self.agent.run_evaluation(seed=seed)


def _actor_cpus_and_gpus(config: Config) -> tuple[float, float]:
    if config.train.inference_device == "cuda":
        return 1.0, 1.0 / config.train.num_actors
    return 1.0, 0.0


def run_ray(agent: MuZeroAgent, total_env_steps: int, show_progress: bool) -> None:
    """Trains ``agent`` until ``total_env_steps`` env steps in total (see module doc)."""
    ray = import_ray()
    started = start_ray(agent.ray_address, agent.config.train.num_actors)
    # Games a local run left running (or this process's own self-play) cannot continue here.
    agent.close()
    agent.replay.close_running_games()
    agent.selfplay_worker.saved_state = None
    driver = _Driver(agent, ray)
    bar = Progress(total_env_steps, "env steps", initial=agent.env_steps, enabled=show_progress)
    try:
        driver.start()
        driver.loop(total_env_steps, bar)
    finally:
        bar.close()
        try:
            driver.stop()
        finally:
            try:
                agent.finish_learning()
            finally:
                if started:
                    ray.shutdown()


class _Driver:
    """The Ray backend's loop (see module doc)."""

    def __init__(self, agent: MuZeroAgent, ray: Any):
        self.agent, self.ray = agent, ray
        self.config = agent.config
        train = self.config.train
        cpus, gpus = _actor_cpus_and_gpus(self.config)
        self.actor_class = ray.remote(num_cpus=cpus, num_gpus=gpus, max_restarts=-1,
                                      max_task_retries=0)(SelfPlayActor)
        self.eval_class = ray.remote(num_cpus=1, max_restarts=-1)(EvaluationActor)
        self.num_actors = train.num_actors
        self.actors: dict[int, Any] = {}
        self.in_flight: dict[Any, int] = {}  # object ref of a play call -> actor index
        self.retry_at: dict[int, float] = {}  # no calls to a failing actor before this time
        self.version = 0
        self.weights_ref: Any = None
        self.restarts = 0
        self.evaluator: Any = None
        self.evaluation: tuple[Any, int] | None = None  # (ref, env steps it is for)
        self.eval_pending: list[int] = []

    # ---- actors ------------------------------------------------------------------------------

    def start(self) -> None:
        agent = self.agent
        self.publish_weights()
        seed = self.config.train.seed
        for i in range(self.num_actors):
            # Worker ids from 1: 0 is the local backend's, so ids of games stay apart.
            self.actors[i] = self.actor_class.remote(self.config.to_dict(), self.config.preset,
                                                     i + 1, seed)
        if self.config.train.eval_interval:
            self.evaluator = self.eval_class.remote(self.config.to_dict(), self.config.preset)
        for i in self.actors:
            self.retry_at[i] = 0.0
            self.top_up(i)
        agent.log_scalars({"faults/actor_restarts": float(self.restarts)}, now=True)

    def publish_weights(self) -> None:
        """New weights in the object store for the actors; the driver's own acting copy
        (evaluation, ``predict``) follows too."""
        self.weights_ref = self.ray.put(self.agent.learner_worker.weights())
        self.version += 1
        self.agent.sync_selfplay_weights()

    def top_up(self, i: int) -> None:
        """Queues calls of actor ``i`` up to CALLS_PER_ACTOR (none while the learner is
        behind: the actor then pauses, nor for a while after a call of it failed)."""
        if time.monotonic() < self.retry_at[i]:
            return
        queued = sum(1 for actor in self.in_flight.values() if actor == i)
        while queued < CALLS_PER_ACTOR and not self.learner_behind():
            ref = self.actors[i].play.remote(self.config.train.actor_moves,
                                             self.agent.training_steps,
                                             [self.version, self.weights_ref])
            self.in_flight[ref] = i
            queued += 1

    def collect(self, ref: Any) -> PlayResult | None:
        """The result of a finished play call, or None if its actor failed it (died, or is
        still being restarted by Ray): its next calls wait RETRY_S."""
        i = self.in_flight.pop(ref)
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayActorError:  # ActorDiedError, ActorUnavailableError
            self.retry_at[i] = time.monotonic() + RETRY_S
            return None

    def deliver(self, i: int, result: PlayResult) -> None:
        """Hands actor ``i``'s result to the agent. The first result of a restarted actor's
        new process counts the restart and first ends the games of the process that died:
        their positions stay, and the new process's games, whose source ids start over, are
        new games. Failed calls count nothing: one death fails every call queued with it and
        the calls made while Ray restarts the actor, and an actor paused for the learner dies
        without failing any."""
        if result.restarted:
            self.restarts += 1
            self.agent.log_scalars({"faults/actor_restarts": float(self.restarts)}, now=True)
            self.end_games_of(i + 1)
        self.agent.receive(result)

    def last_result(self, i: int, ref: Any, deadline: float) -> PlayResult | None:
        """The answer to actor ``i``'s flush call ``ref``. An actor Ray is still restarting is
        asked again until it answers (its restart is then counted) or ``deadline`` passes;
        None means its unsent positions are lost."""
        while True:
            try:
                return self.ray.get(ref, timeout=max(1.0, deadline - time.monotonic()))
            except self.ray.exceptions.RayActorError:
                if time.monotonic() + RETRY_S >= deadline:
                    return None
                time.sleep(RETRY_S)
                ref = self.actors[i].flush.remote()
            except Exception:  # noqa: BLE001 - a dying cluster
                return None

    def end_games_of(self, worker_id: int) -> None:
        replay = self.agent.replay
        lost = [s for s in replay.running_games() if s // SOURCE_ID_STRIDE == worker_id]
        replay.close_running_games(lost)

    # ---- ratio ---------------------------------------------------------------------------------

    def learner_target(self) -> float:
        """Learner steps the env steps so far call for (after the warm-up)."""
        return self.agent.training_steps + self.agent._train_credit

    def can_train(self) -> bool:
        drift = self.config.train.max_ratio_drift
        target = self.learner_target()
        return target > 0 and self.agent.training_steps + 1 <= (1.0 + drift) * target + 1e-9

    def learner_behind(self) -> bool:
        drift = self.config.train.max_ratio_drift
        return self.agent.training_steps < (1.0 - drift) * self.learner_target() - 1.0

    # ---- the loop ----------------------------------------------------------------------------

    def loop(self, total_env_steps: int, bar: Progress) -> None:
        agent, ray = self.agent, self.ray
        reported: set[int] = set()
        while agent.env_steps < total_env_steps:
            if len(reported) == self.num_actors and agent.steady_start is None:
                agent.mark_steady()  # every actor is up: rates from here leave out start-up
            before = agent.env_steps
            ready = []
            if self.in_flight:
                ready, _ = ray.wait(list(self.in_flight), num_returns=len(self.in_flight),
                                    timeout=0)
                if not ready and not self.can_train():
                    ready, _ = ray.wait(list(self.in_flight), num_returns=1)
            if not self.in_flight and not self.can_train():
                time.sleep(RETRY_S / 10)  # every actor is being restarted
            for ref in ready:
                i = self.in_flight[ref]
                result = self.collect(ref)
                if result is not None:
                    self.deliver(i, result)
                    reported.add(i)
                    if result.seconds > 0:
                        rate = result.num_transitions / result.seconds
                        agent.log_scalars({"perf/actor_env_steps_per_s": rate,
                                           f"perf/actor_env_steps_per_s/actor_{i}": rate})
                self.top_up(i)
            if self.can_train():
                agent._train_credit -= 1.0  # may go below 0: the learner ran ahead
                agent.train_steps(1)
                if agent.training_steps - agent._last_sync_step >= \
                        self.config.train.weight_sync_interval:
                    self.publish_weights()
            for i in self.actors:  # actors paused for the learner start again
                self.top_up(i)
            if agent.after_moves(before, bar, evaluate=False):
                self.eval_pending.append(agent.env_steps)
            self.poll_evaluation()

    def poll_evaluation(self, wait_s: float = 0.0) -> None:
        """Logs a finished evaluation (waiting up to ``wait_s`` for it); starts the newest one
        due when the actor is free."""
        if self.evaluator is None:
            return
        if self.evaluation is not None:
            ref, step = self.evaluation
            ready, _ = self.ray.wait([ref], timeout=wait_s)
            if not ready:
                return
            try:
                self.agent.log_evaluation(self.ray.get(ref), step)
            except self.ray.exceptions.RayError:
                pass  # a lost evaluation: the next one comes at the next interval
            self.evaluation = None
        if self.eval_pending:
            step = self.eval_pending.pop()  # the newest; older ones are skipped
            self.eval_pending.clear()
            weights = self.ray.put(self.agent.learner_worker.playing_weights())
            seed = int(self.agent.rng.integers(2**31))
            self.evaluation = (self.evaluator.evaluate.remote(weights, seed), step)

    def stop(self) -> None:
        """Takes the actors' last results and unsent positions, ends their games in the
        replay, and stops them."""
        ray = self.ray
        deadline = time.monotonic() + ACTOR_TIMEOUT_S
        for ref in list(self.in_flight):
            try:
                ready, _ = ray.wait([ref], timeout=max(0.0, deadline - time.monotonic()))
                if ready:
                    i = self.in_flight[ref]
                    result = self.collect(ref)
                    if result is not None:
                        self.deliver(i, result)
            except Exception:  # noqa: BLE001 - a dying cluster: keep what was received
                pass
        self.in_flight.clear()
        flushes = {i: actor.flush.remote() for i, actor in self.actors.items()}
        for i, ref in flushes.items():
            result = self.last_result(i, ref, deadline)
            if result is not None:
                self.deliver(i, result)
            self.end_games_of(i + 1)
        self.eval_pending.clear()
        try:  # the last evaluation started belongs in the logs
            self.poll_evaluation(wait_s=max(0.0, deadline - time.monotonic()))
        except Exception:  # noqa: BLE001 - a lost evaluation
            pass
        for actor in [*self.actors.values(), self.evaluator]:
            if actor is not None:
                ray.kill(actor, no_restart=True)
        self.actors.clear()
