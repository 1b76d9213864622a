"""Batched MCTS: hand-checkable bandits, batch independence, agreement with the reference port."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from reference_mcts import reference_search

from muzero_gym.mcts import (
    BatchedMCTS,
    SearchResult,
    SearchSettings,
    considered_visit_table,
    select_actions,
    tree,
)


class PathModel:
    """Deterministic random model outputs keyed by the action path from the root, so two
    searches that expand the same nodes see the same outputs whatever their node numbering."""

    def __init__(self, num_actions: int, seed: int, reward_scale: float = 1.0):
        self.num_actions = num_actions
        self.seed = seed
        self.reward_scale = reward_scale
        self.cache: dict[tuple, tuple] = {}

    def output(self, path: tuple) -> tuple[float, float, np.ndarray]:
        if path not in self.cache:
            rng = np.random.default_rng([self.seed, len(path), *path])
            self.cache[path] = (float(rng.normal() * self.reward_scale), float(rng.normal()),
                                rng.normal(size=self.num_actions) * 2.0)
        return self.cache[path]


class BatchedPathCallback:
    """recurrent_fn for BatchedMCTS over one PathModel per row."""

    def __init__(self, models: list[PathModel], num_nodes: int):
        self.models = models
        self.paths = [[()] + [None] * (num_nodes - 1) for _ in models]

    def __call__(self, parent, action, node_index):
        outs = []
        for b, model in enumerate(self.models):
            path = self.paths[b][parent[b]] + (int(action[b]),)
            self.paths[b][node_index] = path
            outs.append(model.output(path))
        rewards, values, logits = zip(*outs)
        return np.array(rewards), np.array(values), np.stack(logits)


def run_batched(settings, models, root_values, root_logits, legal=None, to_play=None):
    search = BatchedMCTS(settings, models[0].num_actions)
    callback = BatchedPathCallback(models, settings.num_simulations + 1)
    return search.run(np.array(root_values), np.stack(root_logits), callback, legal, to_play,
                      add_noise=False)


@pytest.mark.parametrize("num_players", [1, 2])
@pytest.mark.parametrize("discount", [1.0, 0.9])
@pytest.mark.parametrize("known_bounds", [None, (-3.0, 3.0)])
@pytest.mark.parametrize("exploration_constant", [1.0, 0.0])
def test_visit_counts_equal_the_reference_port(num_players, discount, known_bounds,
                                               exploration_constant):
    settings = SearchSettings(num_simulations=40, discount=discount, num_players=num_players,
                              known_bounds=known_bounds,
                              exploration_constant=exploration_constant)
    num_actions, batch = 5, 6
    models = [PathModel(num_actions, seed=100 * b + 7) for b in range(batch)]
    rng = np.random.default_rng(3)
    legal = rng.random((batch, num_actions)) < 0.7
    legal[:, 0] = True
    to_play = rng.integers(0, num_players, size=batch)
    root_values = [m.output(())[1] for m in models]
    root_logits = [m.output(())[2] for m in models]
    result = run_batched(settings, models, root_values, root_logits, legal, to_play)
    for b, model in enumerate(models):
        counts, value = reference_search(
            settings, root_values[b], root_logits[b],
            lambda path, a, i, model=model: model.output(path + (a,)),
            legal=legal[b], to_play=int(to_play[b]))
        np.testing.assert_array_equal(result.visit_counts[b], counts, err_msg=f"row {b}")
        assert result.root_value[b] == pytest.approx(value, rel=1e-12, abs=1e-12)


def bandit_fn(arm_rewards):
    """One-step bandit: reward of the arm taken at the root, nothing afterwards."""
    arm_rewards = np.asarray(arm_rewards, dtype=float)

    def recurrent_fn(parent, action, node_index):
        batch = parent.shape[0]
        reward = np.where(parent == 0, arm_rewards.reshape(batch, -1)[np.arange(batch), action],
                          0.0)
        return reward, np.zeros(batch), np.zeros((batch, arm_rewards.shape[-1]))

    return recurrent_fn


def test_bandit_search_prefers_the_best_arm():
    settings = SearchSettings(num_simulations=100, discount=1.0, exploration_constant=0.0)
    search = BatchedMCTS(settings, 4)
    arms = np.array([[0.1, 0.9, 0.3, 0.5]])
    result = search.run(np.zeros(1), np.zeros((1, 4)), bandit_fn(arms), add_noise=False)
    assert result.visit_counts.sum() == 100
    assert result.visit_counts[0].argmax() == 1
    assert result.visit_counts[0, 1] > 50
    assert result.qvalues[0, 1] == pytest.approx(0.9)
    np.testing.assert_allclose(result.search_policy.sum(axis=1), 1.0)


def test_first_simulation_breaks_ties_towards_the_largest_action():
    settings = SearchSettings(num_simulations=1, exploration_constant=0.0)
    result = BatchedMCTS(settings, 3).run(np.zeros(1), np.zeros((1, 3)), bandit_fn([[0, 0, 0]]),
                                          add_noise=False)
    np.testing.assert_array_equal(result.visit_counts, [[0, 0, 1]])


def test_rows_are_independent_and_respect_their_masks():
    settings = SearchSettings(num_simulations=30, discount=1.0)
    arms = np.array([[0.1, 0.9, 0.3, 0.5], [0.8, 0.1, 0.1, 0.1], [0.2, 0.2, 0.2, 0.9]])
    masks = np.array([[True, False, True, True], [True, True, True, True],
                      [False, False, True, False]])
    logits = np.random.default_rng(0).normal(size=(3, 4))
    together = BatchedMCTS(settings, 4).run(np.zeros(3), logits, bandit_fn(arms), masks,
                                            add_noise=False)
    for b in range(3):
        alone = BatchedMCTS(settings, 4).run(np.zeros(1), logits[b:b + 1],
                                             bandit_fn(arms[b:b + 1]), masks[b:b + 1],
                                             add_noise=False)
        np.testing.assert_array_equal(together.visit_counts[b], alone.visit_counts[0])
        assert together.root_value[b] == alone.root_value[0]
    assert (together.visit_counts[~masks] == 0).all()
    np.testing.assert_array_equal(together.visit_counts[2], [0, 0, 30, 0])


def test_noise_is_deterministic_under_a_seed():
    settings = SearchSettings(num_simulations=25, dirichlet_alpha=0.3)
    model = PathModel(6, seed=1)
    root_logits = np.stack([model.output(())[2]] * 4)

    def run(seed):
        callback = BatchedPathCallback([model] * 4, 26)
        return BatchedMCTS(settings, 6).run(np.zeros(4), root_logits, callback,
                                            rng=np.random.default_rng(seed)).visit_counts

    np.testing.assert_array_equal(run(5), run(5))
    assert not np.array_equal(run(5), run(6))


def test_two_player_search_backs_up_values_with_alternating_signs():
    # Player 0 picks an arm at the root (reward 0); player 1 then moves and receives c[arm].
    # Whatever player 1 gains, player 0 loses: Q(arm) for player 0 must be negative where c > 0
    # and the search must prefer the arm that gives player 1 the least.
    settings = SearchSettings(num_simulations=200, discount=1.0, num_players=2,
                              exploration_constant=0.0)
    c = np.array([0.5, -0.4, 0.9])
    depth = {0: 0}

    def recurrent_fn(parent, action, node_index):
        depth[node_index] = depth[int(parent[0])] + 1
        arm = action[0] if depth[node_index] == 1 else None
        if depth[node_index] == 2:
            path_arm = arm_of[int(parent[0])]
            reward = np.array([c[path_arm]])
        else:
            reward = np.zeros(1)
        if arm is not None:
            arm_of[node_index] = int(arm)
        return reward, np.zeros(1), np.zeros((1, 3))

    arm_of: dict[int, int] = {}
    result = BatchedMCTS(settings, 3).run(np.zeros(1), np.zeros((1, 3)), recurrent_fn,
                                          add_noise=False)
    assert result.visit_counts[0].argmax() == 1
    visited = result.visit_counts[0] > 1
    np.testing.assert_array_equal(np.sign(result.qvalues[0, visited]), -np.sign(c[visited]))


def test_gumbel_root_selection_finds_the_best_arm_and_returns_an_improved_policy():
    settings = SearchSettings(num_simulations=16, discount=1.0, root_selection="gumbel",
                              gumbel_num_considered=4)
    arms = np.array([[0.1, 0.9, 0.3, 0.5, 0.0, 0.2]])
    legal = np.array([[True, True, True, True, False, True]])
    result = BatchedMCTS(settings, 6).run(np.zeros(1), np.zeros((1, 6)), bandit_fn(arms), legal,
                                          rng=np.random.default_rng(0), add_noise=False)
    assert result.gumbel_action[0] == 1
    assert result.visit_counts[0, 4] == 0
    assert result.visit_counts.sum() == 16
    np.testing.assert_allclose(result.search_policy.sum(), 1.0)
    assert result.search_policy[0, 4] == 0.0
    assert result.search_policy[0].argmax() == 1


@pytest.mark.parametrize("scale", [1.0, 1000.0])
def test_gumbel_policy_with_children_rescaled_q_is_mctx_sigma_of_zero_and_one(scale):
    # Two arms worth 0.50 and 0.51 (times scale), 8 simulations: 4 visits each. Rescaled by the
    # root moves' own bounds the completed Q-values are exactly 0 and 1 whatever their scale,
    # so the policy is softmax(log 0.5 + (50 + 4) * 0.1 * [0, 1]).
    arms = np.array([[0.50, 0.51]]) * scale
    settings = SearchSettings(num_simulations=8, discount=1.0, root_selection="gumbel",
                              gumbel_c_scale=0.1, gumbel_q_rescale="children")
    result = BatchedMCTS(settings, 2).run(np.zeros(1), np.zeros((1, 2)), bandit_fn(arms),
                                          add_noise=False)
    assert result.visit_counts[0].tolist() == [4, 4]
    sigma = (50 + 4) * 0.1
    np.testing.assert_allclose(result.search_policy[0],
                               [1 / (1 + np.exp(sigma)), np.exp(sigma) / (1 + np.exp(sigma))],
                               rtol=1e-12)
    # Rescaled by the tree's bounds (the root's value 0 and the arms' 0.50-0.51) the same
    # 0.01 is 2% of the range: a far softer target.
    tree_scaled = BatchedMCTS(dataclasses.replace(settings, gumbel_q_rescale="tree"), 2).run(
        np.zeros(1), np.zeros((1, 2)), bandit_fn(arms), add_noise=False)
    assert 0.5 < tree_scaled.search_policy[0, 1] < 0.6


@pytest.mark.parametrize("rescale", ["tree", "children"])
def test_min_value_span_keeps_tiny_value_differences_small(rescale):
    # Root worth 0.5, the states after the two moves worth 0.500 and 0.501 (no reward): every
    # value in the tree lies in [0.5, 0.501], so either rescale maps the moves to 0 and 1
    # (policy softmax(log 0.5 + 5.4 x [0, 1])). With a least span of 0.01 they map to 0 and
    # 0.1: softmax(log 0.5 + 5.4 x [0, 0.1]).
    worth = np.array([0.500, 0.501])
    root_move = {}  # node -> the root move above it; every state below a move is worth the same

    def recurrent_fn(parent, action, node_index):
        root_move[node_index] = int(action[0]) if parent[0] == 0 else root_move[int(parent[0])]
        return np.zeros(1), worth[[root_move[node_index]]], np.zeros((1, 2))

    settings = SearchSettings(num_simulations=8, discount=1.0, root_selection="gumbel",
                              gumbel_c_scale=0.1, gumbel_q_rescale=rescale)
    sigma = (50 + 4) * 0.1
    for min_span, gap in ((0.0, 1.0), (0.01, 0.1)):
        result = BatchedMCTS(dataclasses.replace(settings, min_value_span=min_span), 2).run(
            np.full(1, 0.5), np.zeros((1, 2)), recurrent_fn, add_noise=False)
        assert result.visit_counts[0].tolist() == [4, 4]
        odds = np.exp(sigma * gap)
        np.testing.assert_allclose(result.search_policy[0], [1 / (1 + odds), odds / (1 + odds)],
                                   rtol=1e-9)


def test_min_value_span_leaves_wide_trees_alone():
    model = PathModel(5, seed=3, reward_scale=2.0)
    settings = SearchSettings(num_simulations=30, discount=0.9)
    base = run_batched(settings, [model], [0.3], [np.zeros(5)])
    floored = run_batched(dataclasses.replace(settings, min_value_span=0.01), [model], [0.3],
                          [np.zeros(5)])
    np.testing.assert_array_equal(base.visit_counts, floored.visit_counts)
    with pytest.raises(ValueError, match="min_value_span"):
        SearchSettings(min_value_span=-0.1)


def node_depths(search: BatchedMCTS, row: int, num_nodes: int) -> np.ndarray:
    """Depth of each of the last search's nodes 0..num_nodes-1 of ``row`` (-1: not attached)."""
    nodes = search._nodes[row]
    depths = np.full(num_nodes, -1)
    depths[0] = 0
    for n in range(1, num_nodes):  # a parent is always expanded before its children
        parent = nodes[n, tree.PARENT]
        if parent >= 0 and search._children[row, parent, nodes[n, tree.ACTION]] == n:
            depths[n] = depths[parent] + 1
    return depths


