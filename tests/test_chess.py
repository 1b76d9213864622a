"""Chess on python-chess: AlphaZero's 4,672 moves, draws by the rules, planes, UCI over pipes,
and Stockfish as an opponent."""

from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest

chess = pytest.importorskip("chess", reason="the [chess] extra is not installed")

from gymnasium.utils.env_checker import check_env  # noqa: E402

from muzero_gym.envs.board import IllegalMoveError  # noqa: E402
from muzero_gym.envs.chess_game import (  # noqa: E402
    NUM_ACTIONS,
    ChessEnv,
    _checking_moves,
    decode_action,
    encode_move,
)


def test_every_legal_move_has_one_action_and_back():
    env = ChessEnv()
    rng = np.random.default_rng(0)
    positions = ["rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",
                 "r3k2r/pPppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R b KQkq - 0 1",
                 "8/2P5/8/8/8/8/5p2/K6k w - - 0 1", "8/2P5/8/8/8/8/5p2/K6k b - - 0 1"]
    for fen in positions:
        board = chess.Board(fen)
        for _ in range(30):
            if board.is_game_over():
                break
            actions = [encode_move(m, board.turn) for m in board.legal_moves]
            assert len(set(actions)) == len(actions) and max(actions) < NUM_ACTIONS
            for move, action in zip(board.legal_moves, actions):
                assert decode_action(action, board) == move
            mask = env.legal_mask(env.initial_state(board.fen()))
            assert np.flatnonzero(mask).tolist() == sorted(actions)
            board.push(list(board.legal_moves)[int(rng.integers(board.legal_moves.count()))])


def test_promotions_queen_by_a_queen_move_and_underpromotions_by_their_own():
    board = chess.Board("8/2P5/8/8/8/8/5p2/K6k w - - 0 1")
    queen = chess.Move.from_uci("c7c8q")
    knight = chess.Move.from_uci("c7c8n")
    assert encode_move(queen, chess.WHITE) % 73 < 56  # one square north
    assert encode_move(knight, chess.WHITE) % 73 >= 64
    assert decode_action(encode_move(queen, chess.WHITE), board) == queen
    board = chess.Board("8/2P5/8/8/8/8/5p2/K6k b - - 0 1")
    under = chess.Move.from_uci("f2f1r")
    # Black's moves are seen from Black's side: f2-f1 is a move up the board for it
    assert encode_move(under, chess.BLACK) == encode_move(chess.Move.from_uci("f7f8r"),
                                                          chess.WHITE)
    assert decode_action(encode_move(under, chess.BLACK), board) == under


def play_uci(env: ChessEnv, *moves: str):
    out = None
    for uci in moves:
        out = env.step(env.action_of_uci(uci))
    return out


def test_checkmate_rewards_the_mover_and_ends_the_game():
    env = ChessEnv()
    env.reset()
    _, reward, done, _, _ = play_uci(env, "f2f3", "e7e5", "g2g4")
    assert reward == 0 and not done
    _, reward, done, _, info = play_uci(env, "d8h4")  # fool's mate
    assert done and reward == 1.0 and env.state.winner == 1
    assert env.state.result == "checkmate" and info["action_mask"].all()


def test_a_long_game_keeps_its_ply_count_and_its_repetitions():
    """Positions keep only the moves since the last capture or pawn move; the game still ends
    by a repetition of reversible moves late in a game, and at max_moves plies."""
    env = ChessEnv(max_moves=30)
    env.reset()
    shuffle = ["g1f3", "g8f6", "f3g1", "f6g8"]
    play_uci(env, "e2e4", "e7e5", *shuffle)  # the start after e4 e5: twice
    assert not env.state.done and len(env.state.board.move_stack) == 4
    _, _, done, _, _ = play_uci(env, *shuffle)  # three times
    assert done and env.state.result == "threefold repetition"
    env.reset()
    play_uci(env, "e2e4", "e7e5", *shuffle, "d2d4", "d7d5", *shuffle, "c2c4", "c7c6")
    assert env.state.plies == 14 and len(env.state.board.move_stack) == 1
    knights = ["b1c3", "b8a6", "c3b1", "a6b8"]
    play_uci(env, *knights)
    assert not env.state.done
    _, _, done, _, _ = play_uci(env, *knights)
    assert done and env.state.result == "threefold repetition" and env.state.plies == 22
    env = ChessEnv(max_moves=6)
    env.reset()
    _, _, done, _, _ = play_uci(env, "e2e4", "e7e5", *shuffle)
    assert done and env.state.result == "6 moves" and env.state.plies == 6


