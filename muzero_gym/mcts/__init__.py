"""Batched Monte Carlo tree search over preallocated arrays (no torch inside)."""

from muzero_gym.mcts.search import (
    BatchedMCTS,
    RecurrentFn,
    SearchResult,
    SearchSettings,
    considered_visit_table,
    select_actions,
)

__all__ = ["BatchedMCTS", "RecurrentFn", "SearchResult", "SearchSettings",
           "considered_visit_table", "select_actions"]
