"""Compiled kernels of the batched search tree: initialise roots, select leaves, expand, back up.

The tree of batch row ``b`` lives in preallocated arrays indexed ``[b, node]`` (and ``[b, node,
action]`` for edges); node 0 is the root and node ``i`` is the node expanded at simulation
``i - 1``, so there is no Python object per node. Kernels are compiled with numba (cached on
disk, so only the very first use anywhere pays the compile time) and never touch the model: the
driver in ``search.py`` calls the model between ``select_leaves`` and ``expand_and_backup``.

Conventions (shared with the tests' port of the reference pseudocode):

- ``value_sum[b, n] / visit_count[b, n]`` is the value of node ``n`` for the player to move there.
- ``reward[b, n]`` is the reward of the edge into ``n``, seen by the player who took that action
  (the player to move at the parent). With one player this is exactly the reference; with two
  players the reference's sign rule is applied to the bootstrapped part, which keeps ``reward``
  and ``value`` in their own players' frames.
- Scores follow the reference's ``ucb_score``: pUCT prior term, the normalised value term (the
  parent's value for unvisited children) and the extra UCB1 term; the maximum wins and ties go to
  the largest action index.
- ``exact[b, n]`` (column ``EXACT`` of ``values``) is the proven value of node ``n`` for the player
  to move there, NaN while unknown (MCTS-solver, only fed when the search is told which nodes
  end the game): a final state is worth 0 (nothing follows it), and a node is proven once every
  legal move from it is proven (its best move's value) or once one move is proven to reach the
  known upper bound of values. Selection uses a proven move's exact value, always takes a move
  proven to reach the upper bound and never one proven to reach the lower bound while another
  move is open.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Column layout of the int32 node table ``nodes[b, n, :]``.
VISITS, TO_PLAY, PARENT, ACTION = 0, 1, 2, 3
# Column layout of the float64 node table ``values[b, n, :]``.
VALUE_SUM, REWARD, RAW_VALUE, EXACT = 0, 1, 2, 3
# Column layout of ``minmax[b, :]``.
MIN, MAX = 0, 1


@njit(cache=True)
def _backup(nodes, values, minmax, b, leaf, value, discount):
    """The reference's ``backpropagate`` from ``leaf`` to the root; ``value`` is the leaf's own."""
    leaf_player = nodes[b, leaf, TO_PLAY]
    node = leaf
    while node != -1:
        if nodes[b, node, TO_PLAY] == leaf_player:
            values[b, node, VALUE_SUM] += value
        else:
            values[b, node, VALUE_SUM] -= value
        nodes[b, node, VISITS] += 1
        v = values[b, node, VALUE_SUM] / nodes[b, node, VISITS]
        if v < minmax[b, MIN]:
            minmax[b, MIN] = v
        if v > minmax[b, MAX]:
            minmax[b, MAX] = v
        parent = nodes[b, node, PARENT]
        if parent != -1:
            edge_reward = values[b, node, REWARD]
            if nodes[b, parent, TO_PLAY] != leaf_player:
                edge_reward = -edge_reward
            value = edge_reward + discount * value
        node = parent


@njit(cache=True)
def _set_priors(prior, b, n, logits, mask):
    """Softmax of ``logits`` over the actions in ``mask`` (clipped to +-1e4 as the reference)."""
    num_actions = logits.shape[0]
    top = -np.inf
    for a in range(num_actions):
        if mask[a]:
            top = max(top, min(max(logits[a], -10000.0), 10000.0))
    total = 0.0
    for a in range(num_actions):
        if mask[a]:
            e = np.exp(min(max(logits[a], -10000.0), 10000.0) - top)
            prior[b, n, a] = e
            total += e
        else:
            prior[b, n, a] = 0.0
    for a in range(num_actions):
        prior[b, n, a] /= total


@njit(cache=True)
def init_roots(nodes, values, children, prior, minmax, root_legal, root_value, root_logits,
               root_to_play, noise, noise_fraction, known_min, known_max, discount):
    """Resets every row to a root expanded with the model's output and backs its value up once.

    Shapes: nodes [B, N, 4] int32, values [B, N, 4] f64, children [B, N, A] int32,
    prior [B, N, A] f64, minmax [B, 2] f64, root_legal [B, A] bool, root_value [B],
    root_logits [B, A], root_to_play [B] int32, noise [B, A] f64 (unused if noise_fraction == 0).
    """
    for b in range(nodes.shape[0]):
        nodes[b, :, VISITS] = 0
        nodes[b, :, PARENT] = -1
        nodes[b, :, ACTION] = -1
        nodes[b, :, TO_PLAY] = 0
        values[b, :, :] = 0.0
        values[b, :, EXACT] = np.nan
        children[b, :, :] = -1
        minmax[b, MIN] = known_min
        minmax[b, MAX] = known_max
        nodes[b, 0, TO_PLAY] = root_to_play[b]
        values[b, 0, RAW_VALUE] = root_value[b]
        _set_priors(prior, b, 0, root_logits[b], root_legal[b])
        _backup(nodes, values, minmax, b, 0, root_value[b], discount)
        if noise_fraction > 0.0:
            for a in range(prior.shape[2]):
                if root_legal[b, a]:
                    prior[b, 0, a] = (prior[b, 0, a] * (1.0 - noise_fraction)
                                      + noise[b, a] * noise_fraction)


@njit(cache=True)
def select_leaves(nodes, values, children, prior, minmax, root_legal, discount, pb_c_base,
                  pb_c_init, exploration_constant, known_min, known_max, min_span, depth_cap,
                  start_node, out_parent, out_action, out_revisit, max_depth):
    """Walks row ``b`` from ``start_node[b]`` (the root, or the root child Gumbel picked) down
    to an unexpanded edge, choosing by the reference's ``ucb_score`` (ties: largest action).
    With ``depth_cap`` > 0 the walk never goes below that depth: a walk that reaches an expanded
    node at the cap stops there and ``out_revisit[b]`` names that node (-1 otherwise), whose
    value :func:`expand_and_backup` then backs up once more instead of expanding anything.
    A move with a proven value scores with that value; with known bounds (``known_min <
    known_max``) a move proven to reach ``known_max`` is always taken and one proven to reach
    ``known_min`` only when nothing else is left.

    Values are normalised by the tree's min-max bounds, over a span of at least ``min_span``
    (so that a tree whose values barely differ does not blow noise up to the whole [0, 1]).
    Writes out_parent [B] (node whose edge is taken) and out_action [B], and raises max_depth [B]
    to the depth of the new node. Illegal actions (root mask, prior -1 below) are never taken.
    """
    num_actions = children.shape[2]
    for b in range(nodes.shape[0]):
        lo = minmax[b, MIN]
        hi = minmax[b, MAX]
        scale = max(hi - lo, min_span)
        out_revisit[b] = -1
        node = start_node[b]
        if node == -1:
            continue
        depth = 0 if node == 0 else 1
        while True:
            if depth_cap > 0 and depth >= depth_cap:  # an expanded node at the cap: revisit it
                out_revisit[b] = node
                out_parent[b] = nodes[b, node, PARENT]
                out_action[b] = nodes[b, node, ACTION]
                break
            parent_visits = nodes[b, node, VISITS]
            pb_c = np.log((parent_visits + pb_c_base + 1.0) / pb_c_base) + pb_c_init
            sqrt_parent = np.sqrt(parent_visits)
            log_parent = np.log(parent_visits)
            parent_value = values[b, node, VALUE_SUM] / parent_visits
            if hi > lo:
                parent_value = (parent_value - lo) / scale
            best_action = -1
            best_score = -np.inf
            for a in range(num_actions):
                if node == 0 and not root_legal[b, a]:
                    continue
                if prior[b, node, a] < 0.0:  # illegal below the root (simulator search)
                    continue
                child = children[b, node, a]
                child_visits = 0 if child == -1 else nodes[b, child, VISITS]
                prior_score = pb_c * (sqrt_parent / (child_visits + 1)) * prior[b, node, a]
                if child_visits > 0:
                    exact = values[b, child, EXACT]
                    proven = not np.isnan(exact)
                    child_value = exact if proven else values[b, child, VALUE_SUM] / child_visits
                    value_score = _move_value(nodes, values, b, node, child, child_value,
                                              discount)
                    if proven and known_min < known_max:
                        if value_score >= known_max:
                            value_score = np.inf
                        elif value_score <= known_min:
                            value_score = -np.inf
                    if hi > lo:
                        value_score = (value_score - lo) / scale
                else:
                    value_score = parent_value
                score = prior_score + value_score + exploration_constant * np.sqrt(
                    2.0 * log_parent / (child_visits + 1))
                if score >= best_score:
                    best_score = score
                    best_action = a
            depth += 1
            child = children[b, node, best_action]
            if child == -1:
                out_parent[b] = node
                out_action[b] = best_action
                max_depth[b] = max(max_depth[b], depth)
                break
            node = child


@njit(cache=True)
def expand_and_backup(nodes, values, children, prior, minmax, new_node, parent, action, revisit,
                      reward, value, logits, num_players, discount, legal, terminal, root_legal,
                      known_max):
    """Attaches node ``new_node`` under ``parent[b]`` via ``action[b]`` in every row, sets its
    reward and priors from the model's output (reward [B], value [B], logits [B, A]) and backs
    ``value`` up to the root. ``legal`` [B, A] holds the new nodes' legal actions (all True for
    a learned model); an illegal action gets the prior -1, which selection skips. ``terminal``
    [B] marks new nodes that are final states (all False unless the search proves values): they
    are proven worth 0 and the proof is carried up (:func:`_prove_upwards`). A row whose walk
    stopped at the depth cap (``revisit[b]`` >= 0) attaches nothing: the model's output for it
    is dropped and the revisited node's own value is backed up again."""
    for b in range(nodes.shape[0]):
        if revisit[b] >= 0:
            _backup(nodes, values, minmax, b, revisit[b], values[b, revisit[b], RAW_VALUE],
                    discount)
            continue
        p = parent[b]
        children[b, p, action[b]] = new_node
        nodes[b, new_node, PARENT] = p
        nodes[b, new_node, ACTION] = action[b]
        nodes[b, new_node, TO_PLAY] = (nodes[b, p, TO_PLAY] + 1) % num_players
        values[b, new_node, REWARD] = reward[b]
        values[b, new_node, RAW_VALUE] = value[b]
        _set_priors(prior, b, new_node, logits[b], legal[b])
        for a in range(legal.shape[1]):
            if not legal[b, a]:
                prior[b, new_node, a] = -1.0
        _backup(nodes, values, minmax, b, new_node, value[b], discount)
        if terminal[b] and np.isnan(values[b, p, EXACT]):
            values[b, new_node, EXACT] = 0.0
            _prove_upwards(nodes, values, children, prior, root_legal, b, p, discount, known_max)