@pytest.mark.parametrize("fen, moves, result", [
    ("7k/5Q2/6K1/8/8/8/8/8 b - - 0 1", [], "stalemate"),
    ("8/8/8/4k3/8/8/3BK3/8 w - - 0 1", [], "insufficient material"),
    ("4k3/8/8/8/8/8/4K3/R7 w - - 99 80", ["a1a2"], "fifty moves"),
    ("4k3/8/8/8/8/8/4K3/R7 w - - 0 1", ["a1a2", "e8d8", "a2a1", "d8e8", "a1a2", "e8d8", "a2a1",
                                        "d8e8"], "threefold repetition"),
])
def test_draws_by_the_rules(fen, moves, result):
    env = ChessEnv()
    env.reset(options={"fen": fen})
    if result == "stalemate" or result == "insufficient material":
        assert env.state.done and env.state.result == result and env.state.winner is None
        return
    _, reward, done, _, _ = play_uci(env, *moves)
    assert done and reward == 0.0 and env.state.result == result and env.state.winner is None


def test_max_moves_ends_the_game_as_a_draw():
    env = ChessEnv(max_moves=4)
    env.reset()
    _, reward, done, _, _ = play_uci(env, "g1f3", "g8f6", "f3g1", "f6g8")
    assert done and reward == 0.0 and env.state.winner is None


def test_planes_follow_the_mover():
    env = ChessEnv()
    obs, _ = env.reset()
    assert obs.shape == (119, 8, 8)
    assert obs[0, 6].sum() == 8 and obs[6, 1].sum() == 8  # own pawns on rank 2 (row 6)
    assert obs[-7].all() and obs[-5].all() and obs[-1].sum() == 0
    obs, *_ = play_uci(env, "e2e4")  # Black to move: its pawns now sit on the second row from
    assert obs[0, 6].sum() == 8 and obs[6, 1].sum() == 7  # the bottom, White's moved one
    assert obs[6, 3, 4] == 1  # e4 from Black's side: row 3, file e
    assert obs[14 + 6, 1].sum() == 8  # one position back, White's pawns (opponent) all home
    assert obs[-7].sum() == 0


def test_illegal_moves_are_refused_and_the_checker_passes():
    env = ChessEnv()
    env.reset()
    with pytest.raises(IllegalMoveError):
        env.step(env.action_of_san("Nf3") + 1)
    check_env(ChessEnv(), skip_render_check=True)
    new, obs, rewards, done, masks = env.simulate([env.get_state()] * 2, np.array(
        [env.action_of_uci("e2e4"), env.action_of_uci("d2d4")]))
    assert obs.shape == (2, 119, 8, 8) and masks.sum(axis=1).tolist() == [20, 20]
    assert env.state.board.ply() == 0


TINY_CHESS = ["search.num_simulations=3", "search.eval_simulations=3", "env.num_envs=2",
              "model.num_channels=8", "model.num_blocks=1"]


@pytest.fixture(scope="module")
def chess_checkpoint(tmp_path_factory):
    from muzero_gym.agents.muzero import MuZeroAgent
    from muzero_gym.config import load_config

    path = tmp_path_factory.mktemp("chess") / "agent.pt"
    MuZeroAgent(load_config("chess_cpu", TINY_CHESS)).save(path)
    return path


