"""The pieces every training backend shares: a self-play worker and a learner worker.

Both are plain classes with narrow interfaces and know nothing of how they are driven: the
local driver (:mod:`muzero_gym.local_driver`) runs one of each in the agent's process, the Ray
driver (:mod:`muzero_gym.ray_driver`) runs self-play workers as Ray actors and the learner in
the driver's process.

- :class:`SelfPlayWorker`: its own vector env, search and network copy; ``play(moves)`` returns
  what the moves produced (segments for the replay, finished episodes, search statistics),
  ``set_weights`` takes new weights, ``flush`` sends what is unsent, ``state_dict`` saves the
  games in progress where the envs can be restored.
- :class:`LearnerWorker`: samples the replay, reanalyses and augments the batch, takes a
  learner step and writes the new priorities back; ``train(steps)`` returns the metrics. With
  a GPU learner it samples the next batch (into pinned memory) in a second thread while the
  GPU trains on the current one; the batch then sees the priorities of one step before, the
  same ones on every run.

:func:`inspect_env` and :func:`build_model` give what both need to know about the env and the
network a config describes, so that a worker in another process builds the same network.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from muzero_gym.config import Config, ConfigError, TrainConfig
from muzero_gym.environment import make_env, make_vector_env
from muzero_gym.game import Game, ObservationEncoder, stacked_shape
from muzero_gym.learner import Learner, pin_batch
from muzero_gym.mcts import BatchedMCTS, SearchSettings
from muzero_gym.networks import MuZeroNetwork, build_network
from muzero_gym.reanalyse import reanalyse
from muzero_gym.replay import Batch, ReplayBuffer
from muzero_gym.segment import Segment
from muzero_gym.selfplay import SelfPlay
from muzero_gym.simulator import (
    SimulatorError,
    SimulatorSearchAdapter,
    check_simulator_env,
    scratch_seed,
)
from muzero_gym.symmetry import Symmetry, augment_batch, game_symmetries


@dataclass
class EnvFacts:
    """What the networks, games and searches need to know about the env of a config."""

    observation_space: gym.Space
    num_actions: int
    encoder: ObservationEncoder
    input_shape: tuple[int, ...]
    symmetries: list[Symmetry]


def inspect_env(config: Config) -> EnvFacts:
    """Makes one env of ``config`` and checks the config against it (true-simulator search,
    symmetry augmentation)."""
    train, env_config = config.train, config.env
    if train.num_unroll_steps == 0 and not config.search.simulator:
        raise ConfigError("train.num_unroll_steps = 0 never trains the dynamics function that "
                          "a learned-model search steps: use it with search.simulator = true")
    probe = make_env(env_config)
    try:
        if config.search.simulator:
            check_simulator_env(probe)
            if env_config.num_stacked_observations != 1 or env_config.stack_actions:
                raise SimulatorError(
                    "search.simulator = true evaluates single observations: set "
                    "env.num_stacked_observations = 1 and env.stack_actions = false")
        symmetries = game_symmetries(probe) if train.augment_symmetries else []
        if train.augment_symmetries and not symmetries:
            raise ConfigError(
                f"train.augment_symmetries = true, but {type(probe.unwrapped).__name__} "
                "declares no symmetries(): set it to false or add the method (see "
                "muzero_gym.symmetry)")
        if symmetries and env_config.stack_actions:
            raise ConfigError("train.augment_symmetries does not rename the actions "
                              "encoded in action planes: set env.stack_actions = false")
        space, num_actions = probe.observation_space, int(probe.action_space.n)
    finally:
        probe.close()
    encoder = ObservationEncoder(space, env_config.observation_layout)
    shape = stacked_shape(encoder, env_config.num_stacked_observations, env_config.stack_actions,
                          num_actions)
    return EnvFacts(space, num_actions, encoder, shape, symmetries)


def build_model(config: Config, facts: EnvFacts) -> MuZeroNetwork:
    """The network ``config`` describes for the env of ``facts`` (random weights)."""
    return build_network(config.model, facts.input_shape, facts.num_actions,
                         image_input=facts.encoder.is_image)


def new_game(config: Config, facts: EnvFacts) -> Game:
    env = config.env
    return Game(facts.num_actions, facts.encoder, env.num_stacked_observations,
                env.stack_actions, env.num_players)


@dataclass
class PlayResult:
    """What some moves of self-play produced."""

    segments: list[Segment] = field(default_factory=list)
    finished: list[Game] = field(default_factory=list)  # whole games (segment_length = 0)
    abandoned: list[int] = field(default_factory=list)  # source ids the replay should end
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    num_transitions: int = 0
    num_dropped: int = 0
    search: dict[str, list[float]] = field(default_factory=dict)  # search statistics by tag
    seconds: float = 0.0
    worker_id: int = 0
    restarted: bool = False  # the first result of a Ray actor's process started after a death


class SelfPlayWorker:
    """Self-play on its own vector env (see module doc). ``network`` is the worker's copy of
    the weights (eval mode, on the inference device); ``worker_id`` keeps the ids of its games
    apart from other workers'; ``restart_key`` (a restarted process's own number) keeps the
    chance draws of its search's scratch env apart from those of the process it replaces."""

    def __init__(self, config: Config, facts: EnvFacts, network: MuZeroNetwork,
                 rng: np.random.Generator, worker_id: int = 0, restart_key: int | None = None):
        self.config = config
        self.restart_key = () if restart_key is None else (restart_key,)
        self.facts = facts
        self.network = network
        self.rng = rng
        self.worker_id = worker_id
        self.search = BatchedMCTS(SearchSettings.from_config(config), facts.num_actions)
        self.selfplay: SelfPlay | None = None
        self.num_games_started = 0
        self.saved_state: dict[str, Any] | None = None  # games to continue on start

    def start(self) -> tuple[SelfPlay, list[int]]:
        """The self-play envs, made on first use and kept between calls, so that games in
        progress carry on; also the source ids of saved games it could not continue."""
        lost: list[int] = []
        if self.selfplay is None:
            config = self.config
            envs = make_vector_env(config.env)
            simulator = None
            if config.search.simulator:
                # A resumed run (games already started) or a restarted process seeds its
                # scratch env afresh, so that its chance draws do not repeat the run's start.
                resumed = (self.num_games_started,) if self.num_games_started else ()
                resumed += self.restart_key
                simulator = SimulatorSearchAdapter(
                    self.network, self.facts.encoder, make_env(config.env),
                    self.facts.num_actions,
                    seed=scratch_seed(config.train.seed, 0, self.worker_id, *resumed))
            selfplay = SelfPlay(envs, self.network, self.search,
                                lambda: new_game(config, self.facts), config.search, self.rng,
                                simulator=simulator,
                                split_on_life_loss=config.env.life_loss_terminal,
                                env_id=config.env.id, non_finite=config.env.non_finite,
                                segment_length=config.replay.segment_length,
                                worker_id=self.worker_id)
            selfplay.num_games_started = self.num_games_started
            selfplay.reset(seed=int(self.rng.integers(2**31)))
            if self.saved_state is not None:
                lost = selfplay.load_state_dict(self.saved_state)
                self.saved_state = None
            self.selfplay = selfplay
        return self.selfplay, lost

    def play(self, num_moves: int, training_step: int) -> PlayResult:
        """``num_moves`` moves in every env."""
        selfplay, lost = self.start()
        result = PlayResult(abandoned=lost, worker_id=self.worker_id)
        start = time.perf_counter()
        for _ in range(num_moves):
            stats = selfplay.step(training_step)
            result.segments += stats.segments
            result.finished += stats.finished
            result.abandoned += stats.abandoned
            result.episode_returns += stats.episode_returns
            result.episode_lengths += stats.episode_lengths
            result.num_transitions += stats.num_transitions
            result.num_dropped += stats.num_dropped
            for tag, value in (("search/root_value", stats.root_value),
                               ("search/visit_entropy", stats.visit_entropy),
                               ("search/prior_entropy", stats.prior_entropy),
                               ("search/max_depth", stats.max_depth)):
                result.search.setdefault(tag, []).append(value)
        self.num_games_started = selfplay.num_games_started
        result.seconds = time.perf_counter() - start
        return result

    def refresh(self) -> None:
        """Call after the network's weights changed in place."""
        if self.selfplay is not None:
            self.selfplay.refresh()

    def set_weights(self, state_dict: dict[str, Any]) -> None:
        self.network.load_state_dict(state_dict)
        self.refresh()

    def flush(self) -> list[Segment]:
        """Everything played and not yet sent (see :meth:`SelfPlay.flush`)."""
        if self.selfplay is None:
            return []
        segments = self.selfplay.flush()
        self.num_games_started = self.selfplay.num_games_started
        return segments

    def state_dict(self) -> dict[str, Any] | None:
        """The games in progress (after :meth:`flush`), or None where they cannot be saved."""
        if self.selfplay is None:
            return self.saved_state
        return self.selfplay.state_dict()

    def running_games(self) -> list[int]:
        return [] if self.selfplay is None else [int(s) for s in self.selfplay.source_ids]

    def close(self) -> tuple[list[Segment], list[int]]:
        """Closes the envs; returns what was unsent and the ids of the games that end here
        (for the replay to end them)."""
        if self.selfplay is None:
            return [], []
        selfplay, self.selfplay = self.selfplay, None
        try:
            segments = selfplay.flush()
        except (RuntimeError, ValueError):
            segments = []  # a game left inconsistent by an error: its unsent positions are lost
        finally:
            self.num_games_started = selfplay.num_games_started
            selfplay.envs.close()
        return segments, [int(s) for s in selfplay.source_ids]


