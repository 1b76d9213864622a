"""The local backend: self-play, learner, evaluation and checkpoints in one process.

One loop, top to bottom: a move in every env of the agent's :class:`~muzero_gym.workers.
SelfPlayWorker`, its segments into the replay, the learner steps those moves earned
(``train.replay_ratio`` per env step once ``train.warmup_transitions`` are stored), the weights
to self-play every ``train.weight_sync_interval`` learner steps, then logs, evaluations and
checkpoints at their intervals. With ``train.concurrent_learner``, and always with a GPU
learner, the learner steps earned by one move run in a second thread while self-play makes the
next move (the learner sees the replay one move late and draws from its own generator, so a
seed's run stays reproducible; on a GPU the learner's thread leaves the interpreter to
self-play while its kernels run).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from muzero_gym.progress import Progress
from muzero_gym.stops import deferred_stops

if TYPE_CHECKING:
    from muzero_gym.agents.muzero import MuZeroAgent


def run_local(agent: MuZeroAgent, total_env_steps: int, show_progress: bool) -> None:
    """Trains ``agent`` until ``total_env_steps`` env steps in total (see module doc)."""
    bar = Progress(total_env_steps, "env steps", initial=agent.env_steps, enabled=show_progress)
    threaded = agent.config.train.concurrent_learner or agent.device.type == "cuda"
    learner_thread = ThreadPoolExecutor(1, thread_name_prefix="learner") if threaded else None
    try:
        while agent.env_steps < total_env_steps:
            before = agent.env_steps
            training: Future | None = None
            if learner_thread is not None and agent.learner_steps_due() >= 1:
                # This thread leaves the replay alone until the learner thread is done.
                training = learner_thread.submit(agent.train_steps, agent.take_due_steps())
            # A stop signal takes effect once the move is in the replay and its learner
            # steps are taken (muzero_gym.stops).
            with deferred_stops():
                try:
                    result = agent.selfplay_worker.play(1, agent.training_steps)
                except BaseException:
                    # An env that raised mid-step leaves the vector env in an unknown state:
                    # start afresh next time, so the agent stays usable. What was played is
                    # kept (a step records nothing before its env has stepped).
                    agent.close()
                    raise
                finally:
                    if training is not None:
                        training.result()
                agent.receive(result)
                if agent.steady_start is None:
                    agent.mark_steady()
                if learner_thread is None:
                    agent.train_steps(agent.take_due_steps())
            agent.sync_if_due()
            agent.after_moves(before, bar)
    finally:
        if learner_thread is not None:
            learner_thread.shutdown(wait=True)
        bar.close()
        agent.finish_learning()
