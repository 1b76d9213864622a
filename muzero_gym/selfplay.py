"""Self-play over a Gymnasium vector env: one batched search per step for all envs.

:class:`SelfPlay` keeps one :class:`~muzero_gym.game.Game` per env. Each :meth:`SelfPlay.step`
builds the model inputs of all envs, runs one batched search, picks actions (visit counts at the
scheduled temperature, or Gumbel's choice drawn at that temperature), steps the vector env and
records the transitions.

Autoreset (Gymnasium 1.x ``NEXT_STEP`` mode): the step after an episode ends ignores its action
and returns the reset observation. That step is not a transition: the env's row in the search
batch holds the final observation instead, its search value becomes the bootstrap value of a
truncated game (:meth:`Game.set_final_value`), the finished game is handed out, and the reset
observation starts the next game.

Lost lives (``split_on_life_loss``, Atari's ``env.life_loss_terminal``): when ``info["lives"]``
drops and the game goes on, the current game ends as terminated (so its value targets stop
there) and a new one starts from the same observation; the env is not reset. Episode returns
and lengths in :class:`StepStats` always cover whole env episodes.

Segments (``segment_length`` > 0, training): each game goes to the replay in pieces while it
runs (:mod:`muzero_gym.segment`): once ``segment_length`` positions are unsent they leave as one
segment, the game's end leaves as its final segment, and the game keeps only the states its
frame stacks still need. Each game has a ``source_id`` unique to this worker (``worker_id``
times 2**40 plus a count), which the replay uses to join the segments. :meth:`SelfPlay.flush`
sends everything unsent (a checkpoint holds every position played), and
:meth:`SelfPlay.state_dict` saves the games in progress with their envs' states where the envs
can be restored, so a resumed run continues them. With ``segment_length = 0`` (evaluation)
finished games are handed out whole in :attr:`StepStats.finished`.

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

from muzero_gym.checkpoint import UnstorableState, plain_state, restore_state
from muzero_gym.config import SearchConfig
from muzero_gym.game import Game
from muzero_gym.inference import ModelSearchAdapter
from muzero_gym.mcts import BatchedMCTS, select_actions
from muzero_gym.networks import MuZeroNetwork
from muzero_gym.segment import Segment, cut_segment
from muzero_gym.simulator import SimulatorSearchAdapter
from muzero_gym.stops import deferred_stops

SOURCE_ID_STRIDE = 2**40  # source ids: worker_id * stride + the worker's game count

INFO_KEYS = ("action_mask", "to_play", "lives")


@dataclass
class StepStats:
    """What one vector step produced."""

    finished: list[Game] = field(default_factory=list)  # games that ended (whole-game mode)
    segments: list[Segment] = field(default_factory=list)  # (segment mode)
    episode_returns: list[float] = field(default_factory=list)  # env episodes that ended
    episode_lengths: list[int] = field(default_factory=list)
    num_transitions: int = 0  # transitions recorded this step
    root_value: float = 0.0  # mean root value of the searched rows
    visit_entropy: float = 0.0  # mean entropy of the root visit distributions
    max_depth: float = 0.0  # mean deepest expansion
    prior_entropy: float = 0.0  # mean entropy of the network's policy at the roots
    num_dropped: int = 0  # games dropped for non-finite env data (non_finite = "drop_game")
    abandoned: list[int] = field(default_factory=list)  # source ids of games sent in part and
    # dropped since: the replay should end them


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


def _set_elapsed_steps(env: gym.Env, steps: int) -> None:
    """Restores the step count of the env's time limit (``TimeLimit`` wrappers)."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.TimeLimit):
            env._elapsed_steps = steps
        env = env.env


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
                 non_finite: str = "error", segment_length: int = 0, worker_id: int = 0):
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
        if segment_length < 0:
            raise ValueError(f"segment_length = {segment_length}: must be >= 0")
        self.segment_length = segment_length
        self.worker_id = worker_id
        self.num_games_started = 0
        self.source_ids = np.zeros(self.num_envs, dtype=np.int64)
        self.sent = np.zeros(self.num_envs, dtype=np.int64)  # positions sent of each game
        self.final_sent = np.zeros(self.num_envs, dtype=np.bool_)  # (pending rows, flushed)
        self.abandoned: list[int] = []

    def _start_game(self, i: int, observation: Any, info: dict) -> None:
        game = self.new_game()
        game.start(observation, info)
        if i < len(self.games):
            self.games[i] = game
        else:
            self.games.append(game)
        self.source_ids[i] = self.worker_id * SOURCE_ID_STRIDE + self.num_games_started
        self.num_games_started += 1
        self.sent[i] = 0
        self.final_sent[i] = False

    def _send(self, i: int, out: list[Segment], final: bool = False) -> None:
        """Game ``i``'s unsent positions (and with ``final`` its end) as one segment."""
        game = self.games[i]
        if len(game) == self.sent[i] and not final:
            return
        context = game.num_stacked_observations
        out.append(cut_segment(game, int(self.source_ids[i]), int(self.sent[i]), context,
                               final))
        self.sent[i] = len(game)
        if not final:
            game.trim(max(game.base, len(game) - context))

    def _note_lives(self, infos: dict) -> np.ndarray:
        """Lives per env from ``info["lives"]`` (-1 where the env does not report them)."""
        lives = infos.get("lives")
        return np.full(self.num_envs, -1) if lives is None else np.asarray(lives).reshape(-1)

    def reset(self, seed: int | None = None) -> None:
        """Resets every env and starts a new game in each."""
        observations, infos = self.envs.reset(seed=seed)
        self.games = []
        for i in range(self.num_envs):
            self._start_game(i, _row(observations, i), _info_row(infos, i))
        self.pending_reset[:] = False
        self.lives[:] = self._note_lives(infos)
        self.episode_return[:] = 0.0
        self.episode_length[:] = 0

    def refresh(self) -> None:
        """Call after the network's weights change."""
        self.adapter.refresh()
        if self.simulator is not None:
            self.simulator.refresh()

    @deferred_stops()
    @torch.inference_mode()
    def step(self, training_step: int = 0) -> StepStats:
        """One batched search and one vector env step (a stop signal waits for its end)."""
        if not self.games:
            raise RuntimeError("call reset() before step()")
        self.network.eval()
        games = self.games
        images = np.stack([g.make_image() for g in games])
        legal = np.stack([g.legal_action_mask() for g in games])
        legal[self.pending_reset] = True  # a final state may have no legal action left
        to_play = np.array([g.to_play() for g in games], dtype=np.int32)
        # The scheduled temperature of each game: Gumbel's draw (in the search) or the visit
        # softmax (below) is taken at it.
        temperatures = None if self.greedy else np.array(
            [self.search_config.temperature(training_step, len(g)) for g in games])
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
                                 self.rng, self.add_noise, temperatures)
        searched = time.perf_counter()
        self.timings["model"] += model_time
        self.timings["search"] += searched - start - model_time
        actions = self._choose_actions(result, temperatures)

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
            if game.truncated and not self.final_sent[i]:
                game.set_final_value(result.root_value[i])
            self._finish(i, stats)
            self._start_game(i, _row(observations, i), _info_row(infos, i))
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
                self._finish(i, stats)
                self._start_game(i, observation, info)
            elif self.segment_length and len(games[i]) - self.sent[i] >= self.segment_length:
                self._send(i, stats.segments)
        self.lives[:] = lives
        if poisoned.any():
            self._restart(np.flatnonzero(poisoned))
            stats.num_dropped += int(poisoned.sum())
            stats.abandoned, self.abandoned = self.abandoned, []

        if active.any():
            policy = result.visit_counts[active] / result.visit_counts[active].sum(
                axis=1, keepdims=True)
            entropy = -(policy * np.log(np.where(policy > 0, policy, 1.0))).sum(axis=1)
            stats.root_value = float(result.root_value[active].mean())
            stats.visit_entropy = float(entropy.mean())
            stats.max_depth = float(result.max_depth[active].mean())
            logits = np.where(legal[active], root_logits[active], -np.inf)
            logits = logits - logits.max(axis=1, keepdims=True)
            prior = np.exp(logits)
            prior /= prior.sum(axis=1, keepdims=True)
            stats.prior_entropy = float(-(prior * np.log(np.where(prior > 0, prior, 1.0))).sum(
                axis=1).mean())
        return stats

    def _finish(self, i: int, stats: StepStats) -> None:
        """Hands out the finished game of env ``i``: its final segment, or the whole game."""
        if not self.segment_length:
            stats.finished.append(self.games[i])
        elif not self.final_sent[i]:
            self._send(i, stats.segments, final=True)

    def flush(self) -> list[Segment]:
        """Every position played and not yet sent, as segments (a checkpoint is about to be
        written). A game that ended and waits for its env's reset is sent whole, its final
        value (after a truncation) from the network instead of the search the next step would
        run."""
        if not self.segment_length or not self.games:
            return []
        out: list[Segment] = []
        waiting = np.flatnonzero(self.pending_reset & ~self.final_sent)
        truncated = [i for i in waiting.tolist() if self.games[i].truncated]
        if truncated:
            for i, value in zip(truncated, self._values(truncated)):
                self.games[i].set_final_value(float(value))
        waiting_rows = set(waiting.tolist())
        for i in range(self.num_envs):
            if i in waiting_rows:
                self._send(i, out, final=True)
                self.final_sent[i] = True
            elif not self.pending_reset[i]:
                self._send(i, out)
        return out

    def restorable(self) -> bool:
        """Whether the envs' states can be saved and restored: a sync vector env whose envs
        offer ``get_state`` / ``set_state`` (the board games, 2048)."""
        return isinstance(self.envs, gym.vector.SyncVectorEnv) and all(
            callable(getattr(env.unwrapped, name, None))
            for env in self.envs.envs for name in ("get_state", "set_state"))

    def state_dict(self) -> dict[str, Any] | None:
        """The games in progress, after :meth:`flush`, with their envs' states as plain data;
        None where the envs cannot be restored (:meth:`restorable`)."""
        if not self.segment_length or not self.games or not self.restorable():
            return None
        try:
            env_states = [plain_state(state) for state in self.envs.call("get_state")]
        except UnstorableState:  # e.g. a chess library's board object: not plain data
            return None
        rows: list[dict[str, Any] | None] = []
        for i, game in enumerate(self.games):
            if self.pending_reset[i] or self.sent[i] != len(game):
                rows.append(None)  # ended (and sent whole): the env starts a new game
                continue
            rows.append({
                "source_id": int(self.source_ids[i]), "env_state": env_states[i],
                "episode_return": float(self.episode_return[i]),
                "episode_length": int(self.episode_length[i]), "lives": int(self.lives[i]),
                "game": {"base": game.base, "observations": np.stack(game.observations),
                         "legal_masks": np.stack(game.legal_masks),
                         "to_play": np.asarray(game.to_play_history, dtype=np.int64),
                         "actions": np.asarray(game.actions, dtype=np.int64),
                         "rewards": np.asarray(game.rewards, dtype=np.float64),
                         "root_values": np.asarray(game.root_values, dtype=np.float64),
                         "child_visits": np.stack(game.child_visits) if game.child_visits
                         else np.zeros((0, game.num_actions), dtype=np.float32)}})
        return {"num_games_started": self.num_games_started, "envs": rows}

    def load_state_dict(self, state: dict[str, Any]) -> list[int]:
        """Continues the games of :meth:`state_dict` (call after :meth:`reset`): each env gets
        its saved state back and its game goes on where it stopped. Returns the source ids of
        saved games that could not be continued (the envs cannot be restored, or there are
        fewer of them now)."""
        self.num_games_started = max(self.num_games_started, int(state["num_games_started"]))
        rows = state["envs"]
        lost = [int(row["source_id"]) for row in rows[self.num_envs:] if row is not None]
        if not self.restorable():
            return lost + [int(row["source_id"]) for row in rows[:self.num_envs]
                           if row is not None]
        for i, row in enumerate(rows[:self.num_envs]):
            if row is None:
                continue
            env = self.envs.envs[i]
            env.unwrapped.set_state(restore_state(row["env_state"], env.unwrapped.get_state()))
            _set_elapsed_steps(env, int(row["episode_length"]))
            saved = row["game"]
            game = self.new_game()
            game.base = int(saved["base"])
            game.observations = list(np.asarray(saved["observations"], dtype=game.encoder.dtype))
            game.legal_masks = list(np.asarray(saved["legal_masks"], dtype=np.bool_))
            game.to_play_history = np.asarray(saved["to_play"]).tolist()
            game.actions = np.asarray(saved["actions"]).tolist()
            game.rewards = np.asarray(saved["rewards"]).tolist()
            game.root_values = np.asarray(saved["root_values"]).tolist()
            game.child_visits = list(np.asarray(saved["child_visits"], dtype=np.float32))
            self.games[i] = game
            self.source_ids[i] = int(row["source_id"])
            self.sent[i] = len(game)
            self.final_sent[i] = False
            self.pending_reset[i] = False
            self.episode_return[i] = float(row["episode_return"])
            self.episode_length[i] = int(row["episode_length"])
            self.lives[i] = int(row["lives"])
        return lost

    @torch.inference_mode()
    def _values(self, rows: list[int]) -> np.ndarray:
        """The network's value of the current state of games ``rows``."""
        images = np.stack([self.games[i].make_image() for i in rows])
        if self.simulator is not None:
            states = self.envs.call("get_state")
            value, _ = self.simulator.initial(images, [states[i] for i in rows])
        else:
            value, _ = self.adapter.initial(images)
        return np.asarray(value, dtype=np.float64)

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
            if self.sent[i]:
                self.abandoned.append(int(self.source_ids[i]))
            self._start_game(i, _row(observations, i), _info_row(infos, i))
            self.lives[i] = lives[i]
            self.episode_return[i], self.episode_length[i] = 0.0, 0

    def _choose_actions(self, result, temperatures: np.ndarray | None) -> np.ndarray:
        if self.greedy:
            return result.greedy_actions()
        if result.gumbel_action is not None and self.add_noise:
            return result.gumbel_action.astype(np.int64)  # drawn at the temperature
        actions = np.empty(self.num_envs, dtype=np.int64)
        for temperature in np.unique(temperatures):
            rows = temperatures == temperature
            actions[rows] = select_actions(result.weights()[rows], float(temperature),
                                           self.rng)
        return actions
