"""Shogi on cshogi: AlphaZero's 11,259 moves (drops and promotions included), mate, repetition
and perpetual check, the planes, USI over pipes and GNU Shogi as an opponent."""

from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest

cshogi = pytest.importorskip("cshogi", reason="the [shogi] extra is not installed")

from gymnasium.utils.env_checker import check_env  # noqa: E402

from muzero_gym.envs.board import IllegalMoveError  # noqa: E402
from muzero_gym.envs.shogi_game import NUM_ACTIONS, ShogiEnv, encode_move  # noqa: E402


def play_usi(env: ShogiEnv, *moves: str):
    out = None
    for usi in moves:
        action = env.action_of_usi(usi)
        assert action is not None, usi
        out = env.step(action)
    return out


def test_every_legal_move_has_one_action_drops_and_promotions_included():
    rng = np.random.default_rng(0)
    positions = [None,  # pieces in hand on both sides, promotions available:
                 "lnsgkgsnl/1r5b1/pppppp1pp/6p2/9/2P6/PP1PPPPPP/1B5R1/LNSGKGSNL b Pp 3",
                 "4k4/9/9/9/9/9/9/9/4K4 w RBGSNLP2rbgsnlp 1"]
    for sfen in positions:
        board = cshogi.Board() if sfen is None else cshogi.Board(sfen)
        kinds = set()
        for _ in range(40):
            moves = list(board.legal_moves)
            if not moves:
                break
            white = board.turn == cshogi.WHITE
            actions = [encode_move(m, white) for m in moves]
            assert len(set(actions)) == len(actions) and max(actions) < NUM_ACTIONS
            kinds |= {a % 139 for a in actions}
            board.push(moves[int(rng.integers(len(moves)))])
        if sfen is not None and sfen.endswith("w RBGSNLP2rbgsnlp 1"):
            assert {132 + k for k in range(7)} <= kinds  # every kind of drop


def test_a_move_and_its_mirror_for_the_other_side_share_an_action():
    board = cshogi.Board()
    sente = board.move_from_usi("7g7f")
    board.push(sente)
    gote = board.move_from_usi("3c3d")  # the same pawn push seen from Gote's side
    assert encode_move(sente, False) == encode_move(gote, True)


def test_mate_rewards_the_mover():
    env = ShogiEnv(history=1)
    env.reset(options={"sfen": "4k4/9/4G4/9/9/9/9/9/4K4 b G 1"})
    _, reward, done, _, info = play_usi(env, "G*5b")  # head gold, supported: mate
    assert done and reward == 1.0 and env.state.winner == 0 and env.state.result == "checkmate"
    assert info["result"] == "checkmate"


def test_mates_in_one_are_proven_wins_for_the_player_to_move():
    env = ShogiEnv(history=1)
    states = []
    for sfen in ("4k4/9/4G4/9/9/9/9/9/4K4 b G 1",  # Sente to move: G*5b mates
                 "4k4/9/4G4/9/9/9/9/9/4K4 w G 1",  # Gote to move: no mate
                 "4k4/9/9/9/9/9/9/9/4K3r b G 1",  # Sente in check: not asked
                 None):
        env.reset(options=None if sfen is None else {"sfen": sfen})
        states.append(env.get_state())
    proven = env.proven_values(states)
    assert proven[0] == 1.0 and np.isnan(proven[1:]).all()


def test_the_search_takes_proven_values_over_the_networks():
    """Gote to move, king on 5a, Sente's gold on 5c and one in hand: after either king move
    Sente mates with a gold drop, so each child is worth +1 to Sente (to move there) whatever
    the network says; the positions without a proven value keep the network's."""
    import torch

    from muzero_gym.agents.muzero import MuZeroAgent
    from muzero_gym.config import load_config
    from muzero_gym.environment import make_env
    from muzero_gym.simulator import SimulatorSearchAdapter

    agent = MuZeroAgent(load_config("shogi_cpu", TINY_SHOGI))
    env = ShogiEnv(history=1)
    adapters = [SimulatorSearchAdapter(agent.network.eval(), agent.encoder,
                                       make_env(agent.config.env), agent.num_actions)
                for _ in range(2)]
    adapters[1]._proven_values = None  # the network's values alone
    start, info = env.reset()
    start_state, opening = env.get_state(), np.flatnonzero(info["action_mask"])[:2]
    obs, info = env.reset(options={"sfen": "4k4/9/4G4/9/9/9/9/9/4K4 w G 1"})
    moves = np.flatnonzero(info["action_mask"])
    assert len(moves) == 2  # 5a4a and 5a6a: 5b, 4b and 6b are the gold's
    roots = [start_state] * 2 + [env.get_state()] * 2
    images = np.stack([start, start, obs, obs])
    with torch.inference_mode():
        root_values = [a.initial(images, roots)[0] for a in adapters]
        children = [a.recurrent_fn(np.zeros(4, dtype=np.int64),
                                   np.concatenate([opening, moves]), 1)[1] for a in adapters]
    np.testing.assert_array_equal(root_values[0], root_values[1])  # nothing proven at the roots
    np.testing.assert_array_equal(children[0][:2], children[1][:2])
    assert children[0][2:].tolist() == [1.0, 1.0] and (children[1][2:] != 1.0).all()


