"""A straightforward, object-per-node port of the reference pseudocode's MCTS, kept as an oracle.

It follows ``run_mcts`` / ``select_child`` / ``ucb_score`` / ``expand_node`` / ``backpropagate``
line by line. For two players it uses the package's convention (a node's reward is seen by the
player who took the action; the value term and the backed-up value change sign between players).
The tests compare the batched search against it; the speed benchmark times it.
"""

from __future__ import annotations

import math

import numpy as np


class MinMaxStats:
    def __init__(self, known_bounds):
        self.maximum = known_bounds[1] if known_bounds else -math.inf
        self.minimum = known_bounds[0] if known_bounds else math.inf

    def update(self, value):
        self.maximum = max(self.maximum, value)
        self.minimum = min(self.minimum, value)

    def normalize(self, value):
        if self.maximum > self.minimum:
            return (value - self.minimum) / (self.maximum - self.minimum)
        return value


class Node:
    def __init__(self, prior):
        self.visit_count = 0
        self.to_play = -1
        self.prior = prior
        self.value_sum = 0.0
        self.children = {}
        self.reward = 0.0
        self.path = ()

    def expanded(self):
        return len(self.children) > 0

    def value(self):
        if self.visit_count == 0:
            return 0.0
        return self.value_sum / self.visit_count


def ucb_score(settings, parent, child, min_max_stats):
    pb_c = math.log((parent.visit_count + settings.pb_c_base + 1) / settings.pb_c_base)
    pb_c += settings.pb_c_init
    pb_c *= math.sqrt(parent.visit_count) / (child.visit_count + 1)
    prior_score = pb_c * child.prior
    if child.visit_count > 0:
        child_value = child.value()
        if parent.to_play != child.to_play:
            child_value = -child_value
        value_score = min_max_stats.normalize(child.reward + settings.discount * child_value)
    else:
        value_score = min_max_stats.normalize(parent.value())
    exploration_score = settings.exploration_constant * math.sqrt(
        2 * math.log(parent.visit_count) / (child.visit_count + 1))
    return prior_score + value_score + exploration_score


def select_child(settings, node, min_max_stats):
    _, action, child = max((ucb_score(settings, node, child, min_max_stats), action, child)
                           for action, child in node.children.items())
    return action, child


def expand_node(node, to_play, actions, reward, logits, path):
    node.to_play = to_play
    node.reward = reward
    node.path = path
    policy = np.clip(np.array([logits[a] for a in actions], dtype=np.float64), -10000, 10000)
    policy = np.exp(policy - policy.max())
    total = policy.sum()
    for i, a in enumerate(actions):
        node.children[a] = Node(policy[i] / total)


def backpropagate(search_path, value, to_play, discount, min_max_stats):
    for i in range(len(search_path) - 1, -1, -1):
        node = search_path[i]
        node.value_sum += value if node.to_play == to_play else -value
        node.visit_count += 1
        min_max_stats.update(node.value())
        if i > 0:
            reward = node.reward if search_path[i - 1].to_play == to_play else -node.reward
            value = reward + discount * value


def reference_search(settings, root_value, root_logits, recurrent_fn, legal=None, to_play=0,
                     noise=None, rng=None):
    """One search from one root. ``recurrent_fn(parent_path, action, node_index)`` returns
    (reward, value, logits) for the node reached by ``parent_path + (action,)``.

    Returns (visit counts [A], root value)."""
    num_actions = len(root_logits)
    actions = [a for a in range(num_actions) if legal is None or legal[a]]
    min_max_stats = MinMaxStats(settings.known_bounds)
    root = Node(0)
    expand_node(root, to_play, actions, 0.0, root_logits, ())
    backpropagate([root], root_value, to_play, settings.discount, min_max_stats)
    if noise is not None:
        frac = settings.root_exploration_fraction
        for a in actions:
            root.children[a].prior = root.children[a].prior * (1 - frac) + noise[a] * frac
    for simulation in range(settings.num_simulations):
        node = root
        search_path = [node]
        while node.expanded():
            action, node = select_child(settings, node, min_max_stats)
            search_path.append(node)
        parent = search_path[-2]
        reward, value, logits = recurrent_fn(parent.path, action, simulation + 1)
        player = (parent.to_play + 1) % settings.num_players
        expand_node(node, player, list(range(num_actions)), reward, logits,
                    parent.path + (action,))
        backpropagate(search_path, value, player, settings.discount, min_max_stats)
    counts = np.array([root.children[a].visit_count if a in root.children else 0
                       for a in range(num_actions)])
    return counts, root.value()