def unroll_depth(train: TrainConfig, training_step: int) -> int:
    """K of learner step ``training_step``: ``train.early_num_unroll_steps`` for the first
    ``train.early_unroll_learner_steps`` steps (none unless both are set: the config checks),
    ``train.num_unroll_steps`` after."""
    if training_step < train.early_unroll_learner_steps:
        return train.early_num_unroll_steps
    return train.num_unroll_steps


def replay_unroll_depth(train: TrainConfig) -> int:
    """The deepest K any learner step of ``train`` samples: the replay keeps targets for it."""
    return max(train.num_unroll_steps, train.early_num_unroll_steps)


class LearnerWorker:
    """Learner steps on batches of the replay (see module doc)."""

    def __init__(self, config: Config, learner: Learner, replay: ReplayBuffer,
                 rng: np.random.Generator, symmetries: list[Symmetry],
                 num_actions: int, prefetch: bool | None = None):
        self.config = config
        self.learner = learner
        self.replay = replay
        self.rng = rng
        self.symmetries = symmetries
        self.prefetch = learner.device.type == "cuda" if prefetch is None else prefetch
        self._sampler = ThreadPoolExecutor(1, thread_name_prefix="sampler") \
            if self.prefetch else None
        # The sampler thread draws from ``rng``; reanalyse, beside it, from its own generator.
        self._reanalyse_rng = (np.random.default_rng(int(rng.integers(2**63)))
                               if self.prefetch else rng)
        train = config.train
        settings = SearchSettings.from_config(config)
        self.reanalyse_search = BatchedMCTS(
            dataclasses.replace(settings, num_simulations=train.reanalyse_simulations
                                or settings.num_simulations), num_actions)

    def train(self, num_steps: int) -> dict[str, list[float]]:
        """``num_steps`` learner steps; returns their metrics by TensorBoard tag."""
        metrics: dict[str, list[float]] = collections.defaultdict(list)
        first = self.learner.training_step
        if self._sampler is None:
            for k in range(num_steps):
                self._train_once(self._sample(first + k), metrics)
            return metrics
        batch = self._sample(first, pinned=True)
        for k in range(num_steps):
            following = self._sampler.submit(self._sample, first + k + 1, True) \
                if k + 1 < num_steps else None
            priorities = self._train_once(batch, metrics, update=False)
            if following is not None:
                batch_next = following.result()  # sampled before these priorities land
            self.replay.update_priorities(batch.slots, batch.game_ids, priorities)
            if following is not None:
                batch = batch_next
        return metrics

    def _sample(self, training_step: int, pinned: bool = False) -> Batch:
        """The batch of learner step ``training_step`` (its unroll depth, see
        :func:`unroll_depth`), augmented (and with ``pinned``, its arrays in pinned host
        memory)."""
        train = self.config.train
        need_bootstrap = train.bootstrap_source == "target_network" or train.reanalyse_fraction > 0
        need_unrolled = train.consistency_loss_weight > 0 or (
            train.reanalyse_policy and train.reanalyse_fraction > 0)
        batch = self.replay.sample(train.batch_size, self.rng,
                                   num_unroll_steps=unroll_depth(train, training_step),
                                   with_bootstrap_inputs=need_bootstrap,
                                   with_unrolled_inputs=need_unrolled)
        if self.symmetries:
            augment_batch(batch, self.symmetries, self.rng)
        return pin_batch(batch) if pinned and self.learner.device.type == "cuda" else batch

    def _train_once(self, batch: Batch, metrics: dict[str, list[float]],
                    update: bool = True) -> np.ndarray:
        train = self.config.train
        if train.reanalyse_fraction > 0:  # here: it reads the target network the step updates
            reanalyse(batch, self.learner.target_network, self.reanalyse_search,
                      train.reanalyse_fraction, self._reanalyse_rng, train.reanalyse_policy,
                      refresh_values=train.bootstrap_source == "search")
        step = self.learner.train_step(batch)
        priorities = step.pop("priorities")
        metrics["replay/sample_age"].append(float(np.mean(batch.ages)))
        if train.td_steps_age:
            metrics["replay/td_horizon"].append(float(np.mean(batch.td_horizons)))
        metrics["replay/effective_batch_size"].append(batch.effective_size)
        metrics["diagnostics/value_error"].append(float(np.mean(priorities)))
        if update:
            self.replay.update_priorities(batch.slots, batch.game_ids, priorities)
        for key in ("total", "value", "reward", "policy", "consistency"):
            metrics[f"losses/{key}"].append(step[key])
        metrics["train/lr"].append(step["lr"])
        metrics["train/grad_norm"].append(step["grad_norm"])
        return priorities

    def weights(self) -> dict[str, torch.Tensor]:
        """The trained weights, on the CPU (to send to self-play workers)."""
        return _on_cpu(self.learner.network)

    def playing_weights(self) -> dict[str, torch.Tensor]:
        """The weights evaluation and play use, on the CPU (to send to an evaluator): the
        moving average of the trained weights with ``train.averaged_weights_tau`` > 0, else
        the trained weights."""
        return _on_cpu(self.learner.playing_network)


def _on_cpu(network: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A copy of ``network``'s state on the CPU."""
    return {k: v.detach().to("cpu", copy=True) for k, v in network.state_dict().items()}