@njit(cache=True)
def _move_value(nodes, values, b, node, child, child_value, discount):
    """Value of the move from ``node`` to ``child`` for the player to move at ``node``, given
    ``child_value`` for the player to move at ``child``: reward + discount * signed value."""
    if nodes[b, child, TO_PLAY] != nodes[b, node, TO_PLAY]:
        child_value = -child_value
    return values[b, child, REWARD] + discount * child_value


@njit(cache=True)
def _prove_upwards(nodes, values, children, prior, root_legal, b, node, discount, known_max):
    """Proves ``node`` and its ancestors while possible: a node is worth its best move once every
    legal move is proven, or ``known_max`` as soon as one move is proven to reach it."""
    num_actions = children.shape[2]
    while node != -1 and np.isnan(values[b, node, EXACT]):
        best = -np.inf
        all_proven = True
        for a in range(num_actions):
            if (root_legal[b, a] if node == 0 else prior[b, node, a] >= 0.0):
                child = children[b, node, a]
                if child == -1 or np.isnan(values[b, child, EXACT]):
                    all_proven = False
                    continue
                best = max(best, _move_value(nodes, values, b, node, child,
                                             values[b, child, EXACT], discount))
        if not (all_proven or best >= known_max):
            return
        values[b, node, EXACT] = best
        node = nodes[b, node, PARENT]


