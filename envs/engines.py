"""Opponents that are real engines: GNU Go over GTP, Stockfish over UCI, GNU Shogi over its own
text interface.

Each runs the engine's binary as a child process and, for every move asked of it, sets up the
game's moves so far and asks for the engine's move (``choose(env, legal_mask)``, as every
opponent of :mod:`muzero_gym.envs.opponents`). Binaries are found on PATH or in ``/usr/games``
(where Debian installs them: ``apt-get install gnugo stockfish gnushogi``), or given as a path;
a missing one is an :class:`EngineNotFound` that says how to install it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Callable

import gymnasium as gym
import numpy as np

INSTALL = {"gnugo": "gnugo", "stockfish": "stockfish", "gnushogi": "gnushogi"}
TIMEOUT_S = 60.0


class EngineNotFound(FileNotFoundError):
    """The engine's binary is not installed (or not at the path given)."""


class EngineError(RuntimeError):
    """The engine answered something the protocol does not allow, or stopped answering."""


def find_engine(name: str, path: str | None = None) -> str:
    """The engine binary: ``path`` if given, else ``name`` on PATH or in /usr/games."""
    if path:
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise EngineNotFound(f"no {name} engine at {path}")
        return path
    found = shutil.which(name) or shutil.which(name, path="/usr/games")
    if found is None:
        raise EngineNotFound(f"{name} is not installed: apt-get install {INSTALL.get(name, name)}"
                             " (or give the binary's path)")
    return found


class EngineProcess:
    """A child process spoken to line by line (with a timeout on every answer)."""

    def __init__(self, argv: list[str]):
        self.argv = argv
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True, bufsize=1)
        self._lock = threading.Lock()

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise EngineError(f"{self.argv[0]} stopped ({e})") from None

    def read_until(self, done: Callable[[str], bool], timeout: float = TIMEOUT_S) -> list[str]:
        """Lines up to and including the first for which ``done`` is true."""
        assert self.process.stdout is not None
        lines: list[str] = []
        result: list[BaseException] = []

        def reader():
            try:
                while True:
                    line = self.process.stdout.readline()
                    if not line:
                        raise EngineError(f"{self.argv[0]} closed its output")
                    lines.append(line.rstrip("\n"))
                    if done(lines[-1]):
                        return
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                result.append(e)

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            self.close()
            raise EngineError(f"{self.argv[0]} did not answer within {timeout:g} s")
        if result:
            raise result[0]
        return lines

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


class GTPOpponent:
    """GNU Go (or any GTP engine) at ``level`` (GNU Go: 1-10)."""

    name = "gnugo"

    def __init__(self, level: int = 1, path: str | None = None, seed: int | None = None):
        binary = find_engine("gnugo", path)
        # The env scores by area with every stone on the board alive (Tromp-Taylor): GNU Go
        # must capture the dead stones before it passes, and play every game out (resigning is
        # not a move of the env).
        argv = [binary, "--mode", "gtp", "--level", str(level), "--never-resign",
                "--capture-all-dead"]
        if seed is not None:
            argv += ["--seed", str(seed % 2**31)]
        self.engine = EngineProcess(argv)
        self.level = level

    def command(self, text: str) -> str:
        self.engine.send(text)
        lines = self.engine.read_until(lambda line: line == "" )
        answer = " ".join(line for line in lines if line)
        if answer.startswith("?"):
            raise EngineError(f"GTP engine refused {text!r}: {answer[1:].strip()}")
        if not answer.startswith("="):
            raise EngineError(f"GTP engine answered {answer!r} to {text!r}")
        return answer[1:].strip()

    def choose(self, env: gym.Env, legal_mask: np.ndarray) -> int:
        go = env.unwrapped
        state = go.get_state()
        self.command(f"boardsize {go.size}")
        self.command("clear_board")
        self.command(f"komi {go.komi}")
        for ply, action in enumerate(state.moves):
            self.command(f"play {'B' if ply % 2 == 0 else 'W'} {go.vertex(action)}")
        vertex = self.command(f"genmove {'B' if state.to_play == 0 else 'W'}")
        if vertex.lower() == "resign":
            raise EngineError("the GTP engine resigned, which the env cannot play: start it "
                              "with resignation off")
        action = go.pass_action if vertex.lower() == "pass" else go.action(vertex)
        if not legal_mask[action]:
            raise EngineError(f"GTP engine played the illegal {vertex}")
        return action

    def close(self) -> None:
        self.engine.close()


class UCIOpponent:
    """Stockfish (or any UCI engine) at ``Skill Level`` ``level`` (0-20), ``nodes`` per move."""

    name = "stockfish"

    def __init__(self, level: int = 0, nodes: int = 1000, path: str | None = None,
                 seed: int | None = None):
        binary = find_engine("stockfish", path)
        self.engine = EngineProcess([binary])
        self.nodes = nodes
        self.engine.send("uci")
        self.engine.read_until(lambda line: line == "uciok")
        self.engine.send(f"setoption name Skill Level value {level}")
        self.engine.send("isready")
        self.engine.read_until(lambda line: line == "readyok")

    def choose(self, env: gym.Env, legal_mask: np.ndarray) -> int:
        chess_env = env.unwrapped
        board = chess_env.state.board
        moves = " ".join(move.uci() for move in board.move_stack)
        self.engine.send(f"position fen {board.root().fen()}" + (f" moves {moves}" if moves
                                                                 else ""))
        self.engine.send(f"go nodes {self.nodes}")
        lines = self.engine.read_until(lambda line: line.startswith("bestmove"))
        uci = lines[-1].split()[1]
        action = chess_env.action_of_uci(uci)
        if action is None or not legal_mask[action]:
            raise EngineError(f"UCI engine played the illegal {uci}")
        return action

    def close(self) -> None:
        self.engine.close()


class GnuShogiOpponent:
    """GNU Shogi at search ``depth``, over its own text interface: ``depth`` (the value on the
    next line), ``force`` (moves entered for both sides, in USI notation), ``go`` (it moves for
    the side to move and prints ``N. ... <move>``). A fresh process per move keeps each game's
    moves apart when many games are played at once."""

    name = "gnushogi"

    def __init__(self, depth: int = 1, path: str | None = None, seed: int | None = None):
        self.binary = find_engine("gnushogi", path)
        self.depth = max(1, depth)

    def choose(self, env: gym.Env, legal_mask: np.ndarray) -> int:
        shogi_env = env.unwrapped
        engine = EngineProcess([self.binary])
        try:
            engine.read_until(lambda line: line.startswith("GNU Shogi"))
            engine.send("depth")
            engine.send(str(self.depth))
            engine.send("force")
            for usi in shogi_env.usi_moves():
                engine.send(usi)
            engine.send("go")
            lines = engine.read_until(lambda line: "..." in line)
        finally:
            engine.close()
        usi = lines[-1].split("...", 1)[1].split()[0]
        action = shogi_env.action_of_usi(usi)
        if action is None or not legal_mask[action]:
            raise EngineError(f"GNU Shogi played {usi!r}, not a legal move here")
        return action

    def close(self) -> None:
        pass
