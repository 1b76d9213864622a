"""The learner: K-step unrolled MuZero loss, optimizer, LR schedule and target network.

One :meth:`Learner.train_step` takes a replay :class:`~muzero_gym.replay.Batch`, unrolls the
dynamics function K steps from the representation of the sampled observations, and minimises

    sum_k scale_k * (value_loss_weight * CE(value) + CE(reward) + CE(policy))

weighted per sample by the importance weights, where scale_0 = 1 and scale_k = 1/K for the
unrolled steps (the reference's ``gradient_scale``), value and reward are cross-entropies against
two-hot targets on the supports, and the gradient entering the dynamics function is halved.
Weight decay is the optimizer's L2 term, as in the reference. With ``consistency_loss_weight``
> 0, EfficientZero's self-supervised consistency loss (negative cosine similarity between the
projected unrolled hidden state and the stop-gradient projection of the real next observation's
representation) is added per unrolled step. On a GPU, with ``cuda_graphs``, the step is recorded
once as a CUDA graph and replayed (:mod:`muzero_gym.cuda_graph_step`). The learning rate follows
``lr_init * lr_decay_rate ** (step / lr_decay_steps)`` after an optional linear warm-up. A target
network, refreshed every ``target_update_interval`` steps (or Polyak-averaged every step with
``target_update_tau``), supplies bootstrap values when
``train.bootstrap_source = "target_network"``. With ``averaged_weights_tau`` > 0 the learner also
keeps a moving average of the trained weights, which evaluation and play use.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from muzero_gym.config import TrainConfig
from muzero_gym.cuda_graph_step import CapturedStep, input_signature, set_learning_rate
from muzero_gym.networks import MuZeroNetwork, scale_gradient, weights_permuted_once
from muzero_gym.replay import Batch
from muzero_gym.support import scalar_to_support


class TrainingDivergedError(RuntimeError):
    """The loss or the weights became NaN or infinite."""


def resolve_device(name: str) -> torch.device:
    """``auto`` is CUDA when available, else CPU; ``cuda`` without a GPU is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("train.device = 'cuda' but no CUDA device is available; use auto or cpu")
    return torch.device(name)


def learning_rate(config: TrainConfig, step: int) -> float:
    """The reference's exponential decay, after ``lr_warmup_steps`` of linear warm-up."""
    lr = config.lr_init * config.lr_decay_rate ** (step / config.lr_decay_steps)
    if config.lr_warmup_steps > 0 and step < config.lr_warmup_steps:
        lr *= (step + 1) / config.lr_warmup_steps
    return lr


def decay_groups(network: torch.nn.Module, weight_decay: float,
                 decay_norms_and_biases: bool) -> list[dict[str, Any]]:
    """The optimizer's parameter groups: every parameter with ``weight_decay``, or, without
    ``decay_norms_and_biases``, only the weight matrices and kernels (parameters of two or more
    dimensions) with it and the one-dimensional ones (normalisation scales and shifts, biases)
    without."""
    params = list(network.parameters())
    if decay_norms_and_biases:
        return [{"params": params, "weight_decay": weight_decay}]
    return [{"params": [p for p in params if p.ndim > 1], "weight_decay": weight_decay},
            {"params": [p for p in params if p.ndim <= 1], "weight_decay": 0.0}]


