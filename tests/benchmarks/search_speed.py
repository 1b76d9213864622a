"""Simulations per second of the batched search with a stub model (tree cost only).

Prints a table for B in {1, 8, 64} and A in {2, 18} at 50 simulations, for muzero_gym's
BatchedMCTS and for the straightforward port of the reference pseudocode kept in the tests.

    python tests/benchmarks/search_speed.py [--simulations 50] [--repeats 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reference_mcts import reference_search  # noqa: E402

from muzero_gym.mcts import BatchedMCTS, SearchSettings  # noqa: E402


class StubModel:
    """Returns precomputed random outputs, so the timing is the search alone."""

    def __init__(self, batch: int, num_actions: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.reward = rng.normal(size=(64, batch))
        self.value = rng.normal(size=(64, batch))
        self.logits = rng.normal(size=(64, batch, num_actions))
        self.calls = 0

    def __call__(self, parent, action, node_index):
        i = self.calls % 64
        self.calls += 1
        return self.reward[i], self.value[i], self.logits[i]


def time_batched(batch: int, num_actions: int, simulations: int, repeats: int) -> float:
    search = BatchedMCTS(SearchSettings(num_simulations=simulations), num_actions)
    model = StubModel(batch, num_actions)
    rng = np.random.default_rng(0)
    root_value, root_logits = model.value[0], model.logits[0]
    search.run(root_value, root_logits, model, rng=rng)  # warm-up (loads compiled code)
    start = time.perf_counter()
    for _ in range(repeats):
        search.run(root_value, root_logits, model, rng=rng)
    return batch * simulations * repeats / (time.perf_counter() - start)


def time_reference(batch: int, num_actions: int, simulations: int, repeats: int) -> float:
    model = StubModel(batch, num_actions)
    settings = SearchSettings(num_simulations=simulations)
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for _ in range(max(1, repeats // 5)):
        for b in range(batch):
            reference_search(settings, model.value[0][b], model.logits[0][b],
                             lambda path, a, i, b=b: (model.reward[i % 64][b],
                                                      model.value[i % 64][b],
                                                      model.logits[i % 64][b]),
                             rng=rng)
    return batch * simulations * max(1, repeats // 5) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulations", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    start = time.perf_counter()
    BatchedMCTS(SearchSettings(num_simulations=2), 2).run(
        np.zeros(1), np.zeros((1, 2)), lambda p, a, i: (np.zeros(1), np.zeros(1), np.zeros((1, 2))))
    print(f"first use (compile or load cached code): {time.perf_counter() - start:.2f} s")
    print(f"{'B':>4} {'A':>4} {'muzero_gym sims/s':>18} {'reference port sims/s':>22}")
    for num_actions in (2, 18):
        for batch in (1, 8, 64):
            fast = time_batched(batch, num_actions, args.simulations, args.repeats)
            slow = time_reference(batch, num_actions, args.simulations, args.repeats)
            print(f"{batch:>4} {num_actions:>4} {fast:>18,.0f} {slow:>22,.0f}")


if __name__ == "__main__":
    main()
