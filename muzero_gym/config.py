"""Typed, validated configuration: frozen dataclasses loaded from TOML presets plus overrides.

A config has six sections (``env``, ``model``, ``search``, ``replay``, ``train``, ``log``). Every
field has a default and a one-line doc (``field_doc``). Values are checked when a section is built;
a bad value raises :class:`ConfigError` naming the field, the value and what is allowed. Unknown
sections or keys are errors too, so a typo never silently falls back to a default.

Presets are TOML files in ``muzero_gym/agents/presets``; ``load_config("cartpole",
["search.num_simulations=25"])`` reads one and applies dotted overrides. ``load_config`` also
takes a TOML file's path, or a Gymnasium env id (``Acrobot-v1``, ``ALE/Pong-v5``, or
``my_module:MyEnv-v0`` for an env that ``my_module`` registers on import), for which it picks
defaults from the env's spaces (:func:`config_for_env`).
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import math
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib



def _preset_dir() -> Path:
    """The folder of shipped presets (``muzero_gym.agents/presets``, i.e. ``agents/presets``)."""
    return Path(str(importlib.resources.files("muzero_gym.agents") / "presets"))


class ConfigError(ValueError):
    """A config value, key or file is invalid; the message names what and why."""


def _field(default: Any, doc: str, *, low: float | None = None, high: float | None = None,
           low_open: bool = False, choices: tuple[str, ...] | None = None) -> Any:
    """A dataclass field with a doc string and an allowed range or set of choices."""
    meta = {"doc": doc, "low": low, "high": high, "low_open": low_open, "choices": choices}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def field_doc(section: type, name: str) -> str:
    """The one-line doc of ``section.name``."""
    return {f.name: f.metadata["doc"] for f in dataclasses.fields(section)}[name]


class _Section:
    """Base for config sections: type coercion and range checks run in ``__post_init__``."""

    _name = ""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            where = f"{self._name}.{f.name}"
            value = _coerce(where, value, f.type)
            object.__setattr__(self, f.name, value)
            _check_range(where, value, f.metadata)
        self._check()

    def _check(self) -> None:
        """Checks that involve several fields of this section."""


def _coerce(where: str, value: Any, type_name: Any) -> Any:
    """Converts TOML values to the declared field type, or raises ConfigError."""
    t = str(type_name)
    try:
        if t == "bool":
            if not isinstance(value, bool):
                raise TypeError
            return value
        if t == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise TypeError
            return int(value)
        if t == "float":
            if isinstance(value, bool):
                raise TypeError
            value = float(value)
            if math.isnan(value):
                raise TypeError
            return value
        if t == "str":
            if not isinstance(value, str):
                raise TypeError
            return value
        if t.startswith("list[float]"):
            return [float(v) for v in value]
        if t.startswith("list[int]"):
            return [int(v) for v in value]
        if t.startswith("dict"):
            if not isinstance(value, Mapping):
                raise TypeError
            return dict(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where} = {value!r}: expected a value of type {t}") from None
    return value


def _check_range(where: str, value: Any, meta: Mapping[str, Any]) -> None:
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        raise ConfigError(f"{where} = {value!r}: allowed values are {', '.join(choices)}")
    low, high, low_open = meta.get("low"), meta.get("high"), meta.get("low_open")
    values = value if isinstance(value, list) else [value]
    for v in values:
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        too_low = low is not None and (v <= low if low_open else v < low)
        too_high = high is not None and v > high
        if too_low or too_high:
            lo = "-inf" if low is None else f"{low:g}"
            hi = "inf" if high is None else f"{high:g}"
            bracket = "(" if low_open else "["
            raise ConfigError(f"{where} = {value!r}: allowed range is {bracket}{lo}, {hi}]")


@dataclass(frozen=True)
class EnvConfig(_Section):
    """Which Gymnasium env to play and how observations are presented to the model."""

    _name = "env"
    id: str = _field("CartPole-v1", "Gymnasium id passed to gymnasium.make")
    kwargs: dict = _field({}, "extra keyword arguments for gymnasium.make")
    num_envs: int = _field(16, "number of envs stepped together in self-play", low=1)
    vectorization: str = _field(
        "sync", "vector env: gymnasium sync or async, or ale (ale-py's native multithreaded "
        "Atari vector env; ALE/ ids only)", choices=("sync", "async", "ale"))
    num_env_threads: int = _field(0, "threads of the ale vector env; 0 = one per core", low=0)
    life_loss_terminal: bool = _field(
        False, "training games end at each lost life (Atari); logged returns and evaluation "
        "use whole games")
    observation_layout: str = _field(
        "auto", "axes of rank-3 float or bool observations: auto or channels_first reads them "
        "as [C, H, W] (board planes), channels_last as [H, W, C] (MinAtar); uint8 images are "
        "recognised by themselves", choices=("auto", "channels_first", "channels_last"))
    num_stacked_observations: int = _field(
        1, "observations stacked into one model input (make_image)", low=1)
    stack_actions: bool = _field(False, "add the past actions next to the stacked observations")
    num_players: int = _field(1, "1 for single-agent envs, 2 for alternating zero-sum games",
                              low=1, high=2)
    non_finite: str = _field(
        "error", "what a NaN or infinite reward or observation from the env does: error (stop "
        "with a message naming the env, the step and the value) or drop_game (discard the game "
        "in progress and reset that env)", choices=("error", "drop_game"))
    max_episode_steps: int = _field(
        0, "step cap of an episode, reached = truncated; 0 = the env's own limit (its "
        "registered max_episode_steps; Atari: max_num_frames_per_episode / frameskip), or "
        "10,000 steps for an env that has none", low=0)


@dataclass(frozen=True)
class ModelConfig(_Section):
    """Representation, dynamics and prediction networks."""

    _name = "model"
    kind: str = _field("auto", "network family; auto picks resnet for images, mlp otherwise",
                       choices=("auto", "mlp", "resnet", "resnet_small"))
    hidden_size: int = _field(64, "size of the hidden state (mlp)", low=1)
    layer_size: int = _field(128, "width of the hidden layers (mlp)", low=1)
    num_layers: int = _field(2, "hidden layers per function (mlp)", low=1)
    num_channels: int = _field(256, "channels of the residual tower (resnet)", low=1)
    num_blocks: int = _field(16, "residual blocks per function (resnet); 0 = a single "
                             "convolution per function", low=0)
    downsample: bool = _field(True, "downsample images 16x as in the MuZero Atari network")
    head_channels: int = _field(16, "channels the reward, value and policy heads reduce the "
                                "hidden state to (a 1x1 convolution) before their MLP (resnet)",
                                low=1)
    head_width: int = _field(32, "hidden units of the reward, value and policy heads' MLP "
                             "(resnet)", low=1)
    action_planes: str = _field(
        "scalar", "how a convolutional dynamics network sees the action: scalar = one plane "
        "holding action / num_actions (EfficientZero), one_hot = one constant plane per action "
        "(the MuZero paper's Atari network), so that a single convolution can tell the actions "
        "apart", choices=("scalar", "one_hot"))
    search_precision: str = _field(
        "float32", "number format of the search's calls of a convolutional network "
        "(self-play, evaluation, play): bfloat16 (torch.autocast) is faster on CPUs with "
        "native bfloat16 (AMX, AVX512-BF16) and much slower on others; auto picks it where the "
        "device has it. Training stays float32; MLPs always search in float32",
        choices=("float32", "bfloat16", "auto"))
    value_support_size: int = _field(300, "categorical value support is [-n, n]", low=1)
    reward_support_size: int = _field(300, "categorical reward support is [-n, n]", low=1)
    projection_size: int = _field(128, "width of the projection used by the consistency loss",
                                  low=2)


@dataclass(frozen=True)
class SearchConfig(_Section):
    """Batched MCTS: pUCT selection, root noise, root selection rule and action temperature."""

    _name = "search"
    num_simulations: int = _field(50, "simulations per search", low=1)
    eval_simulations: int = _field(
        0, "simulations per search when the agent is evaluated or plays (evaluation, matches, "
        "muzero-gym play/eval, predict); 0 = num_simulations", low=0)
    pb_c_base: float = _field(19652.0, "pUCT c_base", low=0.0, low_open=True)
    pb_c_init: float = _field(1.25, "pUCT c_init", low=0.0)
    eval_pb_c_init: float = _field(
        -1.0, "pUCT c_init when the agent is evaluated or plays (as eval_simulations): a "
        "smaller one searches the best lines deeper, while self-play keeps pb_c_init's "
        "exploration for its visit targets; -1 = pb_c_init", low=-1.0)
    eval_draw_value: float = _field(
        0.0, "what a drawn game is worth to the agent when it is evaluated or plays (as "
        "eval_simulations; two players, search.simulator): a negative one is an engine's "
        "contempt, the search plays on rather than draw; self-play's draws stay worth 0",
        low=-1.0, high=1.0)
    exploration_constant: float = _field(
        1.0, "constant of the reference's extra UCB1 term; 0 turns it off", low=0.0)
    dirichlet_alpha: float = _field(0.25, "Dirichlet concentration of root noise",
                                    low=0.0, low_open=True)
    root_exploration_fraction: float = _field(0.25, "weight of root noise in the prior",
                                              low=0.0, high=1.0)
    known_bounds: list[float] = _field([], "[min, max] of values if known, else []")
    root_selection: str = _field("puct", "puct (AlphaZero/MuZero) or gumbel (sequential halving)",
                                 choices=("puct", "gumbel"))
    gumbel_num_considered: int = _field(16, "actions considered at the root (gumbel)", low=1)
    gumbel_c_visit: float = _field(50.0, "c_visit of the sigma transform (gumbel)", low=0.0)
    gumbel_c_scale: float = _field(1.0, "c_scale of the sigma transform (gumbel)", low=0.0)
    gumbel_q_rescale: str = _field(
        "tree", "what the completed Q-values are rescaled to [0, 1] by (gumbel): tree (the "
        "search tree's least and greatest values) or children (the root moves' own, as mctx)",
        choices=("tree", "children"))
    min_value_span: float = _field(
        0.0, "least span the search normalises values over (pUCT and Gumbel's completed Q): "
        "while a tree's values differ by less, their differences stay small instead of "
        "filling [0, 1] (EfficientZero: 0.01); 0 = the bounds as they are", low=0.0)
    max_depth: int = _field(
        0, "deepest level the search tree grows to: a simulation that reaches an expanded node "
        "there backs its value up again instead of going deeper (num_unroll_steps keeps the "
        "search within the depth the dynamics are trained to unroll); 0 = no cap", low=0)
    temperature_steps: list[float] = _field(
        [], "training steps at which the temperature moves to the next entry")
    temperatures: list[float] = _field(
        [1.0], "action temperatures, one more than steps: of the visit softmax (puct), or of "
        "Gumbel's draw from its improved policy (gumbel: the Gumbel noise is scaled by it)",
        low=0.0)
    temperature_zero_after_moves: int = _field(
        0, "moves after which an episode plays greedily (board games: 30); 0 = never", low=0)
    simulator: bool = _field(
        False, "search steps copies of the real env (get_state/set_state) instead of the "
        "learned dynamics")
    solver: bool = _field(
        False, "prove wins, losses and draws the search reaches (MCTS-solver): needs "
        "search.simulator = true, puct root selection and a deterministic game")

    def _check(self) -> None:
        if self.eval_pb_c_init < 0 and self.eval_pb_c_init != -1:
            raise ConfigError(f"search.eval_pb_c_init = {self.eval_pb_c_init}: expected a value "
                              ">= 0, or -1 for pb_c_init")
        if self.solver and not self.simulator:
            raise ConfigError("search.solver = true needs search.simulator = true: only the "
                              "real game says which positions are final")
        if self.solver and self.root_selection != "puct":
            raise ConfigError("search.solver = true works with search.root_selection = 'puct'")
        if self.eval_draw_value != 0.0 and (self.solver or not self.simulator):
            raise ConfigError("search.eval_draw_value needs search.simulator = true (only the "
                              "real game says which positions are drawn) and search.solver = "
                              "false (proofs take draws as worth 0)")
        if self.known_bounds and (len(self.known_bounds) != 2
                                  or self.known_bounds[0] >= self.known_bounds[1]):
            raise ConfigError(f"search.known_bounds = {self.known_bounds!r}: "
                              "expected [] or [min, max] with min < max")
        if len(self.temperatures) != len(self.temperature_steps) + 1:
            raise ConfigError(
                f"search.temperatures = {self.temperatures!r}: needs exactly one more entry than "
                f"search.temperature_steps = {self.temperature_steps!r}")
        if list(self.temperature_steps) != sorted(self.temperature_steps):
            raise ConfigError(f"search.temperature_steps = {self.temperature_steps!r}: "
                              "must be increasing")

    def temperature(self, training_step: int, move_number: int = 0) -> float:
        """Action temperature, as the reference's ``visit_softmax_temperature_fn``."""
        if self.temperature_zero_after_moves and move_number >= self.temperature_zero_after_moves:
            return 0.0
        for threshold, temp in zip(self.temperature_steps, self.temperatures):
            if training_step < threshold:
                return temp
        return self.temperatures[-1]