@pytest.mark.parametrize("root_selection", ["puct", "gumbel"])
@pytest.mark.parametrize("cap", [1, 2, 3])
def test_max_depth_keeps_every_node_within_the_cap(root_selection, cap):
    models = [PathModel(3, seed=s) for s in range(4)]
    settings = SearchSettings(num_simulations=40, discount=0.9, root_selection=root_selection,
                              max_depth=cap)
    search = BatchedMCTS(settings, 3)
    callback = BatchedPathCallback(models, settings.num_simulations + 1)
    result = search.run(np.zeros(4), np.zeros((4, 3)), callback, rng=np.random.default_rng(1))
    assert (result.max_depth == cap).all()
    for row in range(4):
        depths = node_depths(search, row, settings.num_simulations + 1)
        assert depths.max() == cap
        assert (search._children[row][depths == cap] == -1).all()
        # Every simulation still counts: the root and its children carry all the visits.
        assert search._nodes[row, 0, tree.VISITS] == settings.num_simulations + 1
        assert result.visit_counts[row].sum() == settings.num_simulations
        # A node's visits are its own value plus those of the walks through it.
        attached = depths >= 0
        for n in np.flatnonzero(attached & (depths < cap)):
            kids = search._children[row, n]
            assert (search._nodes[row, n, tree.VISITS]
                    >= 1 + search._nodes[row, kids[kids >= 0], tree.VISITS].sum())


