"""Checkpoint files: atomic writes, tensors and plain data only, safe loading.

A checkpoint is one ``torch.save`` file of nested dicts holding state dicts, tensors, numbers,
strings and lists. It is written to a temporary file in the same folder, fsynced and renamed
over the old one (:func:`muzero_gym.run_folder.atomic_write`), so a kill at any moment leaves
the previous checkpoint intact, and a failed write (a full disk, a read-only folder) is one
:class:`~muzero_gym.run_folder.RunFolderError` saying so. It is read with
``torch.load(..., weights_only=True)``, which refuses anything that would run code on load.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np
import torch

from muzero_gym.run_folder import atomic_write, make_run_folder

CHECKPOINT_NAME = "checkpoint.pt"
FORMAT_VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint is missing, unreadable, or does not fit what it is loaded into."""


def to_storable(value: Any) -> Any:
    """Numpy arrays become tensors (recursively); everything else is kept."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, dict):
        return {k: to_storable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_storable(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    return value


class UnstorableState(TypeError):
    """An env state that is not plain data (dataclasses, dicts, lists, arrays, numbers)."""


def plain_state(value: Any) -> Any:
    """An env's ``get_state()`` as plain data a checkpoint can hold: dataclasses become dicts
    of their fields, tuples lists, numpy scalars numbers; anything else is an UnstorableState.
    :func:`restore_state` rebuilds it after the pattern of a live env's state, so loading a
    checkpoint never needs to name (and import) a class."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain_state(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): plain_state(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_state(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise UnstorableState(f"cannot store an env state holding {type(value).__name__}")


def restore_state(plain: Any, like: Any) -> Any:
    """The inverse of :func:`plain_state`, with ``like`` (a state of the same env) giving the
    types: its dataclass, tuple and array dtypes."""
    if isinstance(plain, torch.Tensor):
        plain = plain.numpy()
    if dataclasses.is_dataclass(like) and not isinstance(like, type):
        return type(like)(**{f.name: restore_state(plain[f.name], getattr(like, f.name))
                             for f in dataclasses.fields(like)})
    if isinstance(like, dict):
        return {k: restore_state(v, like.get(k)) for k, v in plain.items()}
    if isinstance(like, (list, tuple)):
        items = [restore_state(v, like[i] if i < len(like) else None)
                 for i, v in enumerate(plain)]
        return type(like)(items)
    if isinstance(like, np.ndarray):
        return np.array(plain, dtype=like.dtype)
    if isinstance(plain, np.ndarray) and plain.ndim == 0:
        return plain.item()
    return plain


def save_checkpoint(state: dict[str, Any], path: str | Path) -> Path:
    """Writes ``state`` atomically to ``path``: a ``.pt`` file, or a folder (created if needed)
    that gets ``checkpoint.pt``."""
    path = Path(path)
    if path.suffix != ".pt":
        path = path / CHECKPOINT_NAME
    make_run_folder(path.parent)
    keeps = (f"the previous checkpoint {path.name} is intact" if path.exists()
             else "no checkpoint was written")
    storable = {"format_version": FORMAT_VERSION, **to_storable(state)}
    return atomic_write(path, lambda file: torch.save(storable, file), "checkpoint", keeps)


def resolve_checkpoint_path(path: str | Path) -> Path:
    """A checkpoint file, or the checkpoint.pt of a run folder."""
    path = Path(path)
    if path.is_dir():
        path = path / CHECKPOINT_NAME
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {path}")
    return path


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu",
                    leave_out: Collection[str] = ()) -> dict[str, Any]:
    """Reads a checkpoint written by :func:`save_checkpoint` (``weights_only=True``).

    The top-level entries named in ``leave_out`` are never read from disk: the file is mapped
    into memory, those entries dropped, and the rest copied out of the mapping, so loading
    a model without its replay of gigabytes takes the memory of the model."""
    path = resolve_checkpoint_path(path)
    try:
        state = torch.load(path, map_location=map_location, weights_only=True,
                           mmap=bool(leave_out))
    except Exception as e:  # torch raises many types for a damaged or foreign file
        raise CheckpointError(f"{path} is not a readable muzero_gym checkpoint "
                              f"({type(e).__name__})") from None
    if not isinstance(state, dict) or state.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path} is not a muzero_gym checkpoint of format "
                              f"{FORMAT_VERSION}")
    if leave_out:
        state = _copied({k: v for k, v in state.items() if k not in leave_out})
    return state


def _copied(value: Any) -> Any:
    """``value`` with every tensor in it copied (out of a file mapping)."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_copied(v) for v in value)
    return value