# ---- Gumbel MuZero root selection (compiled only when used) ----

@njit(cache=True)
def completed_q(nodes, values, children, prior, minmax, root_legal, discount, rescale_children,
                min_span, out):
    """Normalised completed Q-values at the roots (Gumbel MuZero), out [B, A]: visited children
    keep reward + discount * value, unvisited ones get the mixed value ``v_mix``. They are
    rescaled to [0, 1] by the tree's min-max bounds, or with ``rescale_children`` by the least
    and greatest completed Q of the root's legal moves (as mctx does: the best move always
    gets 1 and the worst 0, whatever the values' scale; all 0 when they are equal). Either
    span is taken as at least ``min_span``: differences smaller than it stay small."""
    num_actions = children.shape[2]
    for b in range(nodes.shape[0]):
        root_player = nodes[b, 0, TO_PLAY]
        visited_prior = 0.0
        weighted_q = 0.0
        total_child_visits = 0
        for a in range(num_actions):
            child = children[b, 0, a]
            out[b, a] = np.nan
            if child != -1 and nodes[b, child, VISITS] > 0:
                child_value = values[b, child, VALUE_SUM] / nodes[b, child, VISITS]
                if nodes[b, child, TO_PLAY] != root_player:
                    child_value = -child_value
                q = values[b, child, REWARD] + discount * child_value
                out[b, a] = q
                visited_prior += prior[b, 0, a]
                weighted_q += prior[b, 0, a] * q
                total_child_visits += nodes[b, child, VISITS]
        v_mix = values[b, 0, RAW_VALUE]
        if visited_prior > 0.0:
            v_mix = (v_mix + total_child_visits * weighted_q / visited_prior) / \
                (1.0 + total_child_visits)
        for a in range(num_actions):
            if np.isnan(out[b, a]):
                out[b, a] = v_mix
        if rescale_children:
            lo = np.inf
            hi = -np.inf
            for a in range(num_actions):
                if root_legal[b, a]:
                    lo = min(lo, out[b, a])
                    hi = max(hi, out[b, a])
            span = max(hi - lo, min_span, 1e-8)
        elif minmax[b, MAX] > minmax[b, MIN]:
            lo = minmax[b, MIN]
            span = max(minmax[b, MAX] - lo, min_span)
        else:  # no bounds yet: the values as they are
            lo = 0.0
            span = 1.0
        for a in range(num_actions):
            out[b, a] = (out[b, a] - lo) / span if root_legal[b, a] else 0.0