def test_max_depth_one_backs_each_root_move_up_as_a_bandit():
    # Cap 1: every simulation backs up reward + discount * value of a root child, and each child
    # keeps its own value however often it is revisited.
    rewards, values = np.array([0.5, -0.2]), np.array([0.1, 0.8])

    def recurrent_fn(parent, action, node_index):
        assert (parent == 0).all()
        return rewards[action], values[action], np.zeros((len(action), 2))

    settings = SearchSettings(num_simulations=30, discount=0.9, max_depth=1)
    result = BatchedMCTS(settings, 2).run(np.array([0.3]), np.zeros((1, 2)), recurrent_fn,
                                          add_noise=False)
    q = rewards + 0.9 * values
    n = result.visit_counts[0]
    assert n.sum() == 30 and (n > 0).all()
    np.testing.assert_allclose(result.qvalues[0], q, rtol=1e-12)
    np.testing.assert_allclose(result.root_value[0], (0.3 + (n * q).sum()) / 31, rtol=1e-12)


def test_max_depth_beyond_the_tree_changes_nothing():
    model = PathModel(4, seed=5)
    settings = SearchSettings(num_simulations=30, discount=0.9)
    free = run_batched(settings, [model], [0.2], [np.zeros(4)])
    capped = run_batched(dataclasses.replace(settings, max_depth=int(free.max_depth[0]) + 1),
                         [model], [0.2], [np.zeros(4)])
    np.testing.assert_array_equal(free.visit_counts, capped.visit_counts)
    np.testing.assert_array_equal(free.root_value, capped.root_value)
    lower = run_batched(dataclasses.replace(settings, max_depth=int(free.max_depth[0]) - 1),
                        [model], [0.2], [np.zeros(4)])
    assert lower.max_depth[0] == free.max_depth[0] - 1
    with pytest.raises(ValueError, match="max_depth"):
        SearchSettings(max_depth=-1)


