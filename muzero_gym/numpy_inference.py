"""A compiled forward pass of :class:`~muzero_gym.networks.MLPNetwork` for CPU self-play.

At the batch sizes of self-play (tens of rows) an MLP step through PyTorch, or through one
NumPy call per operation, is dominated by per-call overhead: a recurrent step of the cartpole
preset's network is about 120 NumPy calls. Here each linear layer, with its layer norm and
ReLU, is one numba kernel (:func:`_dense`), and the value and reward heads' expected values
are one more each, so a recurrent step is a dozen compiled calls. The products are summed in
a fixed order (over the inputs, one output column at a time, vectorised across the columns),
so the same weights and inputs give the same bits on any x86 CPU, whatever its vector units.
It is a snapshot: build it again (:meth:`NumpyMLP.from_network`) after the weights change.
Tests check it against the PyTorch forward pass. :func:`limit_blas_threads` caps the threads
of numpy's BLAS, which other NumPy code of the process uses.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit
from torch import nn

from muzero_gym.networks import MLPNetwork
from muzero_gym.support import EPSILON, _h_inverse_abs

# A linear layer with what follows it: (weight [in, out], bias [out], layer-norm scale [out]
# and shift [out] or empty arrays, the norm's eps, whether a ReLU follows, the weight rows of a
# one-hot action input [A, out] or an empty array).
Dense = tuple


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


@njit(cache=True, nogil=True)
def _dense(x, weight, bias, scale, shift, eps, relu, action_weight, actions):
    """``x @ weight (+ action_weight[actions]) + bias``, then layer norm (when ``scale`` is
    not empty) and ReLU (when ``relu``), as a new array [B, out] of ``x``'s dtype.

    ``action_weight`` [A, out] adds the rows that a one-hot input of ``actions`` [B] would
    select (the dynamics' first layer); an empty one adds nothing. Each output sums its products
    in input order; the norm's statistics are taken in float64."""
    batch, inputs = x.shape
    outputs = weight.shape[1]
    out = np.zeros((batch, outputs), dtype=x.dtype)
    i = 0
    while i < batch:  # four rows at a time share each weight row's loads
        if i + 4 <= batch:
            r0, r1, r2, r3 = out[i], out[i + 1], out[i + 2], out[i + 3]
            for k in range(inputs):
                x0, x1, x2, x3 = x[i, k], x[i + 1, k], x[i + 2, k], x[i + 3, k]
                w = weight[k]
                for j in range(outputs):
                    wj = w[j]
                    r0[j] += x0 * wj
                    r1[j] += x1 * wj
                    r2[j] += x2 * wj
                    r3[j] += x3 * wj
            i += 4
        else:
            row = out[i]
            for k in range(inputs):
                xk = x[i, k]
                w = weight[k]
                for j in range(outputs):
                    row[j] += xk * w[j]
            i += 1
    for i in range(batch):
        row = out[i]
        if action_weight.shape[0] > 0:
            a = actions[i]
            for j in range(outputs):
                row[j] += action_weight[a, j]
        for j in range(outputs):
            row[j] += bias[j]
    if scale.shape[0] > 0:
        # Statistics column by column: every row's running sum advances at once, so no row
        # waits on its own previous addition (each row still sums in column order).
        means = np.zeros(batch)
        for j in range(outputs):
            for i in range(batch):
                means[i] += out[i, j]
        means /= outputs
        squares = np.zeros(batch)
        for j in range(outputs):
            for i in range(batch):
                d = out[i, j] - means[i]
                squares[i] += d * d
        for i in range(batch):
            row = out[i]
            mean = means[i]
            inv_std = 1.0 / np.sqrt(squares[i] / outputs + eps)
            for j in range(outputs):
                row[j] = (row[j] - mean) * inv_std * scale[j] + shift[j]
    if relu:
        for i in range(batch):
            row = out[i]
            for j in range(outputs):
                if row[j] < 0.0:  # NaN stays NaN, as in torch's ReLU
                    row[j] = 0.0
    return out


@njit(cache=True, nogil=True)
def _scale_rows(x):
    """Min-max scaling of each row to [0, 1] (MuZero Appendix G), in place; returns ``x``."""
    for i in range(x.shape[0]):
        row = x[i]
        low = row.min()
        high = row.max()
        span = max(high - low, 1e-5)
        for j in range(row.shape[0]):
            row[j] = (row[j] - low) / span
    return x


_sqrt = njit(cache=True, nogil=True)(lambda x: np.sqrt(x))
_compiled_h_inverse_abs = njit(cache=True, nogil=True)(_h_inverse_abs)


@njit(cache=True, nogil=True)
def _support_scalars(logits, support_size, eps):
    """Expected value of each row's softmax over the support [-n, n], mapped back by h^-1
    (:func:`muzero_gym.support._h_inverse_abs`, the torch path's own formula, compiled), as [B]
    of the logits' dtype. Computed in float64."""
    batch = logits.shape[0]
    out = np.empty(batch, dtype=logits.dtype)
    for i in range(batch):
        row = logits[i]
        top = row.max()
        weights = 0.0
        total = 0.0
        for j in range(row.shape[0]):
            w = np.exp(np.float64(row[j]) - top)
            weights += w
            total += w * (j - support_size)
        y = total / weights
        magnitude = _compiled_h_inverse_abs(abs(y), _sqrt, eps)
        out[i] = magnitude if y >= 0.0 else -magnitude
    return out


def _dense_layers(sequential: nn.Sequential) -> list[Dense]:
    """The Linear / LayerNorm / ReLU sequence of an MLP as fused layers."""
    layers: list[Dense] = []
    for module in sequential:
        if isinstance(module, nn.Linear):
            weight = module.weight.detach().cpu().numpy()
            empty = np.empty(0, dtype=weight.dtype)
            layers.append([np.ascontiguousarray(weight.T),
                           module.bias.detach().cpu().numpy().copy(), empty, empty, 0.0, False,
                           np.empty((0, 0), dtype=weight.dtype)])
        elif isinstance(module, nn.LayerNorm) and layers and not layers[-1][5] \
                and layers[-1][2].size == 0 and module.elementwise_affine:
            layers[-1][2] = module.weight.detach().cpu().numpy().copy()
            layers[-1][3] = module.bias.detach().cpu().numpy().copy()
            layers[-1][4] = float(module.eps)
        elif isinstance(module, nn.ReLU) and layers and not layers[-1][5]:
            layers[-1][5] = True
        else:  # pragma: no cover - MLPNetwork only uses these, in this order
            raise TypeError(f"no compiled version of {type(module).__name__} at this place")
    return [tuple(layer) for layer in layers]


class NumpyMLP:
    """Snapshot of an MLPNetwork's weights with compiled ``initial`` / ``recurrent`` steps that
    return scalars ready for the search."""

    def __init__(self, network: MLPNetwork):
        self.num_actions = network.num_actions
        self.value_support_size = network.value_support_size
        self.reward_support_size = network.reward_support_size
        self.representation = _dense_layers(network.representation_net)
        dynamics = _dense_layers(network.dynamics_net)
        # The first layer reads [hidden, one-hot action]: its action rows are added by index.
        weight = dynamics[0][0]
        hidden_size = weight.shape[0] - network.num_actions
        self.dynamics = [(np.ascontiguousarray(weight[:hidden_size]), *dynamics[0][1:6],
                          np.ascontiguousarray(weight[hidden_size:])), *dynamics[1:]]
        self.reward = _dense_layers(network.reward_net)
        self.trunk = _dense_layers(network.prediction_trunk)
        self.policy = _dense_layers(network.policy_head)
        self.value = _dense_layers(network.value_head)
        # float32 for a float32 network; a float64 one (tests) computes in float64 throughout
        self.dtype = weight.dtype
        self._no_actions = np.empty(0, dtype=np.int64)

    @classmethod
    def from_network(cls, network: nn.Module) -> NumpyMLP | None:
        """A snapshot if ``network`` is an MLPNetwork on the CPU, else None."""
        if not isinstance(network, MLPNetwork):
            return None
        if any(p.device.type != "cpu" for p in network.parameters()):
            return None
        return cls(network)

    def _forward(self, layers: list[Dense], x: np.ndarray,
                 actions: np.ndarray | None = None) -> np.ndarray:
        actions = self._no_actions if actions is None else actions
        for layer in layers:
            x = _dense(x, *layer, actions)
        return x

    def _predict(self, hidden: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        trunk = self._forward(self.trunk, hidden)
        logits = self._forward(self.policy, trunk)
        value = _support_scalars(self._forward(self.value, trunk), self.value_support_size,
                                 EPSILON)
        return value, logits

    def initial(self, observations: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(hidden [B, H], value [B], policy logits [B, A]) of observations [B, ...]."""
        x = np.ascontiguousarray(observations, dtype=self.dtype).reshape(
            observations.shape[0], -1)
        hidden = _scale_rows(self._forward(self.representation, x))
        value, logits = self._predict(hidden)
        return hidden, value, logits

    def recurrent(self, hidden: np.ndarray, actions: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(next hidden, reward [B], value [B], policy logits [B, A])."""
        actions = np.asarray(actions, dtype=np.int64)
        if actions.size and (actions.min() < 0 or actions.max() >= self.num_actions):
            raise IndexError(f"actions must lie in [0, {self.num_actions})")
        next_hidden = _scale_rows(self._forward(
            self.dynamics, np.ascontiguousarray(hidden, dtype=self.dtype), actions))
        reward = _support_scalars(self._forward(self.reward, next_hidden),
                                  self.reward_support_size, EPSILON)
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
