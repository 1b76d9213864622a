"""Engine protocols, so that GUIs and tournament managers can run a trained agent: GTP for Go,
UCI for chess, USI for shogi.

Each frontend reads commands from a text stream and answers on another (stdin and stdout for
``muzero-gym gtp|uci|usi RUN``), keeps the game's moves, and answers a move request with the
move the agent's play-time search picks (``search.eval_simulations``; UCI's ``go nodes N``
sets the simulations of that search). Malformed commands and illegal moves get the protocol's
error answer; the engine keeps running.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from muzero_gym.environment import make_env

if TYPE_CHECKING:
    from muzero_gym.agents.muzero import MuZeroAgent

PROGRAM = "muzero-gym"


def agent_move(agent: MuZeroAgent, env: Any, observation: Any, info: dict) -> int:
    """The move the agent's play-time search picks in the env's current position."""
    game = agent.new_game()
    game.start(observation, info)
    return int(agent.search_games([game], [env]).greedy_actions()[0])


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("muzero-gym")
    except Exception:  # noqa: BLE001 - not installed as a distribution
        return "0"


class _Frontend:
    """A game the frontend replays from its move list (cheap next to a search)."""

    def __init__(self, agent: MuZeroAgent):
        self.agent = agent
        self.env = make_env(agent.config.env)
        self.moves: list[int] = []
        self.observation, self.info = self.env.reset()

    def replay(self, moves: list[int]) -> None:
        """Sets the game to ``moves`` from the start (ValueError if one is illegal)."""
        self.observation, self.info = self.env.reset()
        played = []
        for action in moves:
            if not self.info["action_mask"][action]:
                self.observation, self.info = self.env.reset()
                for again in played:
                    self.observation, _, _, _, self.info = self.env.step(again)
                self.moves = played
                raise ValueError("illegal move")
            self.observation, _, _, _, self.info = self.env.step(action)
            played.append(action)
        self.moves = played

    def play(self, action: int) -> None:
        if not self.info["action_mask"][action] or self.env.unwrapped.state.done:
            raise ValueError("illegal move")
        self.observation, _, _, _, self.info = self.env.step(action)
        self.moves.append(action)

    def best(self, simulations: int = 0) -> int:
        """The agent's move here, searching ``simulations`` (0: its play-time default)."""
        if not simulations:
            return agent_move(self.agent, self.env, self.observation, self.info)
        default = self.agent.config.search.eval_simulations
        self.agent.set_eval_simulations(simulations)
        try:
            return agent_move(self.agent, self.env, self.observation, self.info)
        finally:
            self.agent.set_eval_simulations(default)


class GTPEngine(_Frontend):
    """Go Text Protocol 2 (``boardsize``, ``clear_board``, ``komi``, ``play``, ``genmove``,
    ``final_score``, ``showboard``, ``undo`` and the administrative commands)."""

    COMMANDS = ("protocol_version", "name", "version", "known_command", "list_commands",
                "quit", "boardsize", "clear_board", "komi", "play", "genmove", "final_score",
                "showboard", "undo")

    def handle(self, line: str) -> tuple[bool, str]:
        """(success, answer) for one command line (without its optional id)."""
        words = line.split()
        command, args = words[0].lower(), words[1:]
        go = self.env.unwrapped
        if command == "protocol_version":
            return True, "2"
        if command == "name":
            return True, PROGRAM
        if command == "version":
            return True, _version()
        if command == "known_command":
            return True, "true" if args and args[0] in self.COMMANDS else "false"
        if command == "list_commands":
            return True, "\n".join(self.COMMANDS)
        if command == "quit":
            return True, ""
        if command == "boardsize":
            if not args or not args[0].isdigit() or int(args[0]) != go.size:
                return False, f"unacceptable size (this agent plays {go.size}x{go.size})"
            self.replay([])
            return True, ""
        if command == "clear_board":
            self.replay([])
            return True, ""
        if command == "komi":
            try:
                komi = float(args[0])
            except (IndexError, ValueError):
                return False, "syntax error"
            self.env.unwrapped.komi = komi
            return True, ""
        if command == "play":
            if len(args) != 2 or args[0].lower()[:1] not in ("b", "w"):
                return False, "syntax error"
            try:
                action = go.action(args[1])
            except ValueError:
                return False, "syntax error"
            try:
                self._to_move(args[0])
                self.play(action)
            except ValueError:
                return False, "illegal move"
            return True, ""
        if command == "genmove":
            if len(args) != 1 or args[0].lower()[:1] not in ("b", "w"):
                return False, "syntax error"
            if go.state.done:
                return False, "the game is over"
            self._to_move(args[0])
            action = self.best()
            self.play(action)
            return True, go.vertex(action)
        if command == "final_score":
            score = go.final_score(go.state)
            return True, "0" if score == 0 else f"{'B' if score > 0 else 'W'}+{abs(score):g}"
        if command == "showboard":
            return True, "\n" + go.board_text(go.state)
        if command == "undo":
            if not self.moves:
                return False, "cannot undo"
            self.replay(self.moves[:-1])
            return True, ""
        return False, "unknown command"

    def _to_move(self, color: str) -> None:
        """GTP lets a colour play twice (handicap stones, setups): the other side passes."""
        wanted = 0 if color.lower().startswith("b") else 1
        go = self.env.unwrapped
        if go.state.to_play != wanted and not go.state.done:
            self.play(go.pass_action)

    def run(self, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout) -> None:
        for raw in stdin:
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            words = line.split()
            ident = ""
            if words[0].isdigit():
                ident, line = words[0], " ".join(words[1:])
                if not line:
                    continue
            ok, answer = self.handle(line)
            stdout.write(f"{'=' if ok else '?'}{ident} {answer}".rstrip() + "\n\n")
            stdout.flush()
            if ok and line.split()[0].lower() == "quit":
                return


