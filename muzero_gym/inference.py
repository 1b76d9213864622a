"""Glue between a PyTorch MuZero network and the torch-free batched search.

:class:`ModelSearchAdapter` runs the initial inference for B observations, keeps every hidden
state of the search in one preallocated buffer ``[B, num_simulations + 1, ...]`` and exposes
``recurrent_fn(parent_index, action, node_index)`` as the search expects, so the tree code never
sees a tensor. MLP networks on the CPU run through a compiled snapshot of their weights; other
networks through :func:`~muzero_gym.networks.inference_network` (batch norm folded), in the
number format of ``model.search_precision`` (:func:`~muzero_gym.networks.search_dtype`), on the
device that holds the network's weights: observations and actions are moved there, results come
back as NumPy arrays.
:func:`plan` does a whole batched search for a batch of observations.
"""

from __future__ import annotations

import numpy as np
import torch

from muzero_gym.mcts import BatchedMCTS, SearchResult
from muzero_gym.networks import MuZeroNetwork, inference_network, search_dtype
from muzero_gym.numpy_inference import NumpyMLP


class ModelSearchAdapter:
    """Serves one search at a time: call :meth:`initial`, then pass :meth:`recurrent_fn`.

    An MLP network on the CPU runs through its compiled snapshot (:mod:`numpy_inference`), which
    is several times cheaper per call at self-play batch sizes; call :meth:`refresh` after the
    network's weights change. Other networks run in PyTorch on the network's device, through
    :func:`~muzero_gym.networks.inference_network` (batch norm folded into the convolutions)
    when ``network`` is in eval mode; :meth:`refresh` retakes that copy too.
    """

    def __init__(self, network: MuZeroNetwork, num_simulations: int, use_numpy: bool = True):
        self.network = network
        self.num_nodes = num_simulations + 1
        self.use_numpy = use_numpy
        self._hidden: torch.Tensor | np.ndarray | None = None
        self._rows: torch.Tensor | np.ndarray | None = None
        self._numpy: NumpyMLP | None = None
        self._model: MuZeroNetwork = network
        self.refresh()

    def refresh(self) -> None:
        """Takes a new snapshot of the weights (NumPy, or the folded inference copy)."""
        self.device = next(self.network.parameters()).device
        allowed = self.use_numpy and self.device.type == "cpu"
        self._numpy = NumpyMLP.from_network(self.network) if allowed else None
        self._dtype = search_dtype(self.network, self.device)
        if self._numpy is None:
            self._model = self.network if self.network.training else \
                inference_network(self.network, self._dtype)

    def _autocast(self):
        """The number format of the network's calls (``model.search_precision``)."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16,
                              enabled=self._dtype == torch.bfloat16)

    def _store_roots(self, hidden, batch: int) -> None:
        shape = (batch, self.num_nodes, *hidden.shape[1:])
        if self._hidden is None or tuple(self._hidden.shape) != shape or \
                isinstance(self._hidden, np.ndarray) != isinstance(hidden, np.ndarray):
            if isinstance(hidden, np.ndarray):
                self._hidden = np.empty(shape, dtype=hidden.dtype)
                self._rows = np.arange(batch)
            else:
                self._hidden = torch.empty(shape, dtype=hidden.dtype, device=self.device)
                self._rows = torch.arange(batch, device=self.device)
        self._hidden[:, 0] = hidden

    @torch.inference_mode()
    def initial(self, observations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Root values [B] and policy logits [B, A]; stores the root hidden states."""
        batch = observations.shape[0]
        if self._numpy is not None:
            hidden, value, logits = self._numpy.initial(observations)
            self._store_roots(hidden, batch)
            return value, logits
        obs = torch.as_tensor(observations, device=self.device)
        with self._autocast():
            out = self._model.initial_inference(obs)
        self._store_roots(out.hidden, batch)
        value = self._model.value_scalar(out.value_logits.float())
        return value.double().cpu().numpy(), out.policy_logits.double().cpu().numpy()

    def recurrent_fn(self, parent_index: np.ndarray, action: np.ndarray,
                     node_index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Dynamics + prediction from the parents' hidden states; stores the new ones."""
        assert self._hidden is not None and self._rows is not None, "call initial() first"
        if self._numpy is not None:  # no torch here: entering inference mode costs ~10 us
            hidden, reward, value, logits = self._numpy.recurrent(
                self._hidden[self._rows, parent_index], action)
            self._hidden[:, node_index] = hidden
            return reward, value, logits
        return self._recurrent_torch(parent_index, action, node_index)

    @torch.inference_mode()
    def _recurrent_torch(self, parent_index: np.ndarray, action: np.ndarray,
                         node_index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        parents = torch.as_tensor(parent_index, device=self.device, dtype=torch.long)
        actions = torch.as_tensor(action, device=self.device, dtype=torch.long)
        with self._autocast():
            out = self._model.recurrent_inference(self._hidden[self._rows, parents], actions)
        self._hidden[:, node_index] = out.hidden
        reward = self._model.reward_scalar(out.reward_logits.float())
        value = self._model.value_scalar(out.value_logits.float())
        return (reward.double().cpu().numpy(), value.double().cpu().numpy(),
                out.policy_logits.double().cpu().numpy())


def plan(network: MuZeroNetwork, search: BatchedMCTS, observations: np.ndarray,
         legal_action_mask: np.ndarray | None = None, to_play: np.ndarray | None = None,
         rng: np.random.Generator | None = None, add_noise: bool = True) -> SearchResult:
    """One batched search from observations [B, ...] with ``network`` in eval mode."""
    was_training = network.training
    network.eval()
    try:
        adapter = ModelSearchAdapter(network, search.settings.num_simulations)
        root_value, root_logits = adapter.initial(observations)
        return search.run(root_value, root_logits, adapter.recurrent_fn, legal_action_mask,
                          to_play, rng, add_noise)
    finally:
        network.train(was_training)
