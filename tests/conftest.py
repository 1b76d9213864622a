"""Suite-wide options: ``pytest --device cuda`` runs every agent on a GPU.

By default every agent the tests build trains and searches on the CPU, whatever the machine has,
so a run gives the same results with or without a GPU. ``--device cuda`` puts every agent's
learner and self-play inference on CUDA (``train.device`` and ``train.inference_device`` of any
config resolve to it) and makes the :func:`device` fixture CUDA, so the host/device hand-offs of
every path the suite covers run on a GPU; it stops at once where no GPU is present.
"""

from __future__ import annotations

import sys

import pytest
import torch


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--device", choices=("cpu", "cuda"), default="cpu",
                     help="device of every agent's learner and inference (default cpu)")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--device") == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError("--device cuda: torch sees no CUDA device")


@pytest.fixture
def device(request: pytest.FixtureRequest) -> torch.device:
    """The device chosen with ``--device``."""
    return torch.device(request.config.getoption("--device"))


@pytest.fixture(autouse=True)
def _agents_on_the_chosen_device(device: torch.device, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ``resolve_device`` of the package (the learner's and the agent's) answers with the
    chosen device."""
    import muzero_gym.agents.muzero  # noqa: F401  (imports every module that asks)
    import muzero_gym.learner

    original = muzero_gym.learner.resolve_device

    def resolve(name: str) -> torch.device:
        original(name)  # names are still checked
        return device

    for name, module in list(sys.modules.items()):
        if name.startswith("muzero_gym") and getattr(module, "resolve_device", None) is original:
            monkeypatch.setattr(module, "resolve_device", resolve)
