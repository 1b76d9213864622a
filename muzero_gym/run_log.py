"""TensorBoard logging of a run: one ``SummaryWriter`` per run folder, stable tag names.

Tags written by the agent: ``charts/episodic_return``, ``charts/episodic_length``,
``eval/return_mean``, ``losses/{total,value,reward,policy}``, ``train/lr``, ``train/grad_norm``,
``search/root_value``, ``search/visit_entropy``, ``search/max_depth``,
``perf/env_steps_per_s``, ``perf/train_steps_per_s``, ``replay/size``. The resolved config is
written as an hparams table, as a text table and as ``config.toml`` in the run folder.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams

from muzero_gym.config import Config


def default_run_name(config: Config) -> str:
    """``<env>__<preset>__<seed>__<unix time>``, with the env id made path-safe."""
    env = config.env.id.replace("/", "-")
    return f"{env}__{config.preset}__{config.train.seed}__{int(time.time())}"


class RunLogger:
    """Writes scalars and the config of one run to ``run_dir``."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.writer = SummaryWriter(str(self.run_dir))

    def write_config(self, config: Config) -> None:
        """config.toml in the run folder, plus hparams and a text table in TensorBoard."""
        (self.run_dir / "config.toml").write_text(config.to_toml())
        flat = {f"{section}.{key}": _hparam_value(value)
                for section, values in config.to_dict().items() for key, value in values.items()}
        experiment, start, end = hparams(flat, {"eval/return_mean": 0.0})
        file_writer = self.writer._get_file_writer()
        for summary in (experiment, start, end):
            file_writer.add_summary(summary)
        rows = "\n".join(f"|{k}|{v}|" for k, v in flat.items())
        self.writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{rows}")

    def scalars(self, values: dict[str, float], step: int) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def _hparam_value(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
