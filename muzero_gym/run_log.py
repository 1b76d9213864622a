"""TensorBoard logging of a run: one ``SummaryWriter`` per run folder, stable tag names.

Tags written by the agent: ``charts/episodic_return``, ``charts/episodic_length``,
``eval/return_mean``, ``losses/{total,value,reward,policy}``, ``train/lr``, ``train/grad_norm``,
``search/root_value``, ``search/visit_entropy``, ``search/max_depth``,
``perf/env_steps_per_s``, ``perf/train_steps_per_s``, ``replay/size``,
``replay/effective_batch_size`` (how many samples the importance weights leave a batch:
prioritized replay can shrink it to a few). The resolved config is
written as an hparams table (its metric: ``eval/return_mean``, or ``eval/win_rate`` for
two-player games), as a text table and as ``config.toml`` in the run folder.

A resumed run opens its writer with ``purge_step`` (the checkpoint's env step + 1), so that
TensorBoard hides what the stopped process logged after its last checkpoint. A failed write (a
full disk, a read-only folder) is one :class:`~muzero_gym.run_folder.RunFolderError`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams

from muzero_gym.config import Config
from muzero_gym.run_folder import RunFolderError, atomic_write, make_run_folder, os_reason


def default_run_name(config: Config) -> str:
    """``<env>__<preset>__<seed>__<unix time>``, with the env id made path-safe."""
    env = config.env.id.replace("/", "-")
    return f"{env}__{config.preset}__{config.train.seed}__{int(time.time())}"


class RunLogger:
    """Writes scalars and the config of one run to ``run_dir``."""

    def __init__(self, run_dir: str | Path, purge_step: int | None = None):
        self.run_dir = make_run_folder(run_dir)
        with self._writing():
            self.writer = SummaryWriter(str(self.run_dir), purge_step=purge_step)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        try:
            yield
        except OSError as e:
            raise RunFolderError(f"could not write TensorBoard logs in {self.run_dir}: "
                                 f"{os_reason(e)}") from None

    def write_config(self, config: Config) -> None:
        """config.toml in the run folder, plus hparams and a text table in TensorBoard."""
        text = config.to_toml().encode()
        atomic_write(self.run_dir / "config.toml", lambda file: file.write(text), "config")
        flat = {f"{section}.{key}": _hparam_value(value)
                for section, values in config.to_dict().items() for key, value in values.items()}
        metric = "eval/win_rate" if config.env.num_players == 2 else "eval/return_mean"
        experiment, start, end = hparams(flat, {metric: 0.0})
        with self._writing():
            file_writer = self.writer._get_file_writer()
            for summary in (experiment, start, end):
                file_writer.add_summary(summary)
            rows = "\n".join(f"|{k}|{v}|" for k, v in flat.items())
            self.writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{rows}")

    def scalars(self, values: dict[str, float], step: int) -> None:
        with self._writing():
            for tag, value in values.items():
                self.writer.add_scalar(tag, value, step)

    def flush(self) -> None:
        with self._writing():
            self.writer.flush()

    def close(self) -> None:
        with self._writing():
            self.writer.close()


def _hparam_value(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
