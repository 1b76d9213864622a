"""A NumPy forward pass of :class:`~muzero_gym.networks.MLPNetwork` for CPU self-play.

At the batch sizes of self-play (tens of rows) an MLP step is dominated by per-operation
overhead, which is several times lower in NumPy than in PyTorch; the search calls the model 50
times per move, so this path roughly doubles self-play speed on CPU. It is a snapshot: build it
again (:meth:`NumpyMLP.from_network`) after the weights change. Tests check it against the
PyTorch forward pass. :func:`limit_blas_threads` caps the BLAS threads its products run on.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from muzero_gym.networks import MLPNetwork
from muzero_gym.support import support_to_scalar_numpy

Layer = tuple


def limit_blas_threads(threads: int) -> None:
    """Caps the threads of numpy's BLAS (OpenBLAS, MKL, ...) at ``threads`` in this process.

    At self-play batch sizes a matrix product is too small to share out, but OpenBLAS keeps its
    other threads spinning on cores of their own: two 2048 runs side by side on two cores made
    39 env steps/s each with numpy's default threads and 129 with one (the agent calls this
    with ``train.num_threads``, as torch's threads)."""
    if threads < 1:
        raise ValueError(f"threads = {threads}: must be >= 1")
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=threads, user_api="blas")


def _layers(sequential: nn.Sequential) -> list[Layer]:
    layers: list[Layer] = []
    for module in sequential:
        if isinstance(module, nn.Linear):
            layers.append(("linear", module.weight.detach().cpu().numpy().T.copy(),
                           module.bias.detach().cpu().numpy().copy()))
        elif isinstance(module, nn.LayerNorm):
            layers.append(("norm", module.weight.detach().cpu().numpy().copy(),
                           module.bias.detach().cpu().numpy().copy(), module.eps))
        elif isinstance(module, nn.ReLU):
            layers.append(("relu",))
        else:  # pragma: no cover - MLPNetwork only uses these
            raise TypeError(f"no numpy version of {type(module).__name__}")
    return layers


def _forward(layers: list[Layer], x: np.ndarray) -> np.ndarray:
    for layer in layers:
        kind = layer[0]
        if kind == "linear":
            x = x @ layer[1] + layer[2]
        elif kind == "norm":
            # ndarray.sum is several times cheaper than ndarray.mean on small arrays
            inv_n = 1.0 / x.shape[-1]
            centred = x - x.sum(axis=-1, keepdims=True) * inv_n
            var = (centred * centred).sum(axis=-1, keepdims=True) * inv_n
            x = centred * (1.0 / np.sqrt(var + layer[3])) * layer[1] + layer[2]
        else:
            np.maximum(x, 0.0, out=x)
    return x


def _scale_hidden(x: np.ndarray) -> np.ndarray:
    low = x.min(axis=1, keepdims=True)
    high = x.max(axis=1, keepdims=True)
    return (x - low) / np.maximum(high - low, 1e-5)


class NumpyMLP:
    """Snapshot of an MLPNetwork's weights with numpy ``initial`` / ``recurrent`` steps that
    return scalars ready for the search."""

    def __init__(self, network: MLPNetwork):
        self.num_actions = network.num_actions
        self.value_support_size = network.value_support_size
        self.reward_support_size = network.reward_support_size
        self.representation = _layers(network.representation_net)
        self.dynamics = _layers(network.dynamics_net)
        self.reward = _layers(network.reward_net)
        self.trunk = _layers(network.prediction_trunk)
        self.policy = _layers(network.policy_head)
        self.value = _layers(network.value_head)
        # float32 for a float32 network; a float64 one (tests) computes in float64 throughout
        self.dtype = self.representation[0][1].dtype
        self._one_hot = np.eye(network.num_actions, dtype=self.dtype)

    @classmethod
    def from_network(cls, network: nn.Module) -> NumpyMLP | None:
        """A snapshot if ``network`` is an MLPNetwork on the CPU, else None."""
        if not isinstance(network, MLPNetwork):
            return None
        if any(p.device.type != "cpu" for p in network.parameters()):
            return None
        return cls(network)

    def _predict(self, hidden: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        trunk = _forward(self.trunk, hidden)
        logits = _forward(self.policy, trunk)
        value = support_to_scalar_numpy(_forward(self.value, trunk), self.value_support_size)
        return value, logits

    def initial(self, observations: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(hidden [B, H], value [B], policy logits [B, A]) of observations [B, ...]."""
        x = np.asarray(observations, dtype=self.dtype).reshape(observations.shape[0], -1)
        hidden = _scale_hidden(_forward(self.representation, x))
        value, logits = self._predict(hidden)
        return hidden, value, logits

    def recurrent(self, hidden: np.ndarray, actions: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(next hidden, reward [B], value [B], policy logits [B, A])."""
        x = np.concatenate([hidden, self._one_hot[actions]], axis=1)
        next_hidden = _scale_hidden(_forward(self.dynamics, x))
        reward = support_to_scalar_numpy(_forward(self.reward, next_hidden),
                                         self.reward_support_size)
        value, logits = self._predict(next_hidden)
        return next_hidden, reward, value, logits


@torch.no_grad()
def torch_reference(network: MLPNetwork, observations: np.ndarray, actions: np.ndarray):
    """The same quantities from the PyTorch network (for tests), in the network's dtype."""
    dtype = next(network.parameters()).dtype
    out = network.initial_inference(torch.as_tensor(observations, dtype=dtype))
    nxt = network.recurrent_inference(out.hidden, torch.as_tensor(actions))
    return (out.hidden.numpy(), network.value_scalar(out.value_logits).numpy(),
            out.policy_logits.numpy(), nxt.hidden.numpy(),
            network.reward_scalar(nxt.reward_logits).numpy(),
            network.value_scalar(nxt.value_logits).numpy(), nxt.policy_logits.numpy())
