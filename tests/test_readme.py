"""The README's code runs as written: every Python block, and the command that trains the
README's own env. Training is cut to a few dozen env steps (the code, not the learning, is
what is checked here)."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.cli import main

README = (Path(__file__).parent.parent / "README.md").read_text()


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, re.S)


@pytest.fixture
def short_learning(monkeypatch, tmp_path):
    learn = MuZeroAgent.learn

    def short(self, total_env_steps, progress=None):
        return learn(self, min(total_env_steps, self.env_steps + 40), progress=False)

    monkeypatch.setattr(MuZeroAgent, "learn", short)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_every_python_block_runs(short_learning):
    blocks = python_blocks()
    assert len(blocks) >= 2
    for block in blocks:
        first = block.splitlines()[0]
        if re.fullmatch(r"# \w+\.py", first):  # a module of the user's: saved under its name
            (short_learning / first[2:]).write_text(block)
            exec(compile(block, first[2:], "exec"), {"__name__": first[2:-3]})
        else:
            exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
    assert (short_learning / "agent.pt").exists()


def test_the_own_env_command_runs_as_written(short_learning, capsys, monkeypatch):
    [block] = [b for b in python_blocks() if b.startswith("# corridor_envs.py")]
    (short_learning / "corridor_envs.py").write_text(block)
    # the console script does not have the current folder on sys.path; muzero-gym adds it
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(short_learning))])
    monkeypatch.delitem(sys.modules, "corridor_envs", raising=False)
    commands = re.findall(r"^muzero-gym train corridor_envs:.*$", README, re.M)
    assert commands
    for command in commands:
        assert main(shlex.split(command)[1:] + ["--no-progress"]) == 0
    assert "done: " in capsys.readouterr().out
