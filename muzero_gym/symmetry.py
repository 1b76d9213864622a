"""Training on the symmetries of a game: each sampled position is replaced by a random symmetric
copy (AlphaGo Zero's data augmentation), which multiplies the data a board game's self-play
produces at no search cost.

A game declares its symmetries with an optional ``symmetries()`` method on its unwrapped env,
returning :class:`Symmetry` objects other than the identity (Connect Four: the left-right mirror;
TicTacToe: the seven non-trivial rotations and reflections of the square). A symmetry maps a
position to an equally good position: the value is unchanged, the observation planes are
transformed, and every action is renamed by a permutation. ``train.augment_symmetries = true``
turns the augmentation on; :func:`augment_batch` applies it to a replay batch in place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np


@dataclass(frozen=True)
class Symmetry:
    """One symmetry of a game.

    ``transform_observation`` maps a batch of spatial observations ``[N, C, H, W]`` (any leading
    axes) to the transformed positions' observations of the same shape. ``action_permutation``
    [A] says where each action goes: action ``a`` of a position is action
    ``action_permutation[a]`` of the transformed position.
    """

    name: str
    transform_observation: Callable[[np.ndarray], np.ndarray]
    action_permutation: np.ndarray
    inverse_permutation: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        perm = np.asarray(self.action_permutation, dtype=np.int64).reshape(-1)
        if not np.array_equal(np.sort(perm), np.arange(perm.size)):
            raise ValueError(f"symmetry {self.name!r}: action_permutation {perm.tolist()} is "
                             "not a permutation of the actions")
        object.__setattr__(self, "action_permutation", perm)
        object.__setattr__(self, "inverse_permutation", np.argsort(perm))

    def permute_policy(self, policy: np.ndarray) -> np.ndarray:
        """Per-action arrays ``[..., A]`` (policies, legal masks) of the transformed positions."""
        return policy[..., self.inverse_permutation]


def mirror_columns(observations: np.ndarray) -> np.ndarray:
    """Planes ``[..., C, H, W]`` with their columns reversed (a left-right mirror)."""
    return observations[..., ::-1]


def game_symmetries(env: gym.Env) -> list[Symmetry]:
    """The symmetries an env declares (its unwrapped ``symmetries()``); [] if it has none."""
    declare = getattr(env.unwrapped, "symmetries", None)
    if not callable(declare):
        return []
    symmetries = list(declare())
    num_actions = getattr(env.action_space, "n", None)
    for symmetry in symmetries:
        if not isinstance(symmetry, Symmetry):
            raise TypeError(f"{type(env.unwrapped).__name__}.symmetries() must return Symmetry "
                            f"objects, got {type(symmetry).__name__}")
        if num_actions is not None and symmetry.action_permutation.size != num_actions:
            raise ValueError(f"symmetry {symmetry.name!r} permutes "
                             f"{symmetry.action_permutation.size} actions, the env has "
                             f"{num_actions}")
    return symmetries


def augment_batch(batch, symmetries: list[Symmetry], rng: np.random.Generator) -> np.ndarray:
    """Replaces each sample of a replay :class:`~muzero_gym.replay.Batch` by a uniformly drawn
    symmetric copy (the identity included), in place: observations, unrolled actions, policy
    targets, legal moves and, when present, the unrolled states' inputs. Values, rewards and
    masks are unchanged. Returns the index drawn per sample (0 = identity, i =
    ``symmetries[i - 1]``)."""
    choice = rng.integers(0, len(symmetries) + 1, size=batch.observations.shape[0])
    for index, symmetry in enumerate(symmetries, start=1):
        rows = np.flatnonzero(choice == index)
        if rows.size == 0:
            continue
        batch.observations[rows] = symmetry.transform_observation(batch.observations[rows])
        batch.actions[rows] = symmetry.action_permutation[batch.actions[rows]]
        batch.target_policy[rows] = symmetry.permute_policy(batch.target_policy[rows])
        if batch.legal_action_mask is not None:
            batch.legal_action_mask[rows] = symmetry.permute_policy(
                batch.legal_action_mask[rows])
        if batch.unrolled is not None:
            unrolled = batch.unrolled
            unrolled.observations[rows] = symmetry.transform_observation(
                unrolled.observations[rows])
            unrolled.legal_action_mask[rows] = symmetry.permute_policy(
                unrolled.legal_action_mask[rows])
    return choice
