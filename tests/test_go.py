"""Go's rules on positions with known answers: captures, suicide, ko and superko, area scoring,
the end of the game, the planes, symmetries and coordinates."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import muzero_gym.envs  # noqa: F401  (registers the envs)
from muzero_gym.envs.board import IllegalMoveError
from muzero_gym.envs.go import GoEnv


def play(env: GoEnv, *vertices: str):
    """Plays the moves (Black first, alternating; "pass" passes); returns the last step."""
    out = None
    for vertex in vertices:
        out = env.step(env.action(vertex))
    return out


def stones(env: GoEnv) -> dict[str, int]:
    board = env.state.board
    return {env.vertex(r * env.size + c): int(board[r, c])
            for r in range(env.size) for c in range(env.size) if board[r, c]}


@pytest.fixture
def env():
    env = GoEnv(9)
    env.reset()
    return env


def test_coordinates_skip_i_and_round_trip(env):
    assert env.vertex(0) == "A9" and env.vertex(8) == "J9" and env.vertex(80) == "J1"
    assert env.action("d4") == (9 - 4) * 9 + 3 and env.action("PASS") == 81
    for action in range(82):
        assert env.action(env.vertex(action)) == action
    for bad in ("I5", "A10", "Z1", "D", "D0"):
        with pytest.raises(ValueError):
            env.action(bad)


def test_a_surrounded_stone_is_captured(env):
    play(env, "D5", "E5", "E4", "pass", "E6", "pass")
    assert stones(env)["E5"] == 2
    _, reward, done, _, info = play(env, "F5")
    assert "E5" not in stones(env) and reward == 0.0 and not done
    # E5 is empty again, but among four Black stones: White may not play into it.
    assert not info["action_mask"][env.action("E5")] and info["action_mask"][env.action("A1")]


def test_suicide_is_illegal_unless_it_captures(env):
    # White to move at E5, which Black surrounds: no capture, so it would be suicide.
    play(env, "D5", "pass", "F5", "pass", "E4", "pass", "E6")
    assert env.state.to_play == 1 and not env._info()["action_mask"][env.action("E5")]
    with pytest.raises(IllegalMoveError):
        env.step(env.action("E5"))
    # White to move at A9, between Black B9 (whose last liberty A9 is) and Black A8: the move
    # has no liberty of its own until it captures B9, so it is legal.
    corner = GoEnv(9)
    corner.reset()
    play(corner, "B9", "C9", "A8", "B8", "pass")
    assert corner._info()["action_mask"][corner.action("A9")]
    play(corner, "A9")
    assert "B9" not in stones(corner) and stones(corner)["A9"] == 2


def test_simple_ko_cannot_be_retaken_at_once_but_after_a_threat():
    env = GoEnv(9)
    env.reset()
    # Black: D5 E6 E4; White: F5 G... the classic ko at E5/F5.
    play(env, "D5", "F6", "E6", "F4", "E4", "G5", "pass", "E5")
    # White E5 is in atari (D5, E6, E4 Black); Black captures at F5? No: F5 is empty and
    # surrounded by White F6, F4, G5 and White E5: Black F5 captures E5.
    _, _, _, _, info = play(env, "F5")
    assert "E5" not in stones(env) and stones(env)["F5"] == 1
    assert not info["action_mask"][env.action("E5")]  # immediate recapture: the same position
    play(env, "J1", "J2")  # a threat and its answer elsewhere
    assert env._info()["action_mask"][env.action("E5")]  # now legal
    play(env, "E5")
    assert "F5" not in stones(env)


def test_positional_superko_forbids_any_earlier_position(env):
    """A move whose resulting position (stones only) is in the game's history is illegal,
    whatever the path there: here the history is given the position that White D4 makes."""
    play(env, "C3")
    state = env.get_state()
    after, _ = env.play(state, env.action("D4"))
    assert env.legal_mask(state)[env.action("D4")]
    state.history = np.sort(np.append(state.history, np.uint64(after.position_hash)))
    mask = env.legal_mask(state)
    assert not mask[env.action("D4")] and mask[env.action("E4")] and mask[env.pass_action]


def test_area_scoring_counts_stones_and_surrounded_empty_points():
    env = GoEnv(9)
    env.reset()
    # Black walls off column E (9 stones): Black owns A-E (45 points), White F-J (36 points).
    for row in range(1, 10):
        play(env, f"E{row}", f"F{row}")
    assert env.final_score(env.state) == 45 - 36 - 7.5
    _, reward, done, _, _ = play(env, "pass")
    assert not done and reward == 0.0
    _, reward, done, _, info = play(env, "pass")  # White's pass ends it; Black won by 1.5
    assert done and env.state.winner == 0 and env.state.score == 1.5
    assert reward == -1.0  # the reward is the mover's: White passed and lost
    assert info["result"] == "two passes"


def test_proven_values_a_pass_that_ends_the_game_with_a_win():
    env = GoEnv(9)
    env.reset()
    assert np.isnan(env.proven_values([env.get_state()])).all()  # no pass yet
    play(env, "pass")  # White to move on an empty board: passing wins by komi
    won_by_komi = env.get_state()
    for row in range(1, 10):  # as above: Black 45 points, White 36, Black ahead by 1.5
        play(env, f"E{row}", f"F{row}")
    play(env, "pass")  # White to move after Black's pass, behind: nothing proven
    behind = env.get_state()
    play(env, "A1", "pass")  # Black to move after White's pass, ahead (A1 is Black's area)
    ahead = env.get_state()
    play(env, "pass")  # the game is over
    np.testing.assert_array_equal(
        env.proven_values([won_by_komi, behind, ahead, env.get_state()]),
        [1.0, np.nan, 1.0, np.nan])


def test_a_point_next_to_both_colours_is_nobodys():
    env = GoEnv(9)
    env.reset()
    play(env, "A1", "C1")
    # B1 touches Black A1 and White C1; every other empty point reaches both colours too.
    assert env.final_score(env.state) == 1 - 1 - 7.5


def test_max_moves_ends_and_scores_the_game():
    env = GoEnv(9, max_moves=4)
    env.reset()
    play(env, "E5", "pass", "D4")
    _, reward, done, _, info = play(env, "pass")
    assert done and env.state.num_moves == 4 and info["result"] == "4 moves"
    # Every empty point reaches Black stones only: Black's area is the whole board.
    assert env.state.winner == 0 and env.state.score == 81 - 7.5 and reward == -1.0


def test_planes_show_the_last_positions_from_the_movers_side():
    env = GoEnv(9)
    obs, _ = env.reset()
    assert obs.shape == (17, 9, 9) and obs[:16].sum() == 0 and obs[16].all()
    obs, *_ = play(env, "E5")  # White to move: its own stones in plane 0, Black's in plane 1
    r, c = divmod(env.action("E5"), 9)
    assert obs[1, r, c] == 1 and obs[0].sum() == 0 and obs[16].sum() == 0
    obs, *_ = play(env, "D4")  # Black to move; one move back: plane 2 (own), plane 3 (theirs)
    assert obs[0, r, c] == 1 and obs[2, r, c] == 1 and obs[3].sum() == 0 and obs[16].all()


def test_symmetries_map_legal_moves_and_planes_together(env):
    play(env, "C3", "G7", "D3", "A9")
    state = env.get_state()
    obs, mask = env.observe(state), env.legal_mask(state)
    for symmetry in env.symmetries():
        moved = state.copy()  # every stone of every kept board sent where the symmetry says
        for t in range(len(state.boards)):
            flat = np.zeros(81, dtype=np.int8)
            flat[symmetry.action_permutation[:81]] = state.boards[t].reshape(-1)
            moved.boards[t] = flat.reshape(9, 9)
        np.testing.assert_array_equal(env.observe(moved),
                                      symmetry.transform_observation(obs[None])[0])
        np.testing.assert_array_equal(env.legal_mask(moved), symmetry.permute_policy(mask))
        assert symmetry.action_permutation[81] == 81


def test_go_passes_the_env_checker_and_simulates_a_batch():
    check_env(gym.make("muzero_gym/Go-v0").unwrapped, skip_render_check=True)
    env = GoEnv(9)
    env.reset()
    states = [env.get_state() for _ in range(3)]
    new, obs, rewards, done, masks = env.simulate(states, np.array([0, 40, 81]))
    assert obs.shape == (3, 17, 9, 9) and masks.shape == (3, 82)
    assert [s.moves for s in new] == [(0,), (40,), (81,)] and not done.any()
    assert states[0].board.sum() == 0  # the inputs are unchanged
    with pytest.raises(IllegalMoveError):
        env.simulate([new[0]], np.array([0]))


TINY_GO = ["search.num_simulations=4", "search.eval_simulations=4", "env.num_envs=2",
           "model.num_channels=8", "model.num_blocks=1", "env.kwargs={size = 9, max_moves = 12}"]


@pytest.fixture(scope="module")
def go_checkpoint(tmp_path_factory):
    from muzero_gym.agents.muzero import MuZeroAgent
    from muzero_gym.config import load_config

    path = tmp_path_factory.mktemp("go") / "agent.pt"
    MuZeroAgent(load_config("go9_cpu", TINY_GO)).save(path)
    return path


def test_gtp_engine_over_pipes(go_checkpoint):
    """A GUI's session: set up, play, ask for moves, refuse what GTP refuses, score, quit."""
    import subprocess
    import sys

    commands = ["1 protocol_version", "name", "known_command genmove", "boardsize 19",
                "boardsize 9", "clear_board", "komi 6.5", "play B D4", "2 genmove W",
                "play B D4", "play B Z99", "frobnicate", "showboard", "undo", "final_score",
                "quit"]
    done = subprocess.run([sys.executable, "-m", "muzero_gym.cli", "gtp", str(go_checkpoint)],
                          input="\n".join(commands) + "\n", capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    answers = [block for block in done.stdout.split("\n\n") if block.strip()]
    assert len(answers) == len(commands)
    assert answers[0] == "=1 2" and answers[1] == "= muzero-gym" and answers[2] == "= true"
    assert answers[3].startswith("? unacceptable size") and answers[4] == "="
    env = GoEnv(9)
    move = answers[8].split()[1]
    assert answers[8].startswith("=2 ") and (move == "pass" or env.action(move) != env.action(
        "D4"))
    assert answers[9] == "? illegal move" and answers[10] == "? syntax error"
    assert answers[11] == "? unknown command"
    assert "A B C D E F G H J" in answers[12]
    assert answers[13] == "=" and answers[14].startswith(("= B+", "= W+", "= 0"))
    assert answers[15] == "="


def test_gnugo_plays_legal_moves_against_the_agent(go_checkpoint):
    import shutil

    from muzero_gym.agents.muzero import MuZeroAgent
    from muzero_gym.envs.opponents import make_opponent

    if shutil.which("gnugo") is None and shutil.which("gnugo", path="/usr/games") is None:
        pytest.skip("GNU Go is not installed (apt-get install gnugo)")
    agent = MuZeroAgent.load(go_checkpoint)
    opponent = make_opponent("gnugo", level=1, seed=0)
    try:
        result = agent.play_against(opponent, 2, seed=0)
    finally:
        opponent.close()
    assert result.games == 2