@dataclass(frozen=True)
class ReplayConfig(_Section):
    """Replay buffer size and prioritized sampling."""

    _name = "replay"
    capacity: int = _field(100_000, "transitions kept; the oldest positions leave first", low=1)
    segment_length: int = _field(
        200, "positions of a running game self-play sends to the replay at once, so that "
        "learning starts whatever the games' length; 0 = whole games when they end", low=0)
    prioritized: bool = _field(True, "sample positions by priority instead of uniformly")
    priority_alpha: float = _field(1.0, "priority exponent alpha", low=0.0)
    priority_beta: float = _field(1.0, "importance-weight exponent beta", low=0.0, high=1.0)
    priority_epsilon: float = _field(1e-6, "added to every priority so none is zero",
                                     low=0.0, low_open=True)


@dataclass(frozen=True)
class TrainConfig(_Section):
    """Targets, optimizer, schedule and target network."""

    _name = "train"
    seed: int = _field(0, "seed of every random generator", low=0, high=2**63 - 1)
    discount: float = _field(0.997, "discount of rewards and bootstrap values",
                             low=0.0, high=1.0)
    td_steps: int = _field(10, "n of the n-step value target", low=1)
    td_steps_age: int = _field(
        0, "EfficientZero's off-policy correction: a sampled position's n shrinks by one for "
        "every td_steps_age learner steps since it arrived in the replay (down to 1), so old "
        "data's returns, played by older policies, weigh less against the bootstrap value; "
        "0 = every sample uses td_steps", low=0)
    search_value_mix: float = _field(
        0.0, "w: value target = (1 - w) * n-step target + w * the position's own search value "
        "(the 'Q + Z' averaging of AlphaZero re-implementations); 0 = the reference's target",
        low=0.0, high=1.0)
    num_unroll_steps: int = _field(
        5, "K: steps the dynamics function is unrolled; 0 trains representation and prediction "
        "only (AlphaZero, for search.simulator = true)", low=0)
    unroll_loss_divisor: int = _field(
        0, "each unrolled step's losses are divided by this (the reference divides by K); "
        "with a K larger than it, the steps beyond it are added without weakening the first "
        "ones; 0 = num_unroll_steps", low=0)
    early_num_unroll_steps: int = _field(
        0, "K of the first early_unroll_learner_steps learner steps, num_unroll_steps after "
        "(a dynamics trained shallow while the model is new, then deeper); 0 = none", low=0)
    early_unroll_learner_steps: int = _field(
        0, "learner steps that unroll early_num_unroll_steps", low=0)
    batch_size: int = _field(256, "positions per learner step", low=1)
    optimizer: str = _field("sgd", "sgd (with momentum) or adam", choices=("sgd", "adam"))
    lr_init: float = _field(0.05, "initial learning rate", low=0.0, low_open=True)
    lr_decay_rate: float = _field(0.1, "lr = lr_init * rate ** (step / decay_steps)",
                                  low=0.0, low_open=True, high=1.0)
    lr_decay_steps: float = _field(350e3, "steps over which lr decays by lr_decay_rate",
                                   low=0.0, low_open=True)
    lr_warmup_steps: int = _field(0, "linear warm-up steps before the decay; 0 = none", low=0)
    momentum: float = _field(0.9, "SGD momentum", low=0.0, high=1.0)
    weight_decay: float = _field(1e-4, "L2 weight decay", low=0.0)
    decay_norms_and_biases: bool = _field(
        True, "apply the weight decay to normalisation scales and shifts and to biases too; "
        "false: to the weights of convolutions and linear layers only (with Adam, the decay "
        "drives the scale of a channel that has stopped firing to zero at the learning rate's "
        "pace, and the channel never returns)")
    max_grad_norm: float = _field(5.0, "gradient clipping norm; 0 = no clipping", low=0.0)
    value_loss_weight: float = _field(0.25, "weight of the value loss", low=0.0)
    consistency_loss_weight: float = _field(
        0.0, "weight of EfficientZero's self-supervised consistency loss; 0 = off", low=0.0)
    target_update_interval: int = _field(200, "learner steps between target network refreshes",
                                         low=1)
    target_update_tau: float = _field(
        0.0, "Polyak averaging: each learner step moves the target network this share of the "
        "way to the trained one (target_update_interval is then unused); 0 = hard refreshes",
        low=0.0, high=1.0)
    averaged_weights_tau: float = _field(
        0.0, "evaluation and play use a moving average of the trained weights that each learner "
        "step moves this share of the way to them (0.002: about the last 500 steps); self-play "
        "acts on the trained weights. 0 = the trained weights everywhere", low=0.0, high=1.0)
    bootstrap_source: str = _field(
        "search", "bootstrap values from stored search values or the target network",
        choices=("search", "target_network"))
    device: str = _field("auto", "learner device: auto (CUDA if present), cpu or cuda",
                         choices=("auto", "cpu", "cuda"))
    inference_device: str = _field("cpu", "self-play inference device: auto, cpu or cuda",
                                   choices=("auto", "cpu", "cuda"))
    mixed_precision: bool = _field(False, "bfloat16 autocast for the learner on CUDA")
    cuda_graphs: bool = _field(
        False, "a CUDA learner records its step once as a CUDA graph and replays it (one launch "
        "instead of thousands; the same numbers); applies when bootstrap_source = 'search' and "
        "there is no consistency loss, else the step runs eagerly. Off by default: not yet "
        "run on a GPU (its tests run with pytest --device cuda)")
    num_threads: int = _field(
        0, "torch threads and numpy's BLAS threads (per thread of work with concurrent_learner); "
        "0 = 1 with async envs, half the cores with concurrent_learner, else all cores", low=0)
    backend: str = _field(
        "local", "where training runs: local (self-play and learner in this process) or ray "
        "(self-play in train.num_actors Ray actors, the learner in this process; needs the "
        "[distributed] extra)", choices=("local", "ray"))
    num_actors: int = _field(2, "self-play actors of the ray backend", low=1)
    actor_moves: int = _field(
        8, "ray backend: moves an actor makes in all its envs before it sends what they made",
        low=1)
    max_ratio_drift: float = _field(
        0.2, "ray backend: how far the learner steps may stray from replay_ratio times the env "
        "steps, as a fraction; actors wait when the learner falls further behind, the learner "
        "when it gets further ahead", low=0.0, high=1.0)
    concurrent_learner: bool = _field(
        False, "take the learner steps that are due in a second thread while self-play makes "
        "its next move in every game (one move behind, deterministic for a seed): the two run "
        "on separate cores instead of taking turns")
    env_steps: int = _field(100_000, "env steps of a full run (muzero-gym train)", low=1)
    reward_clipping: bool = _field(
        False, "rewards enter the training targets as their sign (Atari); logged returns and "
        "evaluation stay raw")
    augment_symmetries: bool = _field(
        False, "train on a random symmetric copy of each sampled position, from the "
        "rotations/reflections the env declares with symmetries() (board games, MinAtar Breakout)")
    replay_ratio: float = _field(0.25, "learner steps per env step", low=0.0, low_open=True)
    warmup_transitions: int = _field(1000, "transitions stored before learning starts", low=1)
    weight_sync_interval: int = _field(
        50, "learner steps between copies of the weights to self-play", low=1)
    reanalyse_fraction: float = _field(
        0.0, "fraction of sampled positions whose value targets are recomputed by a fresh "
        "search with the target network", low=0.0, high=1.0)
    reanalyse_policy: bool = _field(False, "reanalysed positions also get fresh policy targets")
    reanalyse_simulations: int = _field(0, "simulations of a reanalyse search; 0 = as self-play",
                                        low=0)
    eval_interval: int = _field(5000, "env steps between evaluations; 0 = never", low=0)
    eval_episodes: int = _field(20, "episodes per evaluation", low=1)
    eval_opponent: str = _field(
        "random", "two-player evaluation opponent: random, perfect (exhaustive alpha-beta, small "
        "games), alphabeta (depth-limited), or an engine: gnugo (Go), stockfish (chess), "
        "gnushogi (shogi)", choices=("random", "perfect", "alphabeta", "gnugo", "stockfish",
                                      "gnushogi"))
    eval_opponent_depth: int = _field(2, "search depth of the alphabeta opponent", low=1)
    eval_opponent_level: int = _field(
        1, "strength of an engine opponent: GNU Go's level (1-10), Stockfish's Skill Level "
        "(0-20), GNU Shogi's search depth", low=0)
    eval_opening_plies: int = _field(
        0, "two-player evaluation: random moves that open each game (pairs of games share an "
        "opening with the seats swapped), so that greedy play does not repeat one game", low=0)

    def _check(self) -> None:
        if bool(self.early_num_unroll_steps) != bool(self.early_unroll_learner_steps):
            raise ConfigError(
                f"train.early_num_unroll_steps = {self.early_num_unroll_steps} with "
                f"train.early_unroll_learner_steps = {self.early_unroll_learner_steps}: set both "
                "(the early K and how many learner steps use it) or neither")
        if (self.bootstrap_source == "target_network" and self.reanalyse_fraction > 0
                and not self.reanalyse_policy):
            raise ConfigError(
                f"train.reanalyse_fraction = {self.reanalyse_fraction} with train.bootstrap_source"
                " = 'target_network': every value target then bootstraps from the target network,"
                " so reanalyse would change nothing; set train.reanalyse_fraction = 0, "
                "bootstrap_source = 'search' or reanalyse_policy = true")