@njit(cache=True)
def gumbel_root_choice(nodes, values, children, prior, minmax, root_legal, discount, gumbel,
                       considered_visits, simulation, c_visit, c_scale, rescale_children, min_span,
                       scratch, out_start, out_parent, out_action, max_depth):
    """Sequential halving at the roots: row ``b`` takes, among legal actions whose visit count
    equals ``considered_visits[b, simulation]``, the one maximising gumbel + log prior +
    sigma(completed Q). Where that child exists, ``out_start[b]`` is set to it so that
    ``select_leaves`` continues below it; otherwise the new node hangs under the root and
    ``out_start[b]`` is -1."""
    completed_q(nodes, values, children, prior, minmax, root_legal, discount, rescale_children,
                min_span, scratch)
    num_actions = children.shape[2]
    for b in range(nodes.shape[0]):
        max_visits = 0
        for a in range(num_actions):
            child = children[b, 0, a]
            if child != -1:
                max_visits = max(max_visits, nodes[b, child, VISITS])
        sigma_scale = (c_visit + max_visits) * c_scale
        target = considered_visits[b, simulation]
        best_action = -1
        best_score = -np.inf
        for a in range(num_actions):
            if not root_legal[b, a]:
                continue
            child = children[b, 0, a]
            visits = 0 if child == -1 else nodes[b, child, VISITS]
            if visits != target:
                continue
            score = gumbel[b, a] + np.log(prior[b, 0, a] + 1e-30) + sigma_scale * scratch[b, a]
            if score >= best_score:
                best_score = score
                best_action = a
        if best_action == -1:  # off schedule (cannot happen with a valid table): plain pUCT
            out_start[b] = 0
            continue
        child = children[b, 0, best_action]
        out_start[b] = child
        if child == -1:
            out_parent[b] = 0
            out_action[b] = best_action
            max_depth[b] = max(max_depth[b], 1)