class UCIEngine(_Frontend):
    """Universal Chess Interface (``uci``, ``isready``, ``ucinewgame``, ``position`` with
    ``startpos`` or ``fen`` and ``moves``, ``go`` with ``nodes``/``movetime``, ``quit``)."""

    def run(self, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout) -> None:
        def say(text: str) -> None:
            stdout.write(text + "\n")
            stdout.flush()

        chess_env = self.env.unwrapped
        for raw in stdin:
            words = raw.split()
            if not words:
                continue
            command = words[0]
            if command == "uci":
                say(f"id name {PROGRAM} {_version()}")
                say("id author muzero-gym")
                say("uciok")
            elif command == "isready":
                say("readyok")
            elif command == "ucinewgame":
                self.replay([])
            elif command == "position":
                self._position(words[1:], chess_env, say)
            elif command == "go":
                if chess_env.state.done or not self.info["action_mask"].any():
                    say("bestmove 0000")
                    continue
                simulations = self._simulations(words[1:])
                start = time.perf_counter()
                action = self.best(simulations)
                elapsed = time.perf_counter() - start
                searched = simulations or self.agent.acting_search.settings.num_simulations
                self._seconds_per_simulation = elapsed / searched
                say(f"info nodes {searched} time {int(elapsed * 1000)}")
                say(f"bestmove {chess_env.uci_of_action(action)}")
            elif command == "quit":
                return
            # other commands (setoption, stop, ponderhit, debug) need no answer

    def _position(self, words: list[str], chess_env: Any, say) -> None:
        if not words:
            return
        if words[0] == "startpos":
            fen, rest = None, words[1:]
        elif words[0] == "fen":
            end = words.index("moves") if "moves" in words else len(words)
            fen, rest = " ".join(words[1:end]), words[end:]
        else:
            say("info string position needs startpos or fen")
            return
        try:
            self.observation, self.info = self.env.reset(options={"fen": fen} if fen else None)
        except ValueError as e:
            say(f"info string bad fen: {e}")
            return
        self.moves = []
        if rest and rest[0] == "moves":
            for uci in rest[1:]:
                action = chess_env.action_of_uci(uci)
                try:
                    if action is None:
                        raise ValueError(uci)
                    self.play(action)
                except ValueError:
                    say(f"info string illegal move {uci}")
                    return

    _seconds_per_simulation: float | None = None

    def _simulations(self, words: list[str]) -> int:
        """``go nodes N`` searches N simulations; ``go movetime T`` (ms) as many as fit at the
        agent's own pace (measured on the first search); otherwise the agent's default."""
        if "nodes" in words:
            try:
                return max(1, int(words[words.index("nodes") + 1]))
            except (IndexError, ValueError):
                return 0
        if "movetime" in words:
            try:
                budget = int(words[words.index("movetime") + 1]) / 1000
            except (IndexError, ValueError):
                return 0
            if self._seconds_per_simulation is None:
                return 0
            return max(1, int(budget / self._seconds_per_simulation))
        return 0


class USIEngine(_Frontend):
    """Universal Shogi Interface (``usi``, ``isready``, ``usinewgame``, ``position`` with
    ``startpos`` or ``sfen`` and ``moves``, ``go``, ``quit``)."""

    def run(self, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout) -> None:
        def say(text: str) -> None:
            stdout.write(text + "\n")
            stdout.flush()

        shogi_env = self.env.unwrapped
        for raw in stdin:
            words = raw.split()
            if not words:
                continue
            command = words[0]
            if command == "usi":
                say(f"id name {PROGRAM} {_version()}")
                say("id author muzero-gym")
                say("usiok")
            elif command == "isready":
                say("readyok")
            elif command == "usinewgame":
                self.replay([])
            elif command == "position":
                self._position(words[1:], shogi_env, say)
            elif command == "go":
                if shogi_env.state.done or not self.info["action_mask"].any():
                    say("bestmove resign")
                    continue
                action = self.best()
                say(f"bestmove {shogi_env.usi_of_action(action)}")
            elif command == "quit":
                return

    def _position(self, words: list[str], shogi_env: Any, say) -> None:
        if not words:
            return
        if words[0] == "startpos":
            sfen, rest = None, words[1:]
        elif words[0] == "sfen":
            end = words.index("moves") if "moves" in words else len(words)
            sfen, rest = " ".join(words[1:end]), words[end:]
        else:
            say("info string position needs startpos or sfen")
            return
        try:
            self.observation, self.info = self.env.reset(
                options={"sfen": sfen} if sfen else None)
        except ValueError as e:
            say(f"info string bad sfen: {e}")
            return
        self.moves = []
        if rest and rest[0] == "moves":
            for usi in rest[1:]:
                action = shogi_env.action_of_usi(usi)
                try:
                    if action is None:
                        raise ValueError(usi)
                    self.play(action)
                except ValueError:
                    say(f"info string illegal move {usi}")
                    return