def test_uci_engine_over_pipes(chess_checkpoint):
    commands = ["uci", "isready", "ucinewgame", "position startpos moves e2e4 e7e5",
                "go nodes 3", "position fen 7k/5Q2/6K1/8/8/8/8/8 b - - 0 1", "go",
                "position startpos moves e2e5", "quit"]
    done = subprocess.run([sys.executable, "-m", "muzero_gym.cli", "uci",
                           str(chess_checkpoint)], input="\n".join(commands) + "\n",
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("id name muzero-gym") and "uciok" in lines and "readyok" in lines
    best = [line.split()[1] for line in lines if line.startswith("bestmove")]
    board = chess.Board()
    board.push_uci("e2e4")
    board.push_uci("e7e5")
    assert chess.Move.from_uci(best[0]) in board.legal_moves
    assert best[1] == "0000"  # stalemate: no move
    assert any("illegal move e2e5" in line for line in lines)


def test_stockfish_plays_legal_moves_against_the_agent(chess_checkpoint):
    from muzero_gym.agents.muzero import MuZeroAgent
    from muzero_gym.envs.opponents import make_opponent

    if shutil.which("stockfish") is None and shutil.which("stockfish", path="/usr/games") is None:
        pytest.skip("Stockfish is not installed (apt-get install stockfish)")
    agent = MuZeroAgent.load(chess_checkpoint)
    opponent = make_opponent("stockfish", level=0, seed=0)
    try:
        result = agent.play_against(opponent, 2, seed=0)
    finally:
        opponent.close()
    assert result.games == 2 and sum(result.losses) + sum(result.draws) >= 1


@pytest.mark.parametrize("fen, mate", [
    ("6k1/5ppp/8/8/8/8/8/R5K1 w - - 0 1", "Ra8#"),  # White to move
    ("r5k1/8/8/8/8/8/5PPP/6K1 b - - 0 1", "Ra1#"),  # the same with the colours swapped
])
def test_the_true_rules_search_mates_in_one_with_either_colour(fen, mate):
    from muzero_gym.agents.muzero import MuZeroAgent
    from muzero_gym.config import load_config

    agent = MuZeroAgent(load_config("chess_cpu", ["search.eval_simulations=64",
                                                  "model.num_channels=8", "model.num_blocks=1"]))
    env = ChessEnv()
    observation, info = env.reset(options={"fen": fen})
    assert env.san_of_action(agent.predict(observation, info=info, env=env)) == mate


@pytest.mark.parametrize("fen, mate", [
    ("6k1/5ppp/8/8/8/8/8/R5K1 w - - 0 1", "Ra8#"),  # back rank
    ("3rk3/3p1p2/8/4N3/8/8/8/4R1K1 w - - 0 1", "Ng6#"),  # the knight uncovers the rook
    ("k7/2P5/1K6/8/8/8/8/8 w - - 0 1", "c8=Q#"),  # a promotion
    ("r5k1/8/8/8/8/8/5PPP/6K1 b - - 0 1", "Ra1#"),  # Black to move
])
def test_mates_in_one_are_proven_wins_for_the_player_to_move(fen, mate):
    env = ChessEnv()
    env.reset(options={"fen": fen})
    mating, other_side = env.get_state(), env.initial_state(fen.replace(
        " w ", " x ").replace(" b ", " w ").replace(" x ", " b "))
    env.step(env.action_of_san(mate))
    assert env.state.result == "checkmate"  # the example is what it says
    assert env.proven_values([mating]).tolist() == [1.0]
    assert np.isnan(env.proven_values([other_side, env.state, env.initial_state()])).all()


def test_every_checking_move_is_among_those_tried_for_a_mate():
    """On positions of random games (castling, en passant, promotions and discovered checks
    among them), every legal move that gives check is one the mate finder tries."""
    rng = np.random.default_rng(0)
    board, checks = chess.Board(), 0
    for _ in range(3000):
        if board.is_game_over():
            board = chess.Board()
        tried = set(_checking_moves(board))
        giving_check = {m for m in board.legal_moves if board.gives_check(m)}
        assert giving_check <= tried <= set(board.legal_moves), board.fen()
        checks += len(giving_check)
        moves = list(board.legal_moves)
        board.push(moves[rng.integers(len(moves))])
    assert checks > 1000
