"""Self-play over a Gymnasium vector env: one batched search per step for all envs.

:class:`SelfPlay` keeps one :class:`~muzero_gym.game.Game` per env. Each :meth:`SelfPlay.step`
builds the model inputs of all envs, runs one batched search, picks actions (visit counts at the
scheduled temperature, or Gumbel's choice), steps the vector env and records the transitions.

Autoreset (Gymnasium 1.x ``NEXT_STEP`` mode): the step after an episode ends ignores its action
and returns the reset observation. That step is not a transition: the env's row in the search
batch holds the final observation instead, its search value becomes the bootstrap value of a
truncated game (:meth:`Game.set_final_value`), the finished game is handed out, and the reset
observation starts the next game.

Lost lives (``split_on_life_loss``, Atari's ``env.life_loss_terminal``): when ``info["lives"]``
drops and the game goes on, the current game ends as terminated (so its value targets stop
there) and a new one starts from the same observation; the env is not reset. Episode returns
and lengths in :class:`StepStats` always cover whole env episodes.

Evaluation uses the same class with ``add_noise=False`` and ``greedy=True``. With a
:class:`~muzero_gym.simulator.SimulatorSearchAdapter` the search steps copies of the envs' real
states (fetched with ``envs.call("get_state")``) instead of the learned dynamics.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from muzero_gym.config import SearchConfig
from muzero_gym.game import Game
from muzero_gym.inference import ModelSearchAdapter
from muzero_gym.mcts import BatchedMCTS, select_actions
from muzero_gym.networks import MuZeroNetwork
from muzero_gym.simulator import SimulatorSearchAdapter

INFO_KEYS = ("action_mask", "to_play", "lives")


@dataclass
class StepStats:
    """What one vector step produced."""

    finished: list[Game] = field(default_factory=list)  # games that ended (final value set)
    episode_returns: list[float] = field(default_factory=list)  # env episodes that ended
    episode_lengths: list[int] = field(default_factory=list)
    num_transitions: int = 0  # transitions recorded this step
    root_value: float = 0.0  # mean root value of the searched rows
    visit_entropy: float = 0.0  # mean entropy of the root visit distributions
    max_depth: float = 0.0  # mean deepest expansion
    num_dropped: int = 0  # games dropped for non-finite env data (non_finite = "drop_game")


def _row(batch: Any, i: int) -> Any:
    """Observation of env ``i`` from a vector env's batched observation."""
    if isinstance(batch, dict):
        return {k: _row(v, i) for k, v in batch.items()}
    if isinstance(batch, tuple):
        return tuple(_row(v, i) for v in batch)
    return batch[i]


def _info_row(infos: dict, i: int) -> dict:
    """The keys muzero_gym reads (``action_mask``, ``to_play``) of env ``i``'s info."""
    out = {}
    for key in INFO_KEYS:
        if key in infos:
            present = infos.get("_" + key)
            if present is None or present[i]:
                out[key] = infos[key][i]
    return out


class NonFiniteEnvData(ValueError):
    """An env returned a NaN or infinite reward or observation."""


def _non_finite_rows(batch: Any, num_envs: int) -> np.ndarray:
    """[N] bool: rows of a vector env's batched observation with a NaN or infinite entry."""
    if isinstance(batch, dict):
        parts = list(batch.values())
    elif isinstance(batch, tuple):
        parts = list(batch)
    else:
        array = np.asarray(batch)
        if not np.issubdtype(array.dtype, np.floating):
            return np.zeros(num_envs, dtype=np.bool_)
        return ~np.isfinite(array.reshape(num_envs, -1)).all(axis=1)
    bad = np.zeros(num_envs, dtype=np.bool_)
    for part in parts:
        bad |= _non_finite_rows(part, num_envs)
    return bad


def check_autoreset_mode(envs: gym.vector.VectorEnv) -> None:
    """Self-play relies on NEXT_STEP autoreset; other modes would mix episodes silently."""
    mode = envs.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
    if str(getattr(mode, "value", mode)) not in ("NextStep", "next_step"):
        raise ValueError(f"self-play needs a vector env in NEXT_STEP autoreset mode, got {mode}")


