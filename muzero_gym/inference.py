"""Glue between a PyTorch MuZero network and the torch-free batched search.

:class:`ModelSearchAdapter` runs the initial inference for B observations, keeps every hidden
state of the search in one preallocated tensor ``[B, num_simulations + 1, ...]`` and exposes
``recurrent_fn(parent_index, action, node_index)`` as the search expects, so the tree code never
sees a tensor. :func:`plan` does a whole batched search for a batch of observations.
"""

from __future__ import annotations

import numpy as np
import torch

from muzero_gym.mcts import BatchedMCTS, SearchResult
from muzero_gym.networks import MuZeroNetwork


class ModelSearchAdapter:
    """Serves one search at a time: call :meth:`initial`, then pass :meth:`recurrent_fn`."""

    def __init__(self, network: MuZeroNetwork, num_simulations: int,
                 device: torch.device | str = "cpu"):
        self.network = network
        self.num_nodes = num_simulations + 1
        self.device = torch.device(device)
        self._hidden: torch.Tensor | None = None
        self._rows: torch.Tensor | None = None

    @torch.inference_mode()
    def initial(self, observations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Root values [B] and policy logits [B, A]; stores the root hidden states."""
        obs = torch.as_tensor(observations, device=self.device)
        out = self.network.initial_inference(obs)
        batch = obs.shape[0]
        shape = (batch, self.num_nodes, *out.hidden.shape[1:])
        if self._hidden is None or self._hidden.shape != shape:
            self._hidden = torch.empty(shape, dtype=out.hidden.dtype, device=self.device)
            self._rows = torch.arange(batch, device=self.device)
        self._hidden[:, 0] = out.hidden
        value = self.network.value_scalar(out.value_logits)
        return value.double().cpu().numpy(), out.policy_logits.double().cpu().numpy()

    @torch.inference_mode()
    def recurrent_fn(self, parent_index: np.ndarray, action: np.ndarray,
                     node_index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Dynamics + prediction from the parents' hidden states; stores the new ones."""
        assert self._hidden is not None and self._rows is not None, "call initial() first"
        parents = torch.as_tensor(parent_index, device=self.device, dtype=torch.long)
        actions = torch.as_tensor(action, device=self.device, dtype=torch.long)
        out = self.network.recurrent_inference(self._hidden[self._rows, parents], actions)
        self._hidden[:, node_index] = out.hidden
        reward = self.network.reward_scalar(out.reward_logits)
        value = self.network.value_scalar(out.value_logits)
        return (reward.double().cpu().numpy(), value.double().cpu().numpy(),
                out.policy_logits.double().cpu().numpy())


def plan(network: MuZeroNetwork, search: BatchedMCTS, observations: np.ndarray,
         legal_action_mask: np.ndarray | None = None, to_play: np.ndarray | None = None,
         rng: np.random.Generator | None = None, add_noise: bool = True,
         device: torch.device | str = "cpu") -> SearchResult:
    """One batched search from observations [B, ...] with ``network`` in eval mode."""
    was_training = network.training
    network.eval()
    try:
        adapter = ModelSearchAdapter(network, search.settings.num_simulations, device)
        root_value, root_logits = adapter.initial(observations)
        return search.run(root_value, root_logits, adapter.recurrent_fn, legal_action_mask,
                          to_play, rng, add_noise)
    finally:
        network.train(was_training)