def two_arm_gumbel_picks(temperature, rows: int = 20_000) -> np.ndarray:
    """Gumbel's pick on ``rows`` copies of a two-armed bandit (arms 0.50 and 0.51, 8
    simulations, completed Q rescaled by the children to 0 and 1, c_scale 1/54) whose improved
    policy is softmax([0, 1]): log prior + (50 + 4) / 54 x [0, 1]."""
    settings = SearchSettings(num_simulations=8, discount=1.0, root_selection="gumbel",
                              gumbel_c_scale=1 / 54, gumbel_q_rescale="children")
    arms = np.tile([0.50, 0.51], (rows, 1))
    result = BatchedMCTS(settings, 2).run(np.zeros(rows), np.zeros((rows, 2)), bandit_fn(arms),
                                          rng=np.random.default_rng(0),
                                          gumbel_temperature=temperature)
    np.testing.assert_allclose(result.search_policy[0], [1 / (1 + np.e), np.e / (1 + np.e)],
                               rtol=1e-12)
    return result.gumbel_action


@pytest.mark.parametrize("temperature", [1.0, 0.5, 0.25])
def test_gumbel_temperature_draws_from_the_sharpened_improved_policy(temperature):
    # Noise scaled by T: argmax(T g + logits) = argmax(g + logits / T), a draw from
    # softmax(logits / T); here the chance of arm 1 is sigmoid(1 / T). 20,000 draws: the
    # binomial standard deviation is at most 0.0035, the tolerance five of them.
    picks = two_arm_gumbel_picks(np.full(20_000, temperature))
    assert abs(picks.mean() - 1 / (1 + np.exp(-1 / temperature))) < 0.0175