class SelfPlay:
    """Plays a vector of envs with batched search (see module doc)."""

    def __init__(self, envs: gym.vector.VectorEnv, network: MuZeroNetwork, search: BatchedMCTS,
                 new_game: Callable[[], Game], search_config: SearchConfig,
                 rng: np.random.Generator, add_noise: bool = True, greedy: bool = False,
                 simulator: SimulatorSearchAdapter | None = None,
                 split_on_life_loss: bool = False, env_id: str = "env",
                 non_finite: str = "error"):
        check_autoreset_mode(envs)
        self.envs = envs
        self.network = network
        self.search = search
        self.new_game = new_game
        self.search_config = search_config
        self.rng = rng
        self.add_noise = add_noise
        self.greedy = greedy
        self.num_envs = envs.num_envs
        self.simulator = simulator
        self.adapter = ModelSearchAdapter(network, search.settings.num_simulations)
        self.split_on_life_loss = split_on_life_loss
        self.env_id = env_id
        if non_finite not in ("error", "drop_game"):
            raise ValueError(f"non_finite = {non_finite!r}: use 'error' or 'drop_game'")
        self.non_finite = non_finite
        self.games: list[Game] = []
        self.pending_reset = np.zeros(self.num_envs, dtype=np.bool_)
        self.lives = np.full(self.num_envs, -1, dtype=np.int64)
        # Seconds spent in the env, in the model (initial + recurrent calls) and in the tree.
        self.timings = {"env": 0.0, "model": 0.0, "search": 0.0}
        self.episode_return = np.zeros(self.num_envs)
        self.episode_length = np.zeros(self.num_envs, dtype=np.int64)

    def _note_lives(self, infos: dict) -> np.ndarray:
        """Lives per env from ``info["lives"]`` (-1 where the env does not report them)."""
        lives = infos.get("lives")
        return np.full(self.num_envs, -1) if lives is None else np.asarray(lives).reshape(-1)

    def reset(self, seed: int | None = None) -> None:
        """Resets every env and starts a new game in each."""
        observations, infos = self.envs.reset(seed=seed)
        self.games = []
        for i in range(self.num_envs):
            game = self.new_game()
            game.start(_row(observations, i), _info_row(infos, i))
            self.games.append(game)
        self.pending_reset[:] = False
        self.lives[:] = self._note_lives(infos)
        self.episode_return[:] = 0.0
        self.episode_length[:] = 0

    def refresh(self) -> None:
        """Call after the network's weights change."""
        self.adapter.refresh()
        if self.simulator is not None:
            self.simulator.refresh()

    @torch.inference_mode()
    def step(self, training_step: int = 0) -> StepStats:
        """One batched search and one vector env step."""
        if not self.games:
            raise RuntimeError("call reset() before step()")
        self.network.eval()
        games = self.games
        images = np.stack([g.make_image() for g in games])
        legal = np.stack([g.legal_action_mask() for g in games])
        legal[self.pending_reset] = True  # a final state may have no legal action left
        to_play = np.array([g.to_play() for g in games], dtype=np.int32)
        start = time.perf_counter()
        if self.simulator is not None:
            states = self.envs.call("get_state")
            root_value, root_logits = self.simulator.initial(images, states, self.pending_reset)
            model_fn = self.simulator.recurrent_fn
        else:
            root_value, root_logits = self.adapter.initial(images)
            model_fn = self.adapter.recurrent_fn
        model_time = time.perf_counter() - start

        def recurrent_fn(parent, action, node):
            nonlocal model_time
            t = time.perf_counter()
            out = model_fn(parent, action, node)
            model_time += time.perf_counter() - t
            return out

        result = self.search.run(root_value, root_logits, recurrent_fn, legal, to_play,
                                 self.rng, self.add_noise)
        searched = time.perf_counter()
        self.timings["model"] += model_time
        self.timings["search"] += searched - start - model_time
        actions = self._choose_actions(result, training_step)

        stats = StepStats()
        active = ~self.pending_reset
        actions[self.pending_reset] = 0  # ignored by the env: this step resets it

        # The games are written only once the env has stepped: an exception in the env leaves
        # every game as it was.
        env_start = time.perf_counter()
        observations, rewards, terminated, truncated, infos = self.envs.step(actions)
        self.timings["env"] += time.perf_counter() - env_start
        poisoned = self._check_finite(rewards, observations, active)
        lives = self._note_lives(infos)
        for i in np.flatnonzero(self.pending_reset):
            game = games[i]
            if game.truncated:
                game.set_final_value(result.root_value[i])
            stats.finished.append(game)
            games[i] = self.new_game()
            games[i].start(_row(observations, i), _info_row(infos, i))
        self.pending_reset[:] = False
        for i in np.flatnonzero(active & ~poisoned):
            episode_over = bool(terminated[i]) or bool(truncated[i])
            life_lost = (self.split_on_life_loss and not episode_over
                         and 0 <= lives[i] < self.lives[i])
            observation, info = _row(observations, i), _info_row(infos, i)
            mover = games[i].to_play()
            games[i].store_search_statistics(result.root_value[i], result.search_policy[i])
            games[i].record_step(int(actions[i]), float(rewards[i]), observation,
                                 bool(terminated[i]) or life_lost, bool(truncated[i]), info)
            stats.num_transitions += 1
            # Two players: the episode's return is the first player's result.
            sign = -1.0 if games[i].num_players == 2 and mover != 0 else 1.0
            self.episode_return[i] += sign * float(rewards[i])
            self.episode_length[i] += 1
            if episode_over:
                self.pending_reset[i] = True
                stats.episode_returns.append(float(self.episode_return[i]))
                stats.episode_lengths.append(int(self.episode_length[i]))
                self.episode_return[i], self.episode_length[i] = 0.0, 0
            elif life_lost:  # the env goes on: a new training game starts right here
                stats.finished.append(games[i])
                games[i] = self.new_game()
                games[i].start(observation, info)
        self.lives[:] = lives
        if poisoned.any():
            self._restart(np.flatnonzero(poisoned))
            stats.num_dropped += int(poisoned.sum())

        if active.any():
            policy = result.visit_counts[active] / result.visit_counts[active].sum(
                axis=1, keepdims=True)
            entropy = -(policy * np.log(np.where(policy > 0, policy, 1.0))).sum(axis=1)
            stats.root_value = float(result.root_value[active].mean())
            stats.visit_entropy = float(entropy.mean())
            stats.max_depth = float(result.max_depth[active].mean())
        return stats

    def _check_finite(self, rewards: np.ndarray, observations: Any,
                      active: np.ndarray) -> np.ndarray:
        """[N] bool: envs that returned a NaN or infinite reward or observation this step.
        An error naming the env, the step and the value, unless ``non_finite = "drop_game"``
        (then the caller drops those games)."""
        rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
        bad_reward = ~np.isfinite(rewards)
        bad_observation = _non_finite_rows(observations, self.num_envs)
        poisoned = (bad_reward | bad_observation) & active
        if poisoned.any() and self.non_finite == "error":
            i = int(np.flatnonzero(poisoned)[0])
            what = (f"reward {rewards[i]}" if bad_reward[i]
                    else "observation with NaN or infinite entries")
            raise NonFiniteEnvData(
                f"env {self.env_id!r} (copy {i} of {self.num_envs}) returned {what} at step "
                f"{len(self.games[i]) + 1} of an episode: fix the env, or set "
                "env.non_finite = 'drop_game' to drop such games")
        return poisoned

    def _restart(self, rows: np.ndarray) -> None:
        """Drops the games of ``rows`` and resets their envs."""
        mask = np.zeros(self.num_envs, dtype=np.bool_)
        mask[rows] = True
        observations, infos = self.envs.reset(options={"reset_mask": mask})
        lives = self._note_lives(infos)
        for i in rows.tolist():
            self.games[i] = self.new_game()
            self.games[i].start(_row(observations, i), _info_row(infos, i))
            self.lives[i] = lives[i]
            self.episode_return[i], self.episode_length[i] = 0.0, 0

    def _choose_actions(self, result, training_step: int) -> np.ndarray:
        if self.greedy:
            return result.greedy_actions()
        if result.gumbel_action is not None and self.add_noise:
            return result.gumbel_action.astype(np.int64)
        actions = np.empty(self.num_envs, dtype=np.int64)
        temperatures = np.array([self.search_config.temperature(training_step, len(g))
                                 for g in self.games])
        for temperature in np.unique(temperatures):
            rows = temperatures == temperature
            actions[rows] = select_actions(result.weights()[rows], float(temperature),
                                           self.rng)
        return actions