@dataclass(frozen=True)
class LogConfig(_Section):
    """Where and how often results are written."""

    _name = "log"
    logdir: str = _field("runs", "folder that holds one subfolder per run")
    run_name: str = _field("", "run folder name; empty = <env>__<preset>__<seed>__<time>")
    log_interval: int = _field(100, "env steps between TensorBoard scalars", low=1)
    checkpoint_interval: int = _field(10_000, "env steps between checkpoints", low=1)
    progress: bool = _field(True, "show a progress line on the terminal")

    def _check(self) -> None:
        name = self.run_name
        if name and (name in (".", "..") or "/" in name or "\\" in name or "\0" in name):
            raise ConfigError(f"log.run_name = {name!r}: must be a plain folder name (no '/', "
                              "not '.' or '..')")


# Keys that say how a run executes, not what it learns: a resumed run may change them (move
# to the other backend, another device, more actors) and stays the same run.
EXECUTION_KEYS = frozenset({
    "train.backend", "train.num_actors", "train.actor_moves", "train.max_ratio_drift",
    "train.device", "train.inference_device", "train.num_threads", "train.concurrent_learner",
    "env.num_env_threads", "log.progress",
})


def check_execution_overrides(overrides: Iterable[str]) -> list[str]:
    """``overrides`` if each sets one of :data:`EXECUTION_KEYS`; else a ConfigError."""
    overrides = list(overrides)
    for item in overrides:
        key = item.partition("=")[0].strip()
        if key not in EXECUTION_KEYS:
            raise ConfigError(f"a resumed run keeps its config; --set may change only how it "
                              f"runs ({', '.join(sorted(EXECUTION_KEYS))}), not {key}")
    return overrides