def test_fourth_repetition_is_a_draw():
    env = ShogiEnv(history=1)
    env.reset()
    cycle = ["2h1h", "8b9b", "1h2h", "9b8b"]
    out = None
    for _ in range(3):
        assert not env.state.done
        out = play_usi(env, *cycle)
    _, reward, done, _, _ = out
    assert done and reward == 0.0 and env.state.winner is None
    assert env.state.result == "repetition"


def test_perpetual_check_loses_for_the_checking_side():
    # Sente's rook checks along the 5th file and back, Gote's king steps aside and back.
    env = ShogiEnv(history=1)
    env.reset(options={"sfen": "3k5/9/9/9/9/9/9/9/K7R b - 1"})
    play_usi(env, "1i6i")
    cycle = ["6a5a", "6i5i", "5a6a", "5i6i"]
    for _ in range(2):
        play_usi(env, *cycle)
        assert not env.state.done
    _, reward, done, _, info = play_usi(env, *cycle)  # the position after 1i6i, a fourth time
    assert done and env.state.result == "perpetual check" == info["result"]
    assert env.state.winner == 1 and reward == -1.0  # Sente checked every move: it loses


def test_planes_follow_the_mover_and_refuse_bad_input():
    env = ShogiEnv(history=2)
    obs, _ = env.reset()
    assert obs.shape == (92, 9, 9) and obs[-2].all()
    assert obs[0, 6].sum() == 9 and obs[14, 2].sum() == 9  # own pawns row 6, theirs row 2
    obs, *_ = play_usi(env, "7g7f")  # Gote to move, its own view: its pawns on row 6, Sente's
    assert obs[0, 6].sum() == 9 and obs[14, 2].sum() == 8 and obs[-2].sum() == 0  # on row 2
    assert obs[45 + 14, 2].sum() == 9  # one position back: Sente's pawns all home
    with pytest.raises(IllegalMoveError):
        env.step(0)
    check_env(ShogiEnv(history=1), skip_render_check=True)


TINY_SHOGI = ["search.num_simulations=3", "search.eval_simulations=3", "env.num_envs=2",
              "model.num_channels=8", "model.num_blocks=1",
              "env.kwargs={history = 1, max_moves = 40}"]


@pytest.fixture(scope="module")
def shogi_checkpoint(tmp_path_factory):
    from muzero_gym.agents.muzero import MuZeroAgent
    from muzero_gym.config import load_config

    path = tmp_path_factory.mktemp("shogi") / "agent.pt"
    MuZeroAgent(load_config("shogi_cpu", TINY_SHOGI)).save(path)
    return path


def test_usi_engine_over_pipes(shogi_checkpoint):
    commands = ["usi", "isready", "usinewgame", "position startpos moves 7g7f 3c3d", "go",
                "position startpos moves 7g7a", "quit"]
    done = subprocess.run([sys.executable, "-m", "muzero_gym.cli", "usi",
                           str(shogi_checkpoint)], input="\n".join(commands) + "\n",
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "usiok" in lines and "readyok" in lines
    best = [line.split()[1] for line in lines if line.startswith("bestmove")]
    board = cshogi.Board()
    board.push_usi("7g7f")
    board.push_usi("3c3d")
    assert board.move_from_usi(best[0]) in list(board.legal_moves)
    assert any("illegal move 7g7a" in line for line in lines)


def test_matches_say_how_each_game_ended(shogi_checkpoint):
    from muzero_gym.agents.muzero import MuZeroAgent
    from muzero_gym.envs.opponents import make_opponent

    agent = MuZeroAgent.load(shogi_checkpoint)  # max_moves = 40
    result = agent.play_against(make_opponent("random", seed=0), 4, seed=0)
    assert sum(map(sum, result.endings.values())) == result.games == 4
    for ending, (won, drawn, lost) in result.endings.items():
        assert ending in {"checkmate", "perpetual check", "repetition", "40 moves"}
        if ending in {"repetition", "40 moves"}:
            assert won == lost == 0
        else:
            assert drawn == 0
    assert "ended by (won/drawn/lost): " in result.summary()


def test_gnushogi_plays_legal_moves_against_the_agent(shogi_checkpoint):
    from muzero_gym.agents.muzero import MuZeroAgent
    from muzero_gym.envs.opponents import make_opponent

    if shutil.which("gnushogi") is None and shutil.which("gnushogi", path="/usr/games") is None:
        pytest.skip("GNU Shogi is not installed (apt-get install gnushogi)")
    agent = MuZeroAgent.load(shogi_checkpoint)
    opponent = make_opponent("gnushogi", level=1)
    result = agent.play_against(opponent, 2, seed=0)
    assert result.games == 2