class Learner:
    """Owns the training network, its target copy, the optimizer and the step counter."""

    def __init__(self, network: MuZeroNetwork, config: TrainConfig,
                 device: torch.device | str | None = None):
        self.config = config
        self.device = torch.device(device) if device is not None else resolve_device(
            config.device)
        self.network = network.to(self.device)
        if any(isinstance(m, torch.nn.Conv2d) for m in network.modules()):
            # Channels-last convolutions train about 20% faster on CPUs (oneDNN's layout);
            # the numbers are the same up to the order of float additions.
            self.network.to(memory_format=torch.channels_last)
        self.target_network = _frozen_copy(self.network)
        # The weights evaluation and play use when train.averaged_weights_tau > 0.
        self.averaged_network = (_frozen_copy(self.network) if config.averaged_weights_tau > 0
                                 else None)
        # Paired once: Polyak steps and state loads update these tensors in place.
        self._target_pairs = _paired(self.target_network, self.network)
        self._average_pairs = (_paired(self.averaged_network, self.network)
                               if self.averaged_network is not None else None)
        # On a GPU the optimizer updates every parameter in one fused kernel; on a CPU with
        # torch's multi-tensor ops (one call for all parameters, the same numbers as the
        # per-parameter loop, a fifth faster).
        fused = {"fused": True} if self.device.type == "cuda" else {"foreach": True}
        groups = decay_groups(self.network, config.weight_decay, config.decay_norms_and_biases)
        if config.optimizer == "sgd":
            self.optimizer: torch.optim.Optimizer = torch.optim.SGD(
                groups, lr=config.lr_init, momentum=config.momentum, **fused)
        else:
            self.optimizer = torch.optim.Adam(groups, lr=config.lr_init, **fused)
        self.training_step = 0
        # Recorded steps by input signature (see muzero_gym.cuda_graph_step).
        self._captured: dict[tuple, CapturedStep] = {}
        self.uses_cuda_graphs = (self.device.type == "cuda" and config.cuda_graphs
                                 and config.bootstrap_source == "search"
                                 and config.consistency_loss_weight == 0)

    def _tensor(self, array: np.ndarray | torch.Tensor,
                dtype: torch.dtype | None = None) -> torch.Tensor:
        """A batch array on the learner's device; pinned host tensors (:func:`pin_batch`)
        are copied without waiting."""
        if isinstance(array, torch.Tensor):
            return array.to(self.device, dtype=dtype, non_blocking=True)
        return torch.as_tensor(array, dtype=dtype, device=self.device)

    def value_targets(self, batch: Batch) -> torch.Tensor:
        """[B, K + 1] value targets: stored search values, or the target network's values."""
        if self.config.bootstrap_source == "search":
            return self._tensor(batch.target_value, torch.float32)
        if batch.bootstrap is None:
            raise ValueError("bootstrap_source = target_network needs batches sampled with "
                             "with_bootstrap_inputs=True")
        obs = self._tensor(batch.bootstrap.observations)
        with torch.no_grad():
            out = self.target_network.initial_inference(obs.flatten(0, 1))
            values = self.target_network.value_scalar(out.value_logits).view(obs.shape[:2])
        return (self._tensor(batch.reward_sum, torch.float32)
                + self._tensor(batch.bootstrap_scale, torch.float32) * values)

    def compute_loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor],
                                                   torch.Tensor]:
        """(weighted total loss, per-part mean losses, predicted root values [B])."""
        with weights_permuted_once(self.network):  # the heads run once per unrolled step
            return self._unrolled_loss(batch)

    def _unrolled_loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor],
                                                    torch.Tensor]:
        """:meth:`compute_loss`'s work."""
        net = self.network
        observations = self._tensor(batch.observations)
        actions = self._tensor(batch.actions, torch.long)
        target_value = self.value_targets(batch)
        target_reward = self._tensor(batch.target_reward, torch.float32)
        target_policy = self._tensor(batch.target_policy, torch.float32)
        value_mask = self._tensor(batch.value_mask, torch.float32)
        policy_mask = self._tensor(batch.policy_mask, torch.float32)
        weights = self._tensor(batch.weights, torch.float32)
        num_unroll = actions.shape[1]
        step_scale = 1.0 / (self.config.unroll_loss_divisor or max(num_unroll, 1))  # K may be 0

        value_support = scalar_to_support(target_value, net.value_support_size)
        reward_support = scalar_to_support(target_reward, net.reward_support_size)

        consistency = self.config.consistency_loss_weight > 0
        if consistency:
            if batch.unrolled is None:
                raise ValueError("consistency_loss_weight > 0 needs batches sampled with "
                                 "with_unrolled_inputs=True")
            next_obs = self._tensor(batch.unrolled.observations)
            with torch.no_grad():
                target_projection = net.project(
                    net.representation(next_obs[:, 1:].flatten(0, 1)), with_head=False
                ).view(next_obs.shape[0], num_unroll, -1)
            consistency_mask = self._tensor(batch.unrolled.valid[:, 1:], torch.float32)
        consistency_loss = torch.zeros(observations.shape[0], device=self.device)

        out = net.initial_inference(observations)
        root_value = net.value_scalar(out.value_logits.detach())
        value_loss = _cross_entropy(out.value_logits, value_support[:, 0]) * value_mask[:, 0]
        root_logits = out.policy_logits
        if batch.legal_action_mask is not None:
            # The search only ever weighs the legal moves of a real position, so the root
            # policy is a softmax over them: an action rarely legal (a rook's 7-square move)
            # is not pushed down wherever it is illegal and then missing where it wins.
            legal = self._tensor(batch.legal_action_mask, torch.bool)
            root_logits = root_logits.masked_fill(~legal, -1e4)
        policy_loss = _cross_entropy(root_logits, target_policy[:, 0]) * policy_mask[:, 0]
        reward_loss = torch.zeros_like(value_loss)
        hidden = out.hidden
        for k in range(1, num_unroll + 1):
            hidden = scale_gradient(hidden, 0.5)
            out = net.recurrent_inference(hidden, actions[:, k - 1])
            hidden = out.hidden
            value_loss = value_loss + step_scale * value_mask[:, k] * _cross_entropy(
                out.value_logits, value_support[:, k])
            reward_loss = reward_loss + step_scale * value_mask[:, k] * _cross_entropy(
                out.reward_logits, reward_support[:, k])
            policy_loss = policy_loss + step_scale * policy_mask[:, k] * _cross_entropy(
                out.policy_logits, target_policy[:, k])
            if consistency:
                similarity = F.cosine_similarity(net.project(hidden, with_head=True),
                                                 target_projection[:, k - 1], dim=-1)
                consistency_loss = consistency_loss - step_scale * consistency_mask[:, k - 1] \
                    * similarity
        per_sample = (self.config.value_loss_weight * value_loss + reward_loss + policy_loss
                      + self.config.consistency_loss_weight * consistency_loss)
        total = (weights * per_sample).mean()
        parts = {"value": value_loss.mean().detach(), "reward": reward_loss.mean().detach(),
                 "policy": policy_loss.mean().detach(),
                 "consistency": consistency_loss.mean().detach()}
        priority_error = (root_value - target_value[:, 0].detach()).abs()
        return total, parts, priority_error

    def train_step(self, batch: Batch) -> dict[str, Any]:
        """One optimizer step. Returns the losses, lr, grad norm and new priorities [B]."""
        self.network.train()
        lr = learning_rate(self.config, self.training_step)
        if self.uses_cuda_graphs:
            signature = input_signature(batch)
            step = self._captured.get(signature)
            if step is None:
                step = self._captured[signature] = CapturedStep(
                    self._step_body, batch, self.network, self.optimizer, self.device)
            out = step.replay(batch, lr)
            total, grad_norm = float(out["total"]), float(out["grad_norm"])
            if not (np.isfinite(total) and np.isfinite(grad_norm)):
                step.restore()  # the replay has updated: back to the weights before it
                self._diverged(f"the loss is {total}" if not np.isfinite(total)
                               else f"the gradient norm is {grad_norm}")
        else:
            set_learning_rate(self.optimizer, lr)
            with self._autocast():
                loss, parts, priorities = self.compute_loss(batch)
            if not torch.isfinite(loss):  # stop before the step writes NaN into the weights
                self._diverged(f"the loss is {float(loss.detach())}")
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            norm = self._clip_gradients()
            if not torch.isfinite(norm):
                self._diverged(f"the gradient norm is {float(norm)}")
            self.optimizer.step()
            out = {"total": loss.detach(), **parts, "grad_norm": norm, "priorities": priorities}
        self.training_step += 1
        if self._average_pairs is not None:
            _average_into(self._average_pairs, self.config.averaged_weights_tau)
        if self.config.target_update_tau > 0:
            self.average_into_target_network(self.config.target_update_tau)
        elif self.training_step % self.config.target_update_interval == 0:
            self.update_target_network()
        return {**{k: float(out[k]) for k in ("total", "value", "reward", "policy",
                                                "consistency", "grad_norm")},
                "lr": lr, "priorities": out["priorities"].float().cpu().numpy()}

    def _step_body(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Loss, backward, clipping and update with no host synchronisation (what a CUDA graph
        records; gradients must be unset before)."""
        with self._autocast(cache_enabled=False):  # a recorded region keeps no autocast cache
            loss, parts, priorities = self.compute_loss(batch)
        loss.backward()
        norm = self._clip_gradients()
        self.optimizer.step()
        return {"total": loss.detach(), **parts, "grad_norm": norm, "priorities": priorities}

    def _autocast(self, cache_enabled: bool = True) -> torch.autocast:
        use_amp = self.config.mixed_precision and self.device.type == "cuda"
        return torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp,
                              cache_enabled=cache_enabled)

    def _clip_gradients(self) -> torch.Tensor:
        max_norm = self.config.max_grad_norm if self.config.max_grad_norm > 0 else float("inf")
        return torch.nn.utils.clip_grad_norm_(self.network.parameters(), max_norm)

    def _diverged(self, what: str) -> None:
        raise TrainingDivergedError(
            f"{what} at learner step {self.training_step + 1:,}: training diverged (the "
            "weights are unchanged; try a smaller train.lr_init or train.max_grad_norm)")

    @property
    def playing_network(self) -> torch.nn.Module:
        """The network evaluation and play use: the moving average with
        ``averaged_weights_tau`` > 0, else the trained network."""
        return self.network if self.averaged_network is None else self.averaged_network

    def update_target_network(self) -> None:
        self.target_network.load_state_dict(self.network.state_dict())

    def average_into_target_network(self, tau: float) -> None:
        """Polyak step: target parameters move ``tau`` of the way to the trained ones; buffers
        (batch-norm statistics) are copied."""
        _average_into(self._target_pairs, tau)

    def state_dict(self) -> dict[str, Any]:
        """Tensors and plain numbers only (loadable with ``weights_only=True``)."""
        optimizer = self.optimizer.state_dict()
        for group in optimizer["param_groups"]:  # as a learner of any device loads them
            group["lr"] = float(group["lr"])
            if group.get("capturable"):
                group["capturable"] = False
        state = {"network": self.network.state_dict(),
                 "target_network": self.target_network.state_dict(),
                 "optimizer": optimizer, "training_step": self.training_step}
        if self.averaged_network is not None:
            state["averaged_network"] = self.averaged_network.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.network.load_state_dict(state["network"])
        self.target_network.load_state_dict(state["target_network"])
        if self.averaged_network is not None:
            # A checkpoint saved without the average starts it from its trained weights.
            self.averaged_network.load_state_dict(state.get("averaged_network", state["network"]))
        self.optimizer.load_state_dict(state["optimizer"])
        self.training_step = int(state["training_step"])
        self._captured.clear()  # recorded against the optimizer state just replaced


def _frozen_copy(network: MuZeroNetwork) -> MuZeroNetwork:
    """A copy of ``network`` in eval mode that no gradient reaches."""
    copied = copy.deepcopy(network).eval()
    for p in copied.parameters():
        p.requires_grad_(False)
    return copied


def _paired(average: MuZeroNetwork, network: MuZeroNetwork) -> tuple[list, list, list]:
    """``average``'s parameters, ``network``'s, and their buffers side by side (for
    :func:`_average_into`)."""
    return (list(average.parameters()), list(network.parameters()),
            list(zip(average.buffers(), network.buffers())))


@torch.no_grad()
def _average_into(pairs: tuple[list, list, list], tau: float) -> None:
    """Polyak step over :func:`_paired` tensors: the average's parameters move ``tau`` of the
    way to the network's; buffers (batch-norm statistics) are copied."""
    averaged, trained, buffers = pairs
    torch._foreach_lerp_(averaged, trained, tau)
    for target, source in buffers:
        target.copy_(source)


def _cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-sample cross-entropy of ``logits`` [B, C] against a distribution ``target`` [B, C]."""
    return -(target * F.log_softmax(logits, dim=-1)).sum(-1)


def pin_batch(batch: Batch) -> Batch:
    """The batch's arrays the learner reads as pinned host tensors, so that their copies to a
    GPU overlap the work already queued there (done while the GPU trains on the previous
    batch). Arrays that reanalyse or augmentation still change stay numpy."""
    for name in ("observations", "actions", "target_reward", "value_mask", "policy_mask",
                 "weights", "legal_action_mask"):
        value = getattr(batch, name)
        if isinstance(value, np.ndarray):
            setattr(batch, name, torch.from_numpy(np.ascontiguousarray(value)).pin_memory())
    return batch