SECTIONS: dict[str, type] = {
    "env": EnvConfig, "model": ModelConfig, "search": SearchConfig,
    "replay": ReplayConfig, "train": TrainConfig, "log": LogConfig,
}


@dataclass(frozen=True)
class Config:
    """The whole configuration of a run; ``preset`` records where it came from."""

    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    log: LogConfig = field(default_factory=LogConfig)
    preset: str = "custom"

    def __post_init__(self) -> None:
        if self.search.eval_draw_value != 0.0 and self.env.num_players != 2:
            raise ConfigError(f"search.eval_draw_value = {self.search.eval_draw_value}: draws "
                              "have a value only in two-player games (env.num_players = 2)")

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Plain nested dict (sections only), suitable for TOML and checkpoints."""
        return {name: _public_fields(getattr(self, name)) for name in SECTIONS}

    def replace(self, overrides: Iterable[str] = ()) -> Config:
        """A copy with ``section.key=value`` overrides applied."""
        data = self.to_dict()
        for item in overrides:
            _apply_override(data, item)
        return config_from_dict(data, preset=self.preset)

    def to_toml(self) -> str:
        """The config as TOML text that ``load_config`` reads back to an equal config."""
        lines = [f"# muzero_gym config (preset: {self.preset})"]
        for name, values in self.to_dict().items():
            lines.append(f"\n[{name}]")
            for key, value in values.items():
                lines.append(f"{key} = {_toml_value(value)}")
        return "\n".join(lines) + "\n"


def _public_fields(section: Any) -> dict[str, Any]:
    return {f.name: _copy_value(getattr(section, f.name)) for f in dataclasses.fields(section)}


def _copy_value(value: Any) -> Any:
    return type(value)(value) if isinstance(value, (list, dict)) else value


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise ConfigError(f"cannot write {value!r} as TOML")


def config_from_dict(data: Mapping[str, Any], preset: str = "custom") -> Config:
    """Builds a Config from nested dicts; unknown sections and keys raise ConfigError."""
    sections = {}
    for name, values in data.items():
        if name not in SECTIONS:
            raise ConfigError(f"unknown config section {name!r}; sections are "
                              f"{', '.join(SECTIONS)}")
        if not isinstance(values, Mapping):
            raise ConfigError(f"config section {name!r} must be a table of keys")
        cls = SECTIONS[name]
        known = {f.name for f in dataclasses.fields(cls)}
        for key in values:
            if key not in known:
                raise ConfigError(f"unknown config key {name}.{key}; keys of [{name}] are "
                                  f"{', '.join(sorted(known))}")
        sections[name] = cls(**values)
    return Config(**sections, preset=preset)


def _parse_override_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text  # a bare word is a string: env.id=CartPole-v1


def _apply_override(data: dict[str, dict[str, Any]], item: str) -> None:
    key, sep, text = item.partition("=")
    section, dot, name = key.strip().partition(".")
    if not sep or not dot or not name:
        raise ConfigError(f"override {item!r}: expected section.key=value")
    if section not in data:
        raise ConfigError(f"unknown config section {section!r} in override {item!r}")
    if name not in data[section]:
        raise ConfigError(f"unknown config key {section}.{name} in override {item!r}")
    data[section][name] = _parse_override_value(text.strip())


def list_presets() -> list[str]:
    """Names of the presets shipped with the package."""
    return sorted(p.stem for p in _preset_dir().glob("*.toml"))


def load_config(target: str | Path = "cartpole", overrides: Iterable[str] = ()) -> Config:
    """Reads a preset name, a TOML file path or (any other name) a Gymnasium env id, then
    applies ``section.key=value`` overrides (see :func:`config_for_env` for env ids)."""
    path = Path(target)
    if path.suffix != ".toml":
        if str(target) not in list_presets():
            return config_for_env(str(target), overrides)
        path = _preset_dir() / f"{target}.toml"
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} does not exist") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {e}") from None
    config = config_from_dict(data, preset=path.stem)
    return config.replace(overrides)


MINATAR_PRESETS = {f"MinAtar/{game}": f"minatar_{name}" for game, name in (
    ("Asterix", "asterix"), ("Breakout", "breakout"), ("Freeway", "freeway"),
    ("Seaquest", "seaquest"), ("SpaceInvaders", "space_invaders"))}


def config_for_env(env_id: str, overrides: Iterable[str] = ()) -> Config:
    """Defaults for a registered Gymnasium env id, chosen from its spaces: the ``atari100k``
    preset for ``ALE/`` ids, the ``cartpole`` preset's MLP settings for vector observations,
    and a small residual network over 4 stacked frames for images. Ids of the form
    ``module:EnvId`` import ``module`` (from the current folder or PYTHONPATH), which must
    register ``EnvId``. An id that is none of these is a ConfigError."""
    from muzero_gym.environment import EnvError, make_env
    from muzero_gym.game import ObservationEncoder

    if env_id.startswith("ALE/"):
        config = load_config("atari100k", [f"env.id={env_id}", *overrides])
        return dataclasses.replace(config, preset="atari100k")
    minatar = MINATAR_PRESETS.get(env_id.split("-v")[0])
    if minatar is not None:
        config = load_config(minatar, [f"env.id={env_id}", *overrides])
        return dataclasses.replace(config, preset=minatar)
    base = load_config("cartpole").replace([f"env.id={env_id}"])
    try:
        env = make_env(base.env)
    except EnvError as e:
        raise ConfigError(f"{env_id!r} is neither a preset ({', '.join(list_presets())}), a "
                          f".toml file, nor a usable Gymnasium env: {e}") from None
    is_image = ObservationEncoder(env.observation_space).is_image
    env.close()
    if is_image:
        base = base.replace(["model.kind=resnet_small", "env.num_stacked_observations=4",
                             "model.value_support_size=300", "model.reward_support_size=300"])
    return dataclasses.replace(base.replace(overrides), preset="auto")
