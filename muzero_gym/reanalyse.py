"""MuZero Reanalyze: fresh targets for sampled positions from a new search with a recent network.

For a random ``fraction`` of the batch, the states the value targets bootstrap from are searched
again with the given network (the learner's target network), and the targets become
``reward_sum + bootstrap_scale * fresh root value``. With ``refresh_policy`` the unrolled
positions themselves are searched too and their policy targets replaced by the fresh search
policies. Old self-play data thus keeps teaching what the current model would do.
"""

from __future__ import annotations

import numpy as np
import torch

from muzero_gym.inference import ModelSearchAdapter
from muzero_gym.mcts import BatchedMCTS
from muzero_gym.networks import MuZeroNetwork
from muzero_gym.replay import Batch, SearchInputs
from muzero_gym.stops import deferred_stops


def _search(network: MuZeroNetwork, search: BatchedMCTS, inputs: SearchInputs,
            mask: np.ndarray, rng: np.random.Generator):
    """Searches the states where ``mask`` [B, K + 1] is True; returns their (row, step) indices
    and the search result."""
    rows, steps = np.nonzero(mask)
    if rows.size == 0:
        return rows, steps, None
    adapter = ModelSearchAdapter(network, search.settings.num_simulations)
    root_value, root_logits = adapter.initial(inputs.observations[rows, steps])
    result = search.run(root_value, root_logits, adapter.recurrent_fn,
                        inputs.legal_action_mask[rows, steps], inputs.to_play[rows, steps], rng,
                        add_noise=False)
    return rows, steps, result


@deferred_stops()
@torch.inference_mode()
def reanalyse(batch: Batch, network: MuZeroNetwork, search: BatchedMCTS, fraction: float,
              rng: np.random.Generator, refresh_policy: bool = False,
              refresh_values: bool = True) -> int:
    """Replaces targets of about ``fraction`` of the batch in place; returns the rows changed.

    ``refresh_values=False`` leaves the value targets (and their searches) out, for a learner
    that bootstraps every value from its target network. The batch must be sampled with
    ``with_bootstrap_inputs=True`` (and ``with_unrolled_inputs=True`` for ``refresh_policy``).
    """
    if fraction <= 0.0:
        return 0
    if batch.bootstrap is None or (refresh_policy and batch.unrolled is None):
        raise ValueError("reanalyse needs batches sampled with with_bootstrap_inputs=True "
                         "(and with_unrolled_inputs=True to refresh policies)")
    was_training = network.training
    network.eval()
    try:
        chosen = rng.random(batch.observations.shape[0]) < fraction
        if refresh_values:
            rows, steps, result = _search(network, search, batch.bootstrap,
                                          batch.bootstrap.valid & chosen[:, None], rng)
            if result is not None:
                batch.target_value[rows, steps] = (batch.reward_sum[rows, steps]
                                                   + batch.bootstrap_scale[rows, steps]
                                                   * result.root_value)
        if refresh_policy:
            # np.asarray: on a GPU learner the mask may already be a pinned host tensor
            mask = batch.unrolled.valid & np.asarray(batch.policy_mask) & chosen[:, None]
            rows, steps, result = _search(network, search, batch.unrolled, mask, rng)
            if result is not None:
                batch.target_policy[rows, steps] = result.search_policy
    finally:
        network.train(was_training)
    return int(chosen.sum())
