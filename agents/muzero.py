"""``MuZeroAgent``: self-play, replay, learner and search put together behind an SB3-like surface.

    agent = MuZeroAgent(load_config("cartpole"), run_dir="runs/my-run")
    agent.learn(30_000)                 # self-play and training until 30k env steps in total
    returns = agent.evaluate(20)        # greedy episodes on fresh envs
    action = agent.predict(observation)
    agent.save("agent.pt"); agent = MuZeroAgent.load("agent.pt")

``learn`` runs one loop on one process (its envs stay open between calls, so episodes in
progress carry on; ``close`` ends them): a batched search steps all envs of a vector env, finished
games go to the replay buffer, and the learner takes ``replay_ratio`` steps per env step once
``warmup_transitions`` are stored. Self-play uses its own copy of the weights, refreshed every
``weight_sync_interval`` learner steps. With a ``run_dir`` it logs to TensorBoard and writes a
checkpoint (model, target model, optimizer, counters, RNG states, replay with priorities, config)
every ``log.checkpoint_interval`` env steps and when it stops, Ctrl-C included. While it writes
it holds the run folder's lock (:class:`~muzero_gym.run_folder.RunLock`), so a second process
cannot write the same run, and a checkpoint is never written over with NaN weights.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from muzero_gym.arena import MatchResult, Opponent, play_matches
from muzero_gym.atari import human_normalized_score
from muzero_gym.checkpoint import (
    CHECKPOINT_NAME,
    CheckpointError,
    load_checkpoint,
    resolve_checkpoint_path,
    save_checkpoint,
)
from muzero_gym.config import Config, check_execution_overrides, config_from_dict
from muzero_gym.environment import EnvError, make_env, make_vector_env
from muzero_gym.envs.opponents import make_opponent
from muzero_gym.game import Game
from muzero_gym.inference import plan
from muzero_gym.learner import Learner, TrainingDivergedError, resolve_device
from muzero_gym.local_driver import run_local
from muzero_gym.mcts import BatchedMCTS, SearchResult, SearchSettings, select_actions
from muzero_gym.numpy_inference import limit_blas_threads
from muzero_gym.progress import Progress
from muzero_gym.replay import ReplayBuffer
from muzero_gym.run_folder import RunLock, remove_stale_temp_files
from muzero_gym.run_log import RunLogger
from muzero_gym.selfplay import SelfPlay
from muzero_gym.simulator import SimulatorSearchAdapter, scratch_seed
from muzero_gym.stops import deferred_stops
from muzero_gym.workers import (
    LearnerWorker,
    PlayResult,
    SelfPlayWorker,
    build_model,
    inspect_env,
    new_game,
    replay_unroll_depth,
)

CHECKPOINT_VERSION = 1


def torch_threads(config: Config) -> int:
    """Torch's (and numpy's BLAS) threads for each thread of work of a run of ``config``:
    ``train.num_threads``, or for 0 one with async envs (their workers share the cores), half
    the cores with a concurrent learner (self-play and learner share them), else 0: torch's
    default, every core."""
    threads = config.train.num_threads
    if threads == 0 and config.env.vectorization == "async":
        return 1
    if threads == 0 and config.train.concurrent_learner:
        return max(1, (os.cpu_count() or 2) // 2)
    return threads


class MuZeroAgent:
    """A MuZero agent for one Gymnasium env, built from a :class:`~muzero_gym.config.Config`."""

    def __init__(self, config: Config, run_dir: str | Path | None = None):
        self.config = config
        self.run_dir = Path(run_dir) if run_dir is not None else None
        train = config.train
        self._set_threads()
        self.device = resolve_device(train.device)
        self.inference_device = resolve_device(train.inference_device)
        self.facts = inspect_env(config)
        self.observation_space = self.facts.observation_space
        self.num_actions = self.facts.num_actions
        self.encoder = self.facts.encoder
        self.input_shape = self.facts.input_shape
        self.symmetries = self.facts.symmetries

        self.rng = np.random.default_rng(train.seed)
        # The learner draws its batches from its own generator when it runs in its own thread
        # (or beside Ray actors), so that neither side's draws depend on timing.
        self.learner_rng = (np.random.default_rng([train.seed, 1])
                            if train.concurrent_learner or train.backend == "ray"
                            or self.device.type == "cuda" else self.rng)
        torch.manual_seed(train.seed)
        network = build_model(config, self.facts)
        self.learner = Learner(network, train, self.device)
        self.selfplay_network = copy.deepcopy(network).to(self.inference_device).eval()
        self.search = BatchedMCTS(SearchSettings.from_config(config), self.num_actions)
        self.acting_search = self._acting_search()
        self.replay = ReplayBuffer(config.replay, num_actions=self.num_actions,
                                   num_unroll_steps=replay_unroll_depth(train),
                                   td_steps=train.td_steps, td_steps_age=train.td_steps_age,
                                   discount=train.discount,
                                   reward_clipping=train.reward_clipping,
                                   search_value_mix=train.search_value_mix,
                                   encoder=self.encoder,
                                   num_stacked_observations=config.env.num_stacked_observations,
                                   stack_actions=config.env.stack_actions,
                                   num_players=config.env.num_players)
        self.learner_worker = LearnerWorker(config, self.learner, self.replay, self.learner_rng,
                                            self.symmetries, self.num_actions)
        self.selfplay_worker = SelfPlayWorker(config, self.facts, self.selfplay_network,
                                              self.rng)
        self.env_steps = 0
        self.episodes = 0
        self.replay_left_out = False  # loaded for play only (``load(include_replay=False)``)
        self._train_credit = 0.0
        self._last_sync_step = 0
        self._acting_on_average = False  # the acting network holds the averaged weights
        self._logger: RunLogger | None = None
        self._metrics: dict[str, list[float]] = collections.defaultdict(list)
        self._recent_returns: collections.deque[float] = collections.deque(maxlen=20)
        self.last_eval_return: float | None = None
        self._last_eval: tuple[int, Any] | None = None  # (env steps, result) of the newest
        # Env steps of the newest checkpoint in run_dir written (or loaded) by this agent.
        self.saved_env_steps: int | None = None
        self._run_lock = RunLock(self.run_dir) if self.run_dir is not None else None
        self._acting_simulator: SimulatorSearchAdapter | None = None
        self._rate_start = (time.perf_counter(), 0, 0)  # for perf/*_per_s
        # (time, env steps, learner steps) when the last learn() had started up (its first
        # moves made, every Ray actor running): rates from there on leave start-up out.
        self.steady_start: tuple[float, int, int] | None = None
        self.ray_address: str | None = None  # train.backend = "ray": a cluster to join

    # ---- construction helpers --------------------------------------------------------------

    def _set_threads(self) -> None:
        # Subnormal floats appear as weights and gradients shrink during training and make CPU
        # kernels several times slower (the backward pass went from 15 to 50 ms on CartPole).
        torch.set_flush_denormal(True)
        threads = torch_threads(self.config)
        if threads > 0:
            torch.set_num_threads(threads)
            limit_blas_threads(threads)

    def _acting_search(self) -> BatchedMCTS:
        """The search for evaluation and play: self-play's, or one with
        ``search.eval_simulations`` simulations, ``search.eval_pb_c_init`` and
        ``search.eval_draw_value``."""
        search, selfplay = self.config.search, self.search.settings
        settings = dataclasses.replace(
            selfplay, num_simulations=search.eval_simulations or selfplay.num_simulations,
            pb_c_init=selfplay.pb_c_init if search.eval_pb_c_init < 0 else search.eval_pb_c_init,
            draw_value=search.eval_draw_value)
        return self.search if settings == selfplay else BatchedMCTS(settings, self.num_actions)

    def set_eval_simulations(self, num_simulations: int) -> None:
        """Simulations per search from now on when the agent is evaluated or plays
        (``search.eval_simulations``; 0 = as self-play). Self-play is unchanged."""
        self._replace_acting_search([f"search.eval_simulations={num_simulations}"])

    def set_eval_draw_value(self, draw_value: float) -> None:
        """What a drawn game is worth to the agent from now on when it is evaluated or plays
        (``search.eval_draw_value``, in [-1, 1]; negative = contempt). Self-play is unchanged."""
        self._replace_acting_search([f"search.eval_draw_value={draw_value}"])

    def _replace_acting_search(self, overrides: list[str]) -> None:
        self.config = self.config.replace(overrides)
        self.acting_search = self._acting_search()

    def new_game(self) -> Game:
        return new_game(self.config, self.facts)

    @property
    def network(self) -> torch.nn.Module:
        """The network being trained."""
        return self.learner.network

    @property
    def training_steps(self) -> int:
        return self.learner.training_step

    @property
    def recent_returns(self) -> list[float]:
        """Raw returns of the last 20 finished self-play episodes, oldest first (what the
        progress line averages; kept in checkpoints, so a resumed run goes on with them)."""
        return list(self._recent_returns)

    # ---- training ---------------------------------------------------------------------------

    def lock_run_dir(self) -> None:
        """Takes the run folder's lock (a RunFolderError if another process holds it) and
        removes temporary files a killed run left there. :meth:`learn` does this itself; take
        it earlier to keep the folder for longer (the command line holds it for the whole run,
        final evaluation included). Released by :meth:`unlock_run_dir`."""
        if self._run_lock is None or self._run_lock.held:
            return
        self._run_lock.acquire()
        remove_stale_temp_files(self.run_dir)

    def unlock_run_dir(self) -> None:
        if self._run_lock is not None:
            self._run_lock.release()

    def _open_logger(self) -> RunLogger | None:
        """The run's TensorBoard writer, opened on first use. A run resumed from a checkpoint
        drops what an earlier process logged after that checkpoint (``purge_step``), so every
        curve continues from the checkpoint instead of doubling back."""
        if self.run_dir is not None and self._logger is None:
            purge_step = self.env_steps + 1 if self.env_steps > 0 else None
            self._logger = RunLogger(self.run_dir, purge_step=purge_step)
            if not (self.run_dir / "config.toml").exists():
                self._logger.write_config(self.config)
        return self._logger

    def learn(self, total_env_steps: int, progress: bool | None = None) -> MuZeroAgent:
        """Self-play and train until ``total_env_steps`` env steps have been taken in total
        (counting the steps of earlier ``learn`` calls and of a resumed checkpoint), on the
        backend of ``train.backend``: this process (``local``), or Ray actors for self-play
        (``ray``, :mod:`muzero_gym.ray_driver`)."""
        if total_env_steps < 1:
            raise ValueError(f"total_env_steps = {total_env_steps}: must be >= 1")
        self._check_replay_loaded("train")
        if self._acting_on_average:  # self-play acts on the trained weights
            self.sync_selfplay_weights()
        locked_here = self._run_lock is not None and not self._run_lock.held
        self.lock_run_dir()
        try:
            self._open_logger()
            show = self.config.log.progress if progress is None else progress
            self._rate_start = (time.perf_counter(), self.env_steps, self.training_steps)
            self.steady_start = None
            if self.config.train.backend == "ray":
                from muzero_gym.ray_driver import run_ray

                run_ray(self, total_env_steps, show)
            else:
                run_local(self, total_env_steps, show)
            return self
        finally:
            if locked_here:
                self.unlock_run_dir()

    # Hooks of the drivers (muzero_gym.local_driver, muzero_gym.ray_driver).

    def receive(self, result: PlayResult) -> None:
        """Takes in what self-play produced: positions into the replay, counters, episode
        curves, search statistics; earns learner steps once the warm-up is stored."""
        self.env_steps += result.num_transitions
        for key, values in result.search.items():
            self._metrics[key] += values
        self.replay.clock = self.training_steps
        for segment in result.segments:
            self.replay.add_segment(segment)
        for game in result.finished:
            self.replay.add_game(game)
        self.replay.close_running_games(result.abandoned)
        if result.num_dropped:
            self._metrics["faults/dropped_games"].append(float(result.num_dropped))
        for episode_return, length in zip(result.episode_returns, result.episode_lengths):
            self._log_episode(episode_return, length)
        if len(self.replay) >= self.config.train.warmup_transitions:
            self._train_credit += result.num_transitions * self.config.train.replay_ratio

    def learner_steps_due(self) -> int:
        """Whole learner steps earned and not yet taken."""
        return int(self._train_credit)

    def take_due_steps(self, limit: int | None = None) -> int:
        """The whole learner steps earned so far (``train.replay_ratio`` per env step), at
        most ``limit``."""
        due = int(self._train_credit)
        if limit is not None:
            due = min(due, limit)
        self._train_credit -= due
        return due

    def train_steps(self, count: int) -> None:
        """``count`` learner steps; their metrics go to the next log."""
        for key, values in self.learner_worker.train(count).items():
            self._metrics[key] += values

    def sync_if_due(self) -> bool:
        """Copies the trained weights to self-play every ``train.weight_sync_interval``
        learner steps; whether it did."""
        if self.training_steps - self._last_sync_step >= self.config.train.weight_sync_interval:
            self.sync_selfplay_weights()
            return True
        return False

    def after_moves(self, before: int, bar: Progress | None = None,
                    evaluate: bool = True) -> bool:
        """What follows moves that took the env steps from ``before`` to now: TensorBoard
        scalars every ``log.log_interval``, an evaluation every ``train.eval_interval`` (here,
        unless ``evaluate`` is false: then the return value says one is due), a checkpoint
        every ``log.checkpoint_interval`` env steps, the progress line."""
        config = self.config
        if _crossed(before, self.env_steps, config.log.log_interval):
            self._log()
        eval_due = bool(config.train.eval_interval) and _crossed(
            before, self.env_steps, config.train.eval_interval)
        if eval_due and evaluate:
            self.evaluate_and_log()
        if self.run_dir is not None and _crossed(before, self.env_steps,
                                                 config.log.checkpoint_interval):
            self.save(self.run_dir)
        if bar is not None:
            # "-" until an episode has ended (a fresh run's first moves)
            recent = f"{np.mean(self._recent_returns):.2f}" if self._recent_returns else "-"
            label = "first player" if config.env.num_players == 2 else "return"
            fields: dict[str, Any] = {"episodes": self.episodes, label: recent}
            if self.last_eval_return is not None:
                fields["eval"] = f"{self.last_eval_return:.1f}"
            bar.update(self.env_steps, **fields)
        return eval_due

    def finish_learning(self) -> None:
        """The checkpoint at the end of :meth:`learn` (however it ends), the scalars gathered
        since the last log, and the logs' flush."""
        try:
            if self.run_dir is not None:
                self.save(self.run_dir)
        finally:
            if self._logger is not None:
                if self._metrics:
                    self._log()
                self._logger.flush()

    def mark_steady(self) -> None:
        self.steady_start = (time.perf_counter(), self.env_steps, self.training_steps)

    def steady_rates(self) -> tuple[float, float]:
        """(env steps/s, learner steps/s) of the last learn() since it had started up."""
        if self.steady_start is None:
            return 0.0, 0.0
        start, env_steps, training_steps = self.steady_start
        seconds = max(time.perf_counter() - start, 1e-9)
        return ((self.env_steps - env_steps) / seconds,
                (self.training_steps - training_steps) / seconds)

    def log_scalars(self, values: dict[str, float], now: bool = False) -> None:
        """Adds scalars (per-actor rates) to the next TensorBoard log, or with ``now`` writes
        them at once (fault counts)."""
        if now and self._logger is not None:
            self._logger.scalars(values, self.env_steps)
            return
        for key, value in values.items():
            self._metrics[key].append(float(value))

    def _new_simulator(self, seed: int) -> SimulatorSearchAdapter | None:
        """A true-simulator adapter over a scratch env when ``search.simulator`` is on; ``seed``
        seeds its chance draws (see :func:`~muzero_gym.simulator.scratch_seed`)."""
        if not self.config.search.simulator:
            return None
        return SimulatorSearchAdapter(self.selfplay_network, self.encoder,
                                      make_env(self.config.env), self.num_actions, seed=seed)

    def _start_selfplay(self) -> SelfPlay:
        """The local self-play (its envs made on first use and kept between ``learn``
        calls); saved games it cannot continue end in the replay."""
        selfplay, lost = self.selfplay_worker.start()
        self.replay.close_running_games(lost)
        return selfplay

    def close(self) -> None:
        """Closes the self-play envs. What their games in progress played stays in the
        replay, as games truncated there."""
        segments, running = self.selfplay_worker.close()
        for segment in segments:
            self.replay.add_segment(segment)
        self.replay.close_running_games(running)

    def __enter__(self) -> MuZeroAgent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _log_episode(self, episode_return: float, length: int) -> None:
        """A whole env episode ended (raw return, however training games were split; the first
        player's result in two-player games)."""
        self.episodes += 1
        self._recent_returns.append(episode_return)
        if self._logger is not None:
            self._logger.scalars({"charts/episodic_return": episode_return,
                                  "charts/episodic_length": float(length)}, self.env_steps)

    def sync_selfplay_weights(self) -> None:
        """Copies the trained weights into the self-play network."""
        self._load_acting_weights(self.learner.network, averaged=False)
        self._last_sync_step = self.training_steps

    def sync_playing_weights(self) -> None:
        """Copies the weights evaluation and play use into the acting network: the moving
        average of the trained weights with ``train.averaged_weights_tau`` > 0, else the
        trained weights. Evaluations, matches, :meth:`predict` and :meth:`search_positions`
        see to it themselves; :meth:`learn` puts the trained weights back for self-play."""
        if self.learner.averaged_network is None:
            self.sync_selfplay_weights()
        else:
            self._load_acting_weights(self.learner.averaged_network, averaged=True)

    @contextlib.contextmanager
    def playing_weights(self) -> Iterator[None]:
        """The acting network holds the weights of evaluation and play inside the block and
        the trained ones after it, for self-play."""
        self.sync_playing_weights()
        try:
            yield
        finally:
            if self.learner.averaged_network is not None:
                self.sync_selfplay_weights()

    def _load_acting_weights(self, network: torch.nn.Module, averaged: bool) -> None:
        self.selfplay_network.load_state_dict(network.state_dict())
        self._acting_on_average = averaged
        self.selfplay_worker.refresh()
        if self._acting_simulator is not None:
            self._acting_simulator.refresh()

    def _log(self) -> None:
        if self._logger is None:
            self._metrics.clear()
            return
        start_time, start_env, start_train = self._rate_start
        elapsed = max(time.perf_counter() - start_time, 1e-9)
        values = {k: float(np.mean(v)) for k, v in self._metrics.items() if v}
        values["perf/env_steps_per_s"] = (self.env_steps - start_env) / elapsed
        values["perf/train_steps_per_s"] = (self.training_steps - start_train) / elapsed
        values["replay/size"] = float(len(self.replay))
        values["replay/bytes"] = float(self.replay.nbytes())
        values.update(self.replay.statistics())
        self._logger.scalars(values, self.env_steps)
        self._metrics.clear()

    def evaluate_and_log(self, progress: bool = False) -> MatchResult | np.ndarray:
        """The run's evaluation at the current env step, logged to TensorBoard: greedy
        episodes (``train.eval_episodes``; ``eval/return_mean``, ``eval/hns`` for Atari-100k
        games), or for two players games against ``train.eval_opponent``
        (``eval/win_rate``, ``eval/draw_rate``, ``eval/loss_rate``). Returns the episode
        returns or the match result; a second call at the same env step returns the first
        one's result."""
        if self._last_eval is not None and self._last_eval[0] == self.env_steps:
            return self._last_eval[1]
        result = self.run_evaluation(progress, seed=int(self.rng.integers(2**31)))
        self.log_evaluation(result, self.env_steps)
        return result

    def run_evaluation(self, progress: bool = False,
                       seed: int | None = None) -> MatchResult | np.ndarray:
        """The run's evaluation (see :meth:`evaluate_and_log`), without logging it."""
        train = self.config.train
        if self.config.env.num_players == 2:
            opponent = make_opponent(train.eval_opponent, train.eval_opponent_depth, seed=seed,
                                     level=train.eval_opponent_level)
            try:
                return self.play_against(opponent, train.eval_episodes, progress=progress)
            finally:
                if hasattr(opponent, "close"):
                    opponent.close()
        return self.evaluate(train.eval_episodes, progress=progress, seed=seed)

    def log_evaluation(self, result: MatchResult | np.ndarray, env_steps: int) -> None:
        """Logs an evaluation made at ``env_steps`` (``eval/*`` tags)."""
        if isinstance(result, MatchResult):
            self.last_eval_return = result.win_rate - result.loss_rate
            scalars = {"eval/win_rate": result.win_rate, "eval/draw_rate": result.draw_rate,
                       "eval/loss_rate": result.loss_rate}
        else:
            self.last_eval_return = float(np.mean(result))
            scalars = {"eval/return_mean": self.last_eval_return}
            hns = human_normalized_score(self.config.env.id, self.last_eval_return)
            if hns is not None:
                scalars["eval/hns"] = hns
        self._last_eval = (env_steps, result)
        logger = self._open_logger()
        if logger is not None:
            logger.scalars(scalars, env_steps)
            logger.flush()

    def play_against(self, opponent: Opponent, num_games: int, seed: int | None = None,
                     agent_seats: tuple[int, ...] = (0, 1), progress: bool = False,
                     opening_plies: int | None = None) -> MatchResult:
        """Greedy games against ``opponent`` (two-player envs); by default half of them with
        the agent moving first, each after ``opening_plies`` random moves (default
        ``train.eval_opening_plies``; see :func:`muzero_gym.arena.play_matches`)."""
        if opening_plies is None:
            opening_plies = self.config.train.eval_opening_plies
        with self.playing_weights():
            return play_matches(self, opponent, num_games, seed=seed, agent_seats=agent_seats,
                                progress=progress, opening_plies=opening_plies)

    def search_games(self, games: list[Game], envs: list) -> SearchResult:
        """One batched search from the current state of each game; ``envs[i]`` is the env
        ``games[i]`` is played on (its ``get_state()`` feeds true-simulator search)."""
        states = ([env.unwrapped.get_state() for env in envs] if self.config.search.simulator
                  else None)
        return self.search_positions(np.stack([g.make_image() for g in games]),
                                     np.stack([g.legal_action_mask() for g in games]),
                                     np.array([g.to_play() for g in games]), states)

    @deferred_stops()
    def search_positions(self, images: np.ndarray, legal_action_mask: np.ndarray | None = None,
                         to_play: np.ndarray | None = None, states: list | None = None,
                         add_noise: bool = False) -> SearchResult:
        """One batched search from model inputs [B, ...] with the weights of play (see
        :meth:`sync_playing_weights`; a stop signal waits for its end). With
        ``search.simulator`` on, ``states`` (the envs' ``get_state()``) must be given."""
        if self.learner.averaged_network is not None and not self._acting_on_average:
            self.sync_playing_weights()
        if not self.config.search.simulator:
            return plan(self.selfplay_network, self.acting_search, images, legal_action_mask,
                        to_play, self.rng, add_noise=add_noise)
        if states is None:
            raise ValueError("search.simulator = true: pass the envs' get_state() as states")
        if self._acting_simulator is None:
            self._acting_simulator = self._new_simulator(
                scratch_seed(self.config.train.seed, 2))
        simulator = self._acting_simulator
        with torch.inference_mode():
            root_value, root_logits = simulator.initial(images, states)
            return self.acting_search.run(root_value, root_logits, simulator.recurrent_fn,
                                          legal_action_mask, to_play, self.rng, add_noise)

    # ---- acting -----------------------------------------------------------------------------

    def evaluate(self, num_episodes: int, render: bool = False, progress: bool = False,
                 seed: int | None = None) -> np.ndarray:
        """Returns of ``num_episodes`` greedy episodes (no noise, temperature 0) on fresh envs.

        Each env plays a fixed share of the episodes, so short episodes are not favoured. A
        two-player game has no return of its own (its rewards go to whoever moved last): play
        it against an opponent with :meth:`play_against`."""
        if self.config.env.num_players == 2:
            raise ValueError(
                f"{self.config.env.id} is a two-player game: evaluate() would return the last "
                "mover's reward, not a score. Use play_against(opponent, num_games) (muzero-gym "
                "eval RUN --opponent NAME)")
        if render:
            with self.playing_weights():
                return self._evaluate_rendered(num_episodes, seed)
        games = self.evaluate_games(num_episodes, progress, seed)
        return np.asarray([float(sum(game.rewards)) for game in games])

    def evaluate_games(self, num_episodes: int, progress: bool = False,
                       seed: int | None = None) -> list[Game]:
        """The recorded games of ``num_episodes`` greedy episodes (see :meth:`evaluate`)."""
        with self.playing_weights():
            return self._play_evaluation_games(num_episodes, progress, seed)

    def _play_evaluation_games(self, num_episodes: int, progress: bool,
                               seed: int | None) -> list[Game]:
        num_envs = min(num_episodes, self.config.env.num_envs)
        envs = make_vector_env(self.config.env, num_envs)
        eval_seed = int(self.rng.integers(2**31)) if seed is None else seed
        eval_rng = np.random.default_rng(eval_seed)
        player = SelfPlay(envs, self.selfplay_network, self.acting_search, self.new_game,
                          self.config.search, eval_rng, add_noise=False, greedy=True,
                          simulator=self._new_simulator(scratch_seed(eval_seed, 1)))
        quota = [num_episodes // num_envs + (i < num_episodes % num_envs)
                 for i in range(num_envs)]
        games: list[Game] = []
        bar = Progress(num_episodes, "episodes", enabled=progress)
        try:
            player.reset(seed=int(eval_rng.integers(2**31)))
            while len(games) < num_episodes:
                owners = [i for i in range(num_envs) if player.pending_reset[i]]
                stats = player.step(self.training_steps)
                for i, game in zip(owners, stats.finished):
                    if quota[i] > 0:
                        quota[i] -= 1
                        games.append(game)
                mean = np.mean([sum(g.rewards) for g in games]) if games else 0.0
                bar.update(len(games), mean_return=f"{mean:.1f}")
        finally:
            bar.close()
            envs.close()
        return games

    def _evaluate_rendered(self, num_episodes: int, seed: int | None) -> np.ndarray:
        env = make_env(self.config.env, render_mode="human")
        returns = []
        try:
            for episode in range(num_episodes):
                game = Game.for_env(env, self.config.env.num_stacked_observations,
                                    self.config.env.stack_actions, self.config.env.num_players,
                                    encoder=self.encoder)
                game.reset(seed=None if seed is None else seed + episode)
                while not game.done:
                    result = self.search_games([game], [env])
                    game.store_search_statistics(result.root_value[0], result.search_policy[0])
                    game.apply(int(result.greedy_actions()[0]))
                returns.append(float(sum(game.rewards)))
        except gym.error.DependencyNotInstalled as e:  # rendering needs pygame
            raise EnvError(f"cannot render {self.config.env.id}: {e}") from None
        finally:
            env.close()
        return np.asarray(returns)

    def predict(self, observation: Any, legal_action_mask: np.ndarray | None = None,
                to_play: int | None = None, deterministic: bool = True, state: Any = None, *,
                info: dict | None = None, env: gym.Env | None = None) -> int:
        """The action the search picks for one raw env observation (when ``deterministic`` the
        most visited, or the gumbel search's pick; else sampled from the visit counts; with
        ``search.solver`` a move proven best is taken and one proven lost avoided)::

            observation, info = env.reset()
            action = agent.predict(observation, info=info, env=env)

        ``info`` (the env's last info) gives the legal moves (``info["action_mask"]``) and the
        player to move (``info["to_play"]``) unless ``legal_action_mask`` / ``to_play`` are
        passed. A true-simulator search (``search.simulator``) starts from the env's real
        state: pass ``env`` (its ``unwrapped.get_state()`` is read) or that ``state`` itself.
        With stacked observations the observation is repeated to fill the stack; use a
        ``Game`` for histories."""
        info = dict(info or {})
        if legal_action_mask is not None:
            info["action_mask"] = legal_action_mask
        if to_play is not None:
            info["to_play"] = to_play
        if state is None and env is not None and self.config.search.simulator:
            state = env.unwrapped.get_state()
        if state is None and self.config.search.simulator:
            raise ValueError(
                "this agent searches copies of the real game (search.simulator = true): pass "
                "the env it plays, agent.predict(observation, info=info, env=env), or "
                "state=env.unwrapped.get_state()")
        game = self.new_game()
        game.start(observation, info)
        result = self.search_positions(game.make_image()[None], game.legal_action_mask()[None],
                                       np.array([game.to_play()]),
                                       None if state is None else [state])
        if deterministic:
            return int(result.greedy_actions()[0])
        return int(select_actions(result.weights(), 1.0, self.rng)[0])

    # ---- saving ----------------------------------------------------------------------------

    def _check_replay_loaded(self, doing: str) -> None:
        if self.replay_left_out:
            raise CheckpointError(f"cannot {doing}: this agent was loaded without its replay "
                                  "(MuZeroAgent.load(..., include_replay=False)); load the "
                                  "checkpoint with its replay")

    def state_dict(self, include_replay: bool = True) -> dict[str, Any]:
        """Everything a checkpoint holds; with ``include_replay`` also the replay and the games
        in progress (refused for an agent loaded without them, whose empty replay would
        stand in for the saved one)."""
        if include_replay:
            self._check_replay_loaded("save a replay")
        state: dict[str, Any] = {
            "agent_version": CHECKPOINT_VERSION,
            "config": self.config.to_dict(), "preset": self.config.preset,
            "env_id": self.config.env.id, "num_actions": self.num_actions,
            "input_shape": list(self.input_shape),
            "learner": self.learner.state_dict(),
            "selfplay_network": self.selfplay_network.state_dict(),
            "counters": {"env_steps": self.env_steps, "episodes": self.episodes,
                         "train_credit": self._train_credit,
                         "last_sync_step": self._last_sync_step,
                         "recent_returns": list(self._recent_returns),
                         "last_eval_return": self.last_eval_return},
            "rng": {"numpy": self.rng.bit_generator.state,
                    "learner_numpy": self.learner_rng.bit_generator.state,
                    "torch": torch.get_rng_state()},
        }
        if include_replay:
            # Every position played goes with the replay; the games in progress go too where
            # their envs can be restored (else a resumed run ends them as truncated games).
            for segment in self.selfplay_worker.flush():
                self.replay.add_segment(segment)
            state["replay"] = self.replay.state_dict()
            selfplay_state = self.selfplay_worker.state_dict()
            if selfplay_state is not None:
                state["selfplay"] = selfplay_state
        state["counters"]["games_started"] = self.selfplay_worker.num_games_started
        return state

    def save(self, path: str | Path, include_replay: bool = True) -> Path:
        """Writes a checkpoint atomically (a folder gets ``checkpoint.pt``). Weights with a NaN
        or infinite entry are never written (:class:`TrainingDivergedError`): the checkpoint
        already there stays."""
        for name, parameter in self.learner.network.named_parameters():
            if not torch.isfinite(parameter).all():
                kept = ("" if self.saved_env_steps is None else
                        f"; the checkpoint of {self.saved_env_steps:,} env steps is kept")
                raise TrainingDivergedError(
                    f"not saved: the network's weights hold NaN or infinite values ({name}) "
                    f"after {self.training_steps:,} learner steps{kept}")
        written = save_checkpoint(self.state_dict(include_replay), path)
        if self.run_dir is not None and written == self.run_dir / CHECKPOINT_NAME:
            self.saved_env_steps = self.env_steps
        return written

    @classmethod
    def load(cls, path: str | Path, run_dir: str | Path | None = None,
             expect_env_id: str | None = None, trust_env_module: bool = False,
             overrides: Iterable[str] = (), include_replay: bool = True) -> MuZeroAgent:
        """Rebuilds an agent from a checkpoint file or run folder; the env must still have the
        same spaces. ``expect_env_id`` turns a checkpoint of another env into an error.
        ``overrides`` may change how the run executes (``train.backend`` and the other
        :data:`~muzero_gym.config.EXECUTION_KEYS`), nothing it learns.

        ``include_replay=False`` loads what playing and evaluating need and leaves the replay
        and the games in progress on disk (never read, so a checkpoint of gigabytes loads in
        the memory of its network); such an agent refuses to ``learn`` or to save a replay.

        A checkpoint never imports code by itself: one whose env id names a module
        (``module:EnvId``, which Gymnasium imports to make the env) is refused unless the
        caller names the same id as ``expect_env_id`` or passes ``trust_env_module=True``."""
        state = load_checkpoint(path, leave_out=() if include_replay else ("replay", "selfplay"))
        if state.get("agent_version") != CHECKPOINT_VERSION:
            raise CheckpointError(f"{path} was not written by this version of MuZeroAgent")
        if expect_env_id is not None and state["env_id"] != expect_env_id:
            raise CheckpointError(f"checkpoint {path} is for env {state['env_id']!r}, not "
                                  f"{expect_env_id!r}")
        config = config_from_dict(state["config"], preset=state["preset"]).replace(
            check_execution_overrides(overrides))
        env_id = config.env.id
        if ":" in env_id and not trust_env_module and expect_env_id != env_id:
            module = env_id.split(":", 1)[0]
            raise CheckpointError(
                f"checkpoint {path} plays env {env_id!r}, whose module {module!r} would be "
                f"imported: name the env to confirm (--env {env_id}) or pass "
                "--trust-env-module")
        agent = cls(config, run_dir=run_dir)
        if agent.num_actions != state["num_actions"] or list(agent.input_shape) != list(
                state["input_shape"]):
            raise CheckpointError(
                f"checkpoint {path} expects {state['num_actions']} actions and inputs of shape "
                f"{tuple(state['input_shape'])}; env {config.env.id!r} now has "
                f"{agent.num_actions} actions and inputs of shape {agent.input_shape}")
        agent.load_state_dict(state)
        agent.replay_left_out = not include_replay
        if run_dir is not None and resolve_checkpoint_path(path) == Path(run_dir) / \
                CHECKPOINT_NAME:
            agent.saved_env_steps = agent.env_steps
        return agent

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state["learner"])
        self.selfplay_network.load_state_dict(state["selfplay_network"])
        counters = state["counters"]
        self.env_steps = int(counters["env_steps"])
        self.episodes = int(counters["episodes"])
        self._train_credit = float(counters["train_credit"])
        self._last_sync_step = int(counters["last_sync_step"])
        # checkpoints written before the progress line's window was saved lack it
        self._recent_returns.clear()
        self._recent_returns.extend(float(r) for r in counters.get("recent_returns", []))
        last_eval = counters.get("last_eval_return")  # the line's eval field; None: none yet
        self.last_eval_return = None if last_eval is None else float(last_eval)
        self.rng.bit_generator.state = state["rng"]["numpy"]
        if self.learner_rng is not self.rng and "learner_numpy" in state["rng"]:
            self.learner_rng.bit_generator.state = state["rng"]["learner_numpy"]
        torch.set_rng_state(state["rng"]["torch"])
        self.selfplay_worker.num_games_started = int(counters.get("games_started", 0))
        if "replay" in state:
            replay = {k: v.numpy() if isinstance(v, torch.Tensor) else v
                      for k, v in state["replay"].items()}
            env = self.config.env
            self.replay.load_state_dict(replay, encoder=self.encoder,
                                        num_stacked_observations=env.num_stacked_observations,
                                        stack_actions=env.stack_actions,
                                        num_players=env.num_players)
            self.selfplay_worker.saved_state = state.get("selfplay")
            if self.selfplay_worker.saved_state is None:  # nothing can continue them
                self.replay.close_running_games()


def _crossed(before: int, after: int, interval: int) -> bool:
    """Whether a multiple of ``interval`` lies in (before, after]."""
    return interval > 0 and after // interval > before // interval
