"""Batched MCTS driver: runs one search over B roots, calling the model once per simulation.

The tree itself lives in :mod:`muzero_gym.mcts.tree` (compiled kernels over preallocated
arrays). This module owns those arrays, draws root noise, calls the model callback and turns the
finished trees into search results. It does not import torch: the model is reached only through

    recurrent_fn(parent_index [B] int32, action [B] int32, node_index: int)
        -> (reward [B], value [B], policy_logits [B, A][, legal [B, A] bool])

which must compute the dynamics + prediction step from the hidden state of node
``parent_index[b]`` of row ``b`` and remember the new hidden state as node ``node_index`` of every
row (see :class:`muzero_gym.inference.ModelSearchAdapter`). A callback that knows the legal
actions of the new nodes (a true simulator, :mod:`muzero_gym.simulator`) returns them as a
fourth array, with at least one True per row; otherwise every action is legal below the root.
A callback that also knows which new nodes are final states returns them as a fifth array
(terminal [B] bool); with ``SearchSettings.solver`` the search then proves values (MCTS-solver,
see :mod:`muzero_gym.mcts.tree`) and plays and trains on the proofs: a move proven best is
taken, a move proven lost is not while another is open.

``SearchSettings.draw_value`` (two players, such a callback) is what a drawn game is worth to
the player the search is for (the player to move at the root): a final state reached with
reward 0 is worth it to that player, and its negation to the other one, instead of 0. A
negative one is an engine's contempt: the search prefers playing on to drawing.

``SearchSettings.max_depth`` caps how deep the tree grows (the learned dynamics are trained to
unroll only ``num_unroll_steps`` steps): a simulation whose walk reaches an expanded node at the
cap backs that node's value up once more, and the model's output for that row is dropped.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from muzero_gym.mcts import tree

IN_PLAY, DRAWN, DECIDED = 0, 1, 2  # how a node's game stands (SearchSettings.draw_value)

RecurrentFn = Callable[[np.ndarray, np.ndarray, int], tuple[np.ndarray, np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class SearchSettings:
    """Everything the search needs to know; build it with :meth:`from_config`."""

    num_simulations: int = 50
    discount: float = 0.997
    pb_c_base: float = 19652.0
    pb_c_init: float = 1.25
    exploration_constant: float = 1.0
    dirichlet_alpha: float = 0.25
    root_exploration_fraction: float = 0.25
    known_bounds: tuple[float, float] | None = None
    num_players: int = 1
    root_selection: str = "puct"
    gumbel_num_considered: int = 16
    gumbel_c_visit: float = 50.0
    gumbel_c_scale: float = 1.0
    gumbel_q_rescale: str = "tree"
    min_value_span: float = 0.0
    max_depth: int = 0
    solver: bool = False
    draw_value: float = 0.0

    def __post_init__(self) -> None:
        if self.num_simulations < 1:
            raise ValueError(f"num_simulations = {self.num_simulations}: must be >= 1")
        if self.num_players not in (1, 2):
            raise ValueError(f"num_players = {self.num_players}: must be 1 or 2")
        if self.root_selection not in ("puct", "gumbel"):
            raise ValueError(f"root_selection = {self.root_selection!r}: use puct or gumbel")
        if self.gumbel_q_rescale not in ("tree", "children"):
            raise ValueError(f"gumbel_q_rescale = {self.gumbel_q_rescale!r}: use tree or "
                             "children")
        if not self.min_value_span >= 0.0:
            raise ValueError(f"min_value_span = {self.min_value_span}: must be >= 0")
        if self.max_depth < 0:
            raise ValueError(f"max_depth = {self.max_depth}: must be >= 0 (0 = no cap)")
        if self.solver and self.root_selection != "puct":
            raise ValueError("solver = True needs root_selection = 'puct'")
        if not -1.0 <= self.draw_value <= 1.0:
            raise ValueError(f"draw_value = {self.draw_value}: must be in [-1, 1]")
        if self.draw_value != 0.0 and (self.num_players != 2 or self.solver):
            raise ValueError("draw_value needs num_players = 2 and solver = False")

    @property
    def rescale_q_by_children(self) -> bool:
        """Whether Gumbel's completed Q is rescaled by the root moves' own bounds."""
        return self.gumbel_q_rescale == "children"

    @classmethod
    def from_config(cls, config) -> SearchSettings:
        """Settings from a :class:`muzero_gym.config.Config`."""
        s = config.search
        return cls(
            num_simulations=s.num_simulations, discount=config.train.discount,
            pb_c_base=s.pb_c_base, pb_c_init=s.pb_c_init,
            exploration_constant=s.exploration_constant, dirichlet_alpha=s.dirichlet_alpha,
            root_exploration_fraction=s.root_exploration_fraction,
            known_bounds=tuple(s.known_bounds) if s.known_bounds else None,
            num_players=config.env.num_players, root_selection=s.root_selection,
            gumbel_num_considered=s.gumbel_num_considered, gumbel_c_visit=s.gumbel_c_visit,
            gumbel_c_scale=s.gumbel_c_scale, gumbel_q_rescale=s.gumbel_q_rescale,
            min_value_span=s.min_value_span, max_depth=s.max_depth, solver=s.solver)


@dataclass
class SearchResult:
    """What one batched search returns; every array has the batch as its first axis."""

    visit_counts: np.ndarray  # [B, A] int32, visits of each root child
    root_value: np.ndarray  # [B] float64, the reference's root.value()
    search_policy: np.ndarray  # [B, A] float64, policy target (visits, or Gumbel's improved policy)
    qvalues: np.ndarray  # [B, A] float64, reward + discount * child value (0 if unvisited)
    max_depth: np.ndarray  # [B] int32, deepest node expanded
    gumbel_action: np.ndarray | None  # [B] int64, sequential halving's pick (gumbel only)
    # [B, A] float64, proven value of each root move, NaN where unproven (solver only)
    proven_qvalues: np.ndarray | None = None
    # [B, A] float64, the weights actions are drawn from: the visit counts, or with the solver
    # the visits of the moves proven best (or, unproven root, of all but the proven lost moves)
    action_weights: np.ndarray | None = None

    def greedy_actions(self) -> np.ndarray:
        """[B] int64: the action to play without exploration, sequential halving's pick for
        gumbel (deterministic when the search ran without noise), else the heaviest of
        :meth:`weights` (the most visited, unless the solver proved moves)."""
        if self.gumbel_action is not None:
            return self.gumbel_action.astype(np.int64)
        return self.weights().argmax(axis=1).astype(np.int64)

    def weights(self) -> np.ndarray:
        """[B, A] the weights moves are chosen from (visit counts without the solver)."""
        return self.visit_counts if self.action_weights is None else self.action_weights


@functools.lru_cache(maxsize=64)
def considered_visit_table(max_considered: int, num_simulations: int) -> np.ndarray:
    """Sequential halving schedule: row m gives, for each simulation, the visit count a root
    action must have to be chosen when m actions are considered. Shape [max_considered+1, S]."""
    table = np.zeros((max_considered + 1, num_simulations), dtype=np.int32)
    for m in range(1, max_considered + 1):
        if m == 1:
            table[m] = np.arange(num_simulations)
            continue
        rounds = math.ceil(math.log2(m))
        sequence: list[int] = []
        visits = [0] * m
        considered = m
        while len(sequence) < num_simulations:
            extra = max(1, num_simulations // (rounds * considered))
            for _ in range(extra):
                sequence.extend(visits[:considered])
                for i in range(considered):
                    visits[i] += 1
            considered = max(2, considered // 2)
        table[m] = sequence[:num_simulations]
    return table


class BatchedMCTS:
    """A reusable batched search for a fixed number of actions.

    Arrays are allocated for the largest batch seen so far and reused, so the hot loop creates no
    objects beyond what the callback returns.
    """

    def __init__(self, settings: SearchSettings, num_actions: int):
        if num_actions < 1:
            raise ValueError(f"num_actions = {num_actions}: must be >= 1")
        self.settings = settings
        self.num_actions = num_actions
        self._capacity = 0

    def _allocate(self, batch: int) -> None:
        if batch <= self._capacity:
            return
        n, a = self.settings.num_simulations + 1, self.num_actions
        self._nodes = np.zeros((batch, n, 4), dtype=np.int32)
        self._values = np.zeros((batch, n, 4), dtype=np.float64)
        self._children = np.full((batch, n, a), -1, dtype=np.int32)
        self._prior = np.zeros((batch, n, a), dtype=np.float64)
        self._minmax = np.zeros((batch, 2), dtype=np.float64)
        self._parent = np.zeros(batch, dtype=np.int32)
        self._action = np.zeros(batch, dtype=np.int32)
        self._revisit = np.full(batch, -1, dtype=np.int32)
        self._start = np.zeros(batch, dtype=np.int32)
        self._all_legal = np.ones((batch, a), dtype=np.bool_)
        self._no_terminal = np.zeros(batch, dtype=np.bool_)
        # How each node's game stands when draws have a value: IN_PLAY, DRAWN or DECIDED.
        self._outcome = np.zeros((batch, n), dtype=np.int8)
        self._capacity = batch

    def run(self, root_value: np.ndarray, root_logits: np.ndarray, recurrent_fn: RecurrentFn,
            root_legal: np.ndarray | None = None, root_to_play: np.ndarray | None = None,
            rng: np.random.Generator | None = None, add_noise: bool = True,
            gumbel_temperature: np.ndarray | None = None) -> SearchResult:
        """Searches from B roots.

        Args:
            root_value: [B] value of each root from the initial inference.
            root_logits: [B, A] policy logits of each root.
            recurrent_fn: the model callback described in the module doc.
            root_legal: [B, A] bool, True = legal; all legal when None. Every row needs one.
            root_to_play: [B] int player to move at each root (0 or 1); 0 when None.
            rng: source of root noise (Dirichlet for puct, Gumbel for gumbel).
            add_noise: False for evaluation (no Dirichlet noise, zero Gumbel noise).
            gumbel_temperature: [B] temperature of each row's Gumbel choice (gumbel with noise):
                the noise is multiplied by it, so the pick is a draw from softmax((log prior +
                sigma(completed Q)) / T); 1 (or None) is Gumbel MuZero's draw, 0 the greedy pick.
                Ignored by puct and without noise.
        """
        s = self.settings
        root_value = np.ascontiguousarray(root_value, dtype=np.float64).reshape(-1)
        batch = root_value.shape[0]
        root_logits = np.ascontiguousarray(root_logits, dtype=np.float64)
        if root_logits.shape != (batch, self.num_actions):
            raise ValueError(f"root_logits has shape {root_logits.shape}, expected "
                             f"({batch}, {self.num_actions})")
        if root_legal is None:
            root_legal = np.ones((batch, self.num_actions), dtype=np.bool_)
        root_legal = np.ascontiguousarray(root_legal, dtype=np.bool_)
        if root_legal.shape != (batch, self.num_actions):
            raise ValueError(f"root_legal has shape {root_legal.shape}, expected "
                             f"({batch}, {self.num_actions})")
        num_legal = root_legal.sum(axis=1)
        if (num_legal == 0).any():
            raise ValueError(f"rows {np.flatnonzero(num_legal == 0).tolist()} have no legal action")
        if root_to_play is None:
            root_to_play = np.zeros(batch, dtype=np.int32)
        root_to_play = np.ascontiguousarray(root_to_play, dtype=np.int32)
        rng = rng if rng is not None else np.random.default_rng()

        self._allocate(batch)
        nodes, values = self._nodes[:batch], self._values[:batch]
        children, prior, minmax = self._children[:batch], self._prior[:batch], self._minmax[:batch]
        parent, action = self._parent[:batch], self._action[:batch]
        revisit = self._revisit[:batch]

        use_gumbel = s.root_selection == "gumbel"
        noise_fraction = s.root_exploration_fraction if (add_noise and not use_gumbel) else 0.0
        if noise_fraction > 0.0:
            # Normalised Gamma draws over the legal actions are Dirichlet(alpha) draws.
            noise = rng.gamma(s.dirichlet_alpha, 1.0, size=(batch, self.num_actions)) * root_legal
            noise /= np.maximum(noise.sum(axis=1, keepdims=True), 1e-300)
        else:
            noise = np.zeros((batch, self.num_actions))
        if use_gumbel:
            gumbel = (rng.gumbel(size=(batch, self.num_actions)) if add_noise
                      else np.zeros((batch, self.num_actions)))
            if add_noise and gumbel_temperature is not None:
                temperature = np.asarray(gumbel_temperature, dtype=np.float64)
                if temperature.shape != (batch,) or (temperature < 0).any():
                    raise ValueError(f"gumbel_temperature must be {batch} values >= 0, got "
                                     f"{gumbel_temperature!r}")
                gumbel *= temperature[:, None]
            table = considered_visit_table(s.gumbel_num_considered, s.num_simulations)
            considered = table[np.minimum(num_legal, s.gumbel_num_considered)]
        known_min, known_max = s.known_bounds if s.known_bounds else (np.inf, -np.inf)
        proof_max = s.known_bounds[1] if s.known_bounds else np.inf  # a win that ends the proof

        tree.init_roots(nodes, values, children, prior, minmax, root_legal, root_value,
                        root_logits, root_to_play, noise, noise_fraction, known_min, known_max,
                        s.discount)
        if s.draw_value != 0.0:
            self._outcome[:batch, 0] = IN_PLAY
        # which setting needs the callback to say which new nodes are final states, if any
        needs_final = ("solver = True" if s.solver
                       else "draw_value" if s.draw_value != 0.0 else None)
        max_depth = np.zeros(batch, dtype=np.int32)
        start = self._start[:batch]
        start[:] = 0
        completed_q = np.zeros((batch, self.num_actions))
        for simulation in range(s.num_simulations):
            if use_gumbel:
                tree.gumbel_root_choice(nodes, values, children, prior, minmax, root_legal,
                                        s.discount, gumbel, considered, simulation,
                                        s.gumbel_c_visit, s.gumbel_c_scale, s.rescale_q_by_children,
                                        s.min_value_span, completed_q, start, parent, action,
                                        max_depth)
            tree.select_leaves(nodes, values, children, prior, minmax, root_legal, s.discount,
                               s.pb_c_base, s.pb_c_init, s.exploration_constant, known_min,
                               known_max, s.min_value_span, s.max_depth, start, parent, action,
                               revisit, max_depth)
            out = recurrent_fn(parent, action, simulation + 1)
            reward, value, logits = out[:3]
            legal = (self._all_legal[:batch] if len(out) < 4
                     else _legal_rows(out[3], batch, self.num_actions))
            reward, value = _contiguous(reward, (batch,)), _contiguous(value, (batch,))
            final = None if needs_final is None else _final_states(out, batch, needs_final)
            terminal = final if s.solver else self._no_terminal[:batch]
            if s.draw_value != 0.0:
                value = self._value_draws(batch, simulation + 1, parent, reward, value, final,
                                          root_to_play)
            tree.expand_and_backup(nodes, values, children, prior, minmax, simulation + 1, parent,
                                   action, revisit, reward, value,
                                   _contiguous(logits, (batch, self.num_actions)), s.num_players,
                                   s.discount, legal, terminal, root_legal, proof_max)

        visit_counts, out_value, qvalues = self._root_statistics(batch)
        gumbel_action = proven = weights = None
        if use_gumbel:
            search_policy, gumbel_action = self._gumbel_outputs(batch, root_legal, gumbel,
                                                                visit_counts, completed_q)
        else:
            if s.solver:
                proven = self._proven_root_moves(batch)
                weights = _solved_weights(visit_counts, proven, self._prior[:batch, 0],
                                          root_legal, values[:, 0, tree.EXACT], known_min,
                                          known_max)
            counts = visit_counts if weights is None else weights
            search_policy = counts / counts.sum(axis=1, keepdims=True)
        return SearchResult(visit_counts, out_value, search_policy, qvalues, max_depth,
                            gumbel_action, proven, weights)

    def _value_draws(self, batch: int, new_node: int, parent: np.ndarray, reward: np.ndarray,
                     value: np.ndarray, terminal: np.ndarray, root_to_play: np.ndarray
                     ) -> np.ndarray:
        """``value`` [B] of the new nodes with each drawn one worth ``draw_value`` to the root's
        player (its negation when the other player is to move there). A final state reached
        with reward 0 is drawn; the nodes below a final state (which absorbs every move) share
        its outcome."""
        outcome = self._outcome[:batch]
        rows = np.arange(batch)
        parent_outcome = outcome[rows, parent]
        ended_here = (parent_outcome == IN_PLAY) & terminal
        new = np.where(ended_here, np.where(reward == 0.0, DRAWN, DECIDED), parent_outcome)
        outcome[:, new_node] = new
        drawn = new == DRAWN
        if not drawn.any():
            return value
        to_play = (self._nodes[:batch][rows, parent, tree.TO_PLAY] + 1) % 2
        draw = self.settings.draw_value
        return np.where(drawn, np.where(to_play == root_to_play, draw, -draw), value)

    def describe(self, row: int = 0, depth: int = 2, action_names: list[str] | None = None
                 ) -> list[str]:
        """The last search's tree of batch row ``row`` as text, ``depth`` levels below the root
        (as the reference's ``print_node``): per visited node its visits, value for the player
        to move there, the prior, and Q = reward + discount * value seen by the player choosing
        the edge. Children are listed most visited first."""
        if self._capacity == 0:
            raise RuntimeError("no search has run yet")
        nodes, values = self._nodes[row], self._values[row]
        children, prior = self._children[row], self._prior[row]

        def value(n: int) -> float:
            return values[n, tree.VALUE_SUM] / max(nodes[n, tree.VISITS], 1)

        def name(a: int) -> str:
            return action_names[a] if action_names else str(a)

        lines = [f"root: visits {nodes[0, tree.VISITS]}, value {value(0):+.3f}, "
                 f"player {nodes[0, tree.TO_PLAY]} to move"]

        def walk(n: int, level: int) -> None:
            if level > depth:
                return
            kids = [(a, c) for a, c in enumerate(children[n]) if c >= 0 and
                    nodes[c, tree.VISITS] > 0]
            kids.sort(key=lambda ac: -nodes[ac[1], tree.VISITS])
            for a, c in kids:
                sign = 1.0 if nodes[c, tree.TO_PLAY] == nodes[n, tree.TO_PLAY] else -1.0
                q = values[c, tree.REWARD] + self.settings.discount * sign * value(c)
                lines.append(f"{'    ' * level}action {name(a)}: visits {nodes[c, tree.VISITS]}, "
                             f"Q {q:+.3f}, prior {prior[n, a]:.3f}, reward "
                             f"{values[c, tree.REWARD]:+.3f}")
                walk(c, level + 1)

        walk(0, 1)
        return lines

    def _root_children(self, batch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Row indices [B, 1], each root move's child node [B, A] (0 where unexpanded) and
        whether it is expanded [B, A]."""
        child = self._children[:batch, 0]
        exists = child >= 0
        return np.arange(batch)[:, None], np.where(exists, child, 0), exists

    def _root_move_values(self, batch: int, child_value: np.ndarray) -> np.ndarray:
        """[B, A] reward + discount * ``child_value`` [B, A] (each child's value for the player
        to move there), seen by the player to move at the root."""
        nodes, values = self._nodes[:batch], self._values[:batch]
        rows, child, _ = self._root_children(batch)
        same_player = nodes[rows, child, tree.TO_PLAY] == nodes[:, :1, tree.TO_PLAY]
        return values[rows, child, tree.REWARD] + self.settings.discount * np.where(
            same_player, child_value, -child_value)

    def _root_statistics(self, batch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Root child visit counts [B, A], root values [B] and root Q-values [B, A]."""
        nodes, values = self._nodes[:batch], self._values[:batch]
        rows, child, exists = self._root_children(batch)
        visit_counts = np.where(exists, nodes[rows, child, tree.VISITS], 0).astype(np.int32)
        root_value = values[:, 0, tree.VALUE_SUM] / nodes[:, 0, tree.VISITS]
        child_value = values[rows, child, tree.VALUE_SUM] / np.maximum(visit_counts, 1)
        q = self._root_move_values(batch, child_value)
        return visit_counts, root_value, np.where(visit_counts > 0, q, 0.0)

    def _proven_root_moves(self, batch: int) -> np.ndarray:
        """[B, A] proven value of each root move for the player to move at the root, NaN where
        the move is unexpanded or unproven."""
        rows, child, exists = self._root_children(batch)
        exact = self._values[:batch][rows, child, tree.EXACT]
        return np.where(exists, self._root_move_values(batch, exact), np.nan)

    def _gumbel_outputs(self, batch, root_legal, gumbel, visit_counts, q):
        """Gumbel MuZero's improved policy softmax(log prior + sigma(completed Q)) and the action
        sequential halving settles on (the best-scoring among the most visited)."""
        s = self.settings
        tree.completed_q(self._nodes[:batch], self._values[:batch], self._children[:batch],
                         self._prior[:batch], self._minmax[:batch], root_legal, s.discount,
                         s.rescale_q_by_children, s.min_value_span, q)
        sigma = (s.gumbel_c_visit + visit_counts.max(axis=1, keepdims=True)) * s.gumbel_c_scale * q
        log_prior = np.log(self._prior[:batch, 0] + 1e-30)
        logits = np.where(root_legal, log_prior + sigma, -np.inf)
        policy = np.exp(logits - logits.max(axis=1, keepdims=True))
        policy /= policy.sum(axis=1, keepdims=True)
        most_visited = visit_counts == visit_counts.max(axis=1, keepdims=True)
        score = np.where(most_visited & root_legal, gumbel + logits, -np.inf)
        return policy, score.argmax(axis=1)


def _solved_weights(visit_counts: np.ndarray, proven: np.ndarray, root_prior: np.ndarray,
                    root_legal: np.ndarray, root_exact: np.ndarray, known_min: float,
                    known_max: float) -> np.ndarray:
    """[B, A] weights to choose root moves from once some are proven. A proven root keeps the
    visits of its moves proven best; otherwise the moves proven to reach the lower bound (known
    bounds only) lose their weight. A row left without weight (every visited move proven lost)
    falls back on the priors of its open moves."""
    counts = visit_counts.astype(np.float64)
    with np.errstate(invalid="ignore"):
        best = np.isclose(proven, root_exact[:, None])
        lost = proven <= known_min if known_min < known_max else np.zeros_like(best)
    solved_root = ~np.isnan(root_exact)
    keep = np.where(solved_root[:, None], best, ~lost) & root_legal
    weights = np.where(keep, counts, 0.0)
    empty = weights.sum(axis=1) <= 0.0
    if empty.any():
        open_moves = root_legal & ~lost & np.isnan(proven)
        open_moves = np.where(open_moves.any(axis=1, keepdims=True), open_moves, root_legal)
        weights[empty] = np.where(open_moves[empty], root_prior[empty] + 1e-12, 0.0)
    return weights


def _contiguous(array, shape: tuple[int, ...]) -> np.ndarray:
    """The model's output as a C-contiguous float64 array of the expected shape."""
    out = np.ascontiguousarray(array, dtype=np.float64)
    if out.shape != shape:
        if out.size != shape[0] * (shape[1] if len(shape) > 1 else 1):
            raise ValueError(f"recurrent_fn returned an array of shape {out.shape}, "
                             f"expected {shape}")
        out = out.reshape(shape)
    return out


def _final_states(out: tuple, batch: int, needed_by: str) -> np.ndarray:
    """The callback's fifth array (which new nodes are final states) as a C-contiguous bool [B];
    ``needed_by`` names the setting that asks for it, for the error when it is missing."""
    if len(out) < 5:
        raise ValueError(f"{needed_by} needs a recurrent_fn that returns which new nodes are "
                         "final states (a true simulator)")
    final = np.ascontiguousarray(out[4], dtype=np.bool_)
    if final.size != batch:
        raise ValueError(f"recurrent_fn returned final states of shape {final.shape}, "
                         f"expected ({batch},)")
    return final.reshape(batch)


def _legal_rows(legal, batch: int, num_actions: int) -> np.ndarray:
    """The callback's legal mask as a C-contiguous bool [B, A] with a legal action per row."""
    out = np.ascontiguousarray(legal, dtype=np.bool_)
    if out.shape != (batch, num_actions):
        raise ValueError(f"recurrent_fn returned a legal mask of shape {out.shape}, expected "
                         f"({batch}, {num_actions})")
    if not out.any(axis=1).all():
        raise ValueError("recurrent_fn returned a row with no legal action")
    return out


def select_actions(visit_counts: np.ndarray, temperature: float,
                   rng: np.random.Generator) -> np.ndarray:
    """Actions [B] from root visit counts [B, A]: sampled from N^(1/T), or the most visited
    (first on ties) when ``temperature`` is 0, as the MuZero paper's visit softmax."""
    counts = np.asarray(visit_counts, dtype=np.float64)
    if temperature == 0.0:
        return counts.argmax(axis=1)
    logits = np.where(counts > 0, np.log(np.maximum(counts, 1e-300)) / temperature, -np.inf)
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    cumulative = probs.cumsum(axis=1)
    draws = rng.random((counts.shape[0], 1)) * cumulative[:, -1:]
    return np.minimum((cumulative <= draws).sum(axis=1), counts.shape[1] - 1)