def test_gumbel_temperature_one_is_the_papers_draw_and_zero_the_greedy_pick():
    np.testing.assert_array_equal(two_arm_gumbel_picks(np.ones(500), 500),
                                  two_arm_gumbel_picks(None, 500))
    assert (two_arm_gumbel_picks(np.zeros(500), 500) == 1).all()
    mixed = two_arm_gumbel_picks(np.array([0.0, 1.0] * 250), 500)
    assert (mixed[::2] == 1).all() and (mixed[1::2] == 0).any()


def test_gumbel_temperature_must_be_one_value_per_row_and_not_negative():
    search = BatchedMCTS(SearchSettings(num_simulations=4, root_selection="gumbel"), 2)
    for bad in (np.ones(3), np.array([1.0, -0.5])):
        with pytest.raises(ValueError, match="gumbel_temperature"):
            search.run(np.zeros(2), np.zeros((2, 2)), bandit_fn([[0, 1], [0, 1]]),
                       rng=np.random.default_rng(0), gumbel_temperature=bad)


def test_gumbel_q_rescale_must_be_tree_or_children():
    with pytest.raises(ValueError, match="gumbel_q_rescale"):
        SearchSettings(root_selection="gumbel", gumbel_q_rescale="root")


def test_greedy_actions_follow_the_gumbel_pick_else_the_most_visited():
    visits = np.array([[5, 3, 0], [0, 1, 7]], dtype=np.int32)
    common = dict(visit_counts=visits, root_value=np.zeros(2), search_policy=np.zeros((2, 3)),
                  qvalues=np.zeros((2, 3)), max_depth=np.zeros(2, dtype=np.int32))
    assert SearchResult(**common, gumbel_action=None).greedy_actions().tolist() == [0, 2]
    # Sequential halving may pick an action that is not the most visited (ties in the last round
    # are broken by score, not visits): the pick wins.
    picked = SearchResult(**common, gumbel_action=np.array([1, 2]))
    assert picked.greedy_actions().tolist() == [1, 2]


def test_gumbel_with_noise_visits_only_considered_actions():
    settings = SearchSettings(num_simulations=12, root_selection="gumbel",
                              gumbel_num_considered=2)
    arms = np.random.default_rng(1).random((8, 10))
    result = BatchedMCTS(settings, 10).run(np.zeros(8), np.zeros((8, 10)), bandit_fn(arms),
                                           rng=np.random.default_rng(2))
    assert ((result.visit_counts > 0).sum(axis=1) == 2).all()
    np.testing.assert_array_equal(result.visit_counts.max(axis=1), 6)


def test_sequential_halving_schedule():
    table = considered_visit_table(4, 16)
    # 4 actions: two rounds; first 4 actions x 2 visits, then the best 2 share the rest.
    assert table[4].tolist()[:8] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert table[1].tolist() == list(range(16))
    assert table[4].shape == (16,)


def test_select_actions_with_temperature():
    rng = np.random.default_rng(0)
    counts = np.array([[1, 5, 2, 0], [3, 3, 0, 0]])
    np.testing.assert_array_equal(select_actions(counts, 0.0, rng), [1, 0])
    draws = np.stack([select_actions(counts, 1.0, rng) for _ in range(4000)])
    freq = np.bincount(draws[:, 0], minlength=4) / 4000
    np.testing.assert_allclose(freq, [1 / 8, 5 / 8, 2 / 8, 0], atol=0.03)
    draws = np.stack([select_actions(counts, 0.5, rng) for _ in range(4000)])
    freq = np.bincount(draws[:, 0], minlength=4) / 4000
    np.testing.assert_allclose(freq, np.array([1, 25, 4, 0]) / 30, atol=0.03)


def test_bad_inputs_are_rejected():
    with pytest.raises(ValueError, match="num_simulations"):
        SearchSettings(num_simulations=-1)
    search = BatchedMCTS(SearchSettings(num_simulations=2), 3)
    with pytest.raises(ValueError, match="no legal action"):
        search.run(np.zeros(2), np.zeros((2, 3)), bandit_fn([[0, 0, 0], [0, 0, 0]]),
                   np.array([[True, False, False], [False, False, False]]))
    with pytest.raises(ValueError, match="root_logits"):
        search.run(np.zeros(2), np.zeros((2, 4)), bandit_fn([[0, 0, 0], [0, 0, 0]]))
