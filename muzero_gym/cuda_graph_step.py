"""The learner step captured as one CUDA graph: loss, backward, clipping and optimizer update.

Eagerly, a learner step of the small Atari network launches about two thousand kernels, and on a
GPU the host's launching, not the arithmetic, sets its time. :class:`CapturedStep` records the
whole step (the K-step loss, its backward pass, the gradient clipping and the fused optimizer
update) once, on the first batch of each shape, and from then on replays it: the batch's arrays
are copied into the graph's fixed input tensors, the learning rate into the optimizer's tensor,
and one launch runs the step.

The step's numbers are the eager step's (the same kernels on the same inputs). Two things differ
in how they are reached:

- the optimizer holds its learning rate as a device tensor and keeps its state on the device
  (``capturable``), so the graph reads each step's rate; recording runs three warm-up steps on
  the first batch, after which the weights, the normalisation statistics and the optimizer
  state are put back as they were, so the recorded steps change nothing;
- the eager step refuses to update on a non-finite loss or gradient norm; a replay cannot stop
  halfway, so the graph first copies the weights, statistics and optimizer state aside, and
  :meth:`CapturedStep.restore` puts them back when the step's loss or norm is not finite (the
  learner then raises, with the weights unchanged, as eagerly).

Used for CUDA learners with ``train.cuda_graphs`` when the loss needs nothing but the batch's
own arrays (``bootstrap_source = "search"``, no consistency loss); other settings train eagerly.
Off by default until its tests (``pytest --device cuda``) have run on a GPU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from muzero_gym.replay import Batch

# The batch's arrays the loss reads, with the dtype it reads them in (None: as stored).
GRAPH_INPUTS: dict[str, torch.dtype | None] = {
    "observations": None, "actions": torch.long, "target_value": torch.float32,
    "target_reward": torch.float32, "target_policy": torch.float32,
    "value_mask": torch.float32, "policy_mask": torch.float32, "weights": torch.float32,
    "legal_action_mask": torch.bool}

WARMUP_STEPS = 3


def input_signature(batch: Batch) -> tuple:
    """What a recorded graph is specific to: each input's shape and dtype."""
    signature = []
    for name in GRAPH_INPUTS:
        value = getattr(batch, name)
        if value is not None:
            signature.append((name, tuple(value.shape), str(value.dtype)))
    return tuple(signature)


class CapturedStep:
    """One recorded learner step for batches of one signature (see module doc).

    ``body(batch)`` runs the step on a batch of device tensors (loss, backward, clipping, the
    optimizer's update) and returns the tensors the learner reads afterwards."""

    def __init__(self, body: Callable[[Batch], dict[str, torch.Tensor]], batch: Batch,
                 network: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 device: torch.device):
        self.device = device
        self.optimizer = optimizer
        self.inputs = {name: torch.empty(tuple(getattr(batch, name).shape),
                                         dtype=dtype or _torch_dtype(getattr(batch, name)),
                                         device=device)
                       for name, dtype in GRAPH_INPUTS.items()
                       if getattr(batch, name) is not None}
        self.load(batch)
        static_batch = dataclasses.replace(batch, **self.inputs)
        prepare_optimizer(optimizer, device)
        before = _state_tensors(network, optimizer)
        saved = {id(t): t.detach().clone() for t in before}
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(WARMUP_STEPS):  # kernels chosen, optimizer state allocated
                optimizer.zero_grad(set_to_none=True)
                body(static_batch)
        torch.cuda.current_stream(device).wait_stream(side)
        self.guarded = _state_tensors(network, optimizer)
        with torch.no_grad():
            for tensor in self.guarded:  # the warm-up leaves no trace
                if id(tensor) in saved:
                    tensor.copy_(saved[id(tensor)])
                else:  # optimizer state the warm-up created: a fresh optimizer's zeros
                    tensor.zero_()
        self.backup = [t.detach().clone() for t in self.guarded]
        optimizer.zero_grad(set_to_none=True)
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: self-play may use the GPU from another thread meanwhile
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            with torch.no_grad():
                torch._foreach_copy_(self.backup, self.guarded)
            self.outputs = body(static_batch)

    def load(self, batch: Batch) -> None:
        """Copies the batch's arrays into the graph's inputs (without waiting when they are
        pinned host tensors)."""
        for name, target in self.inputs.items():
            value = getattr(batch, name)
            source = value if isinstance(value, torch.Tensor) else torch.from_numpy(
                np.ascontiguousarray(value))
            target.copy_(source, non_blocking=True)

    def replay(self, batch: Batch, lr: float) -> dict[str, torch.Tensor]:
        """The step on ``batch`` at learning rate ``lr``; the outputs of ``body``."""
        self.load(batch)
        set_learning_rate(self.optimizer, lr)
        self.graph.replay()
        return self.outputs

    def restore(self) -> None:
        """Puts back the weights, statistics and optimizer state of before the last replay."""
        with torch.no_grad():
            torch._foreach_copy_(self.guarded, self.backup)


def prepare_optimizer(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """The optimizer's learning rates as device tensors and its state on the device
    (``capturable``), as a recorded step needs them."""
    for group in optimizer.param_groups:
        if not isinstance(group["lr"], torch.Tensor) or group["lr"].device != device:
            group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32, device=device)
        if "capturable" in group:
            group["capturable"] = True


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Every group's rate to ``lr``, in place where it is a tensor a graph reads."""
    for group in optimizer.param_groups:
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr


def _state_tensors(network: torch.nn.Module, optimizer: torch.optim.Optimizer
                   ) -> list[torch.Tensor]:
    """Everything a step changes: parameters, buffers (normalisation statistics) and the
    optimizer's state tensors."""
    tensors = list(network.parameters()) + list(network.buffers())
    for state in optimizer.state.values():
        tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
    return tensors


def _torch_dtype(array: Any) -> torch.dtype:
    if isinstance(array, torch.Tensor):
        return array.dtype
    return torch.from_numpy(np.zeros(0, dtype=array.dtype)).dtype
