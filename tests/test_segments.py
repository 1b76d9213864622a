"""Games sent to the replay in segments: exactly the targets of whole games once complete, the
documented bootstrap while running, bounded memory, learning before any game ends, and games in
progress kept across a stop."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from gymnasium import spaces

from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.config import ReplayConfig, load_config
from muzero_gym.game import Game, ObservationEncoder, stack_observations
from muzero_gym.replay import ReplayBuffer
from muzero_gym.segment import cut_segment

VECTOR = ObservationEncoder(spaces.Box(-100, 100, (2,)))
IMAGE = ObservationEncoder(spaces.Box(0, 255, (5, 4), dtype=np.uint8))
BOOL_PLANES = ObservationEncoder(spaces.Box(0, 1, (2, 5, 4), dtype=np.bool_))


def random_game(length: int, encoder=VECTOR, players=1, terminated=True, final_value=None,
                seed=0, stacked=1, stack_actions=False, actions=3) -> Game:
    rng = np.random.default_rng(seed)
    game = Game(actions, encoder, stacked, stack_actions, players)

    def observation():
        if encoder.is_image:
            return rng.integers(0, 256, (5, 4), dtype=np.uint8)
        if encoder.is_planes:
            return rng.random((2, 5, 4)) < 0.5
        return rng.normal(size=2)

    game.start(observation(), {"to_play": 0} if players == 2 else {})
    for i in range(length):
        policy = rng.dirichlet(np.ones(actions))
        game.store_search_statistics(float(rng.normal()), policy)
        end = i == length - 1
        info = {"to_play": (i + 1) % 2} if players == 2 else {}
        reward = float(rng.integers(-1, 2)) if players == 2 else float(rng.normal() * 3)
        game.record_step(int(rng.integers(actions)), reward, observation(), terminated and end,
                         (not terminated) and end, info)
    if final_value is not None:
        game.set_final_value(final_value)
    return game


def buffer(game: Game, td: int, k: int, capacity: int = 1000, mix: float = 0.0,
           clipping: bool = False, td_age: int = 0, prioritized: bool = True) -> ReplayBuffer:
    return ReplayBuffer(ReplayConfig(capacity=capacity, prioritized=prioritized),
                        num_actions=game.num_actions,
                        num_unroll_steps=k, td_steps=td, td_steps_age=td_age, discount=0.9,
                        reward_clipping=clipping,
                        search_value_mix=mix, encoder=game.encoder,
                        num_stacked_observations=game.num_stacked_observations,
                        stack_actions=game.stack_actions, num_players=game.num_players)


def send_in_segments(replay: ReplayBuffer, game: Game, cuts: list[int], source_id: int = 7,
                     context: int | None = None) -> None:
    """Sends ``game`` as self-play would: positions up to each cut, then the rest with the end
    (each segment cut from a copy trimmed as self-play trims its game)."""
    context = game.num_stacked_observations if context is None else context
    start = 0
    for cut in [*cuts, len(game)]:
        final = cut == len(game)
        part = _prefix(game, cut, final)
        part.trim(max(0, start - context))
        replay.add_segment(cut_segment(part, source_id, start, context, final))
        start = cut


def _prefix(game: Game, positions: int, final: bool) -> Game:
    """The game as it stood after ``positions`` actions (all of it when ``final``)."""
    part = Game(game.num_actions, game.encoder, game.num_stacked_observations,
                game.stack_actions, game.num_players)
    part.observations = game.observations[:positions + 1]
    part.legal_masks = game.legal_masks[:positions + 1]
    part.to_play_history = game.to_play_history[:positions + 1]
    for name in ("actions", "rewards", "root_values", "child_visits"):
        setattr(part, name, list(getattr(game, name)[:positions]))
    if final:
        part.terminated, part.truncated = game.terminated, game.truncated
        part.final_value = game.final_value
    return part


def assert_same_records(a: ReplayBuffer, b: ReplayBuffer) -> None:
    [ra], [rb] = a._records.values(), b._records.values()
    for name in ("values", "reward_sum", "bootstrap_scale", "bootstrap_index", "padded_actions"):
        np.testing.assert_array_equal(getattr(ra, name), getattr(rb, name), err_msg=name)
    for name, x, y in zip(ra.unroll._fields, ra.unroll, rb.unroll):
        np.testing.assert_array_equal(x, y, err_msg=name)
    np.testing.assert_array_equal(a._priority, b._priority)
    np.testing.assert_array_equal(a._slot_step, b._slot_step)
    for x, y in zip(_sample(a), _sample(b)):
        np.testing.assert_array_equal(x, y)


def _sample(replay: ReplayBuffer) -> list[np.ndarray]:
    batch = replay.sample(32, np.random.default_rng(3), with_bootstrap_inputs=True,
                          with_unrolled_inputs=True)
    return [batch.observations, batch.actions, batch.target_value, batch.target_reward,
            batch.target_policy, batch.value_mask, batch.policy_mask, batch.weights,
            batch.reward_sum, batch.bootstrap_scale, *batch.bootstrap.__dict__.values(),
            *batch.unrolled.__dict__.values()]


ENDINGS = [dict(terminated=True), dict(terminated=False, final_value=2.5),
           dict(terminated=False)]


@pytest.mark.parametrize("players", [1, 2])
@pytest.mark.parametrize("ending", range(3))
def test_a_game_sent_in_segments_has_exactly_the_targets_of_the_whole_game(players, ending):
    length = 7
    game = random_game(length, players=players, seed=players * 10 + ending, **ENDINGS[ending])
    cut_sets = [[c] for c in range(1, length)] + [list(range(1, length)), [2, 3, 6]]
    for td, k in itertools.product([1, 2, 6, 7, 9], [0, 1, 3, 8]):
        whole = buffer(game, td, k, mix=0.25)
        whole.add_game(game)
        for cuts in cut_sets:
            pieces = buffer(game, td, k, mix=0.25)
            send_in_segments(pieces, game, cuts)
            assert_same_records(pieces, whole)


@pytest.mark.parametrize("players", [1, 2])
@pytest.mark.parametrize("ending", range(3))
def test_older_samples_train_on_exactly_the_targets_of_a_shorter_horizon(players, ending):
    """EfficientZero's off-policy correction (``td_steps_age``): a position that arrived
    ``age`` learner steps ago gets the value targets, bootstrap states included, that the
    same game has with ``td_steps - age // td_steps_age`` (at least 1), whether the game is
    finished or still running, sent whole or in segments."""
    game = random_game(9, players=players, seed=40 + players * 10 + ending, **ENDINGS[ending])
    td, k, every = 4, 3, 10

    def batch(replay):
        return replay.sample(64, np.random.default_rng(3), with_bootstrap_inputs=True,
                             with_unrolled_inputs=True)

    for clock, horizon in [(0, 4), (9, 4), (10, 3), (25, 2), (30, 1), (500, 1)]:
        for running in (False, True):
            # uniform sampling: the first priorities depend on the horizon
            corrected = buffer(game, td, k, mix=0.25, clipping=players == 1, td_age=every,
                               prioritized=False)
            plain = buffer(game, horizon, k, mix=0.25, clipping=players == 1, prioritized=False)
            if running:  # positions 0 .. 5 received, the game goes on
                for replay in (corrected, plain):
                    replay.add_segment(cut_segment(_prefix(game, 6, False), 1, 0, 1))
            else:
                send_in_segments(corrected, game, [3, 6])
                plain.add_game(game)
            corrected.clock = plain.clock = clock
            a, b = batch(corrected), batch(plain)
            np.testing.assert_array_equal(a.td_horizons, horizon)
            np.testing.assert_array_equal(a.slots, b.slots)
            for name in ("target_value", "reward_sum", "bootstrap_scale", "target_reward",
                         "value_mask"):
                np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
            for x, y in zip(a.bootstrap.__dict__.values(), b.bootstrap.__dict__.values()):
                np.testing.assert_array_equal(x, y)


def test_stacked_images_and_clipped_rewards_in_segments_equal_the_whole_game():
    game = random_game(9, encoder=IMAGE, stacked=3, stack_actions=True, seed=4)
    whole = buffer(game, 3, 2, clipping=True)
    whole.add_game(game)
    pieces = buffer(game, 3, 2, clipping=True)
    send_in_segments(pieces, game, [1, 2, 5])
    assert_same_records(pieces, whole)


@pytest.mark.parametrize("encoder, stack_actions", [
    (VECTOR, False), (VECTOR, True), (IMAGE, False), (IMAGE, True), (BOOL_PLANES, False),
    (BOOL_PLANES, True)])
def test_stacking_many_states_equals_make_image(encoder, stack_actions):
    game = random_game(6, encoder=encoder, stacked=3, stack_actions=stack_actions, seed=2)
    states = np.arange(7)
    stacked = stack_observations(np.stack(game.observations), np.asarray(game.actions), 0,
                                 states, encoder, 3, stack_actions, 3)
    assert stacked.dtype == encoder.input_dtype
    for state in states:
        np.testing.assert_array_equal(stacked[state], game.make_image(int(state)))
    trimmed = random_game(6, encoder=encoder, stacked=3, stack_actions=stack_actions, seed=2)
    trimmed.trim(3)
    np.testing.assert_array_equal(trimmed.make_image(6), game.make_image(6))
    with pytest.raises(IndexError):
        trimmed.make_image(4)


@pytest.mark.parametrize("stack_actions", [False, True])
def test_bool_planes_are_held_as_bytes_and_sampled_as_the_float_model_inputs(stack_actions):
    game = random_game(30, encoder=BOOL_PLANES, stacked=2, stack_actions=stack_actions, seed=3)
    replay = buffer(game, 3, 2)
    send_in_segments(replay, game, [10, 20])
    [record] = replay._records.values()
    assert record.observations.view.dtype == np.uint8  # 1 byte a cell, not float32's 4
    batch = replay.sample(16, np.random.default_rng(0), with_bootstrap_inputs=True,
                          with_unrolled_inputs=True)
    assert batch.observations.dtype == np.float32
    assert batch.unrolled.observations.dtype == np.float32
    for row, step in enumerate(replay._slot_step[batch.slots]):
        image = game.make_image(int(step))
        assert image.dtype == np.float32 and set(np.unique(image[:4])) <= {0.0, 1.0}
        np.testing.assert_array_equal(batch.observations[row], image)
        np.testing.assert_array_equal(batch.unrolled.observations[row, 0], image)


def test_a_replay_saved_with_float_planes_loads_them_as_bytes(tmp_path):
    """Earlier versions held bool planes as float32: their saved replay loads unchanged."""
    game = random_game(12, encoder=BOOL_PLANES, seed=9)
    replay = buffer(game, 3, 2)
    replay.add_game(game)
    state = replay.state_dict()
    assert state["observations"].dtype == np.uint8
    state["observations"] = state["observations"].astype(np.float32)
    restored = buffer(game, 3, 2)
    restored.load_state_dict(state, encoder=BOOL_PLANES)
    [record] = restored._records.values()
    assert record.observations.view.dtype == np.uint8
    assert_same_records(restored, replay)


def test_a_running_game_bootstraps_from_its_last_position():
    """Positions 0 .. 3 received: targets as for a game truncated after 3 actions whose final
    value is position 3's search value; position 3 cannot be sampled yet."""
    game = random_game(8, seed=5)
    replay = buffer(game, 3, 1)
    replay.add_segment(cut_segment(_prefix(game, 4, False), 1, 0, 1))
    assert len(replay) == 3 and replay.running_games() == [1]
    [record] = replay._records.values()
    r, v = game.rewards, game.root_values
    expected = [r[0] + 0.9 * r[1] + 0.81 * r[2] + 0.729 * v[3],  # the n-step target of state 0
                r[1] + 0.9 * r[2] + 0.81 * v[3],  # window reaches past 3: bootstrap from it
                r[2] + 0.9 * v[3], v[3]]
    np.testing.assert_allclose(record.values, expected, rtol=1e-12)
    assert record.unroll.value_mask[4] == 0 and record.unroll.policy_mask[3] == 0


def test_a_never_ending_game_keeps_memory_bounded_and_stays_sampleable():
    game = random_game(400, encoder=IMAGE, stacked=4, seed=1, terminated=False)
    replay = buffer(game, 5, 3, capacity=50)
    sizes = []
    for start in range(0, 400, 10):
        part = _prefix(game, start + 10, False)
        part.trim(max(0, start - 4))
        replay.add_segment(cut_segment(part, 3, start, 4))
        sizes.append(replay.nbytes())
        [record] = replay._records.values()
        assert len(record.observations) <= 50 + 4 + 1  # held positions and their stacks
    assert len(replay) == 50 and max(sizes[10:]) <= 1.2 * min(sizes[10:])
    batch = replay.sample(16, np.random.default_rng(0), with_unrolled_inputs=True)
    steps = replay._slot_step[batch.slots]
    for row, step in enumerate(steps):
        np.testing.assert_array_equal(batch.observations[row], game.make_image(int(step)))


def test_a_segment_after_lost_ones_starts_its_game_again_from_its_context():
    game = random_game(30, seed=6)
    replay = buffer(game, 2, 1)
    replay.add_segment(cut_segment(_prefix(game, 10, False), 9, 0, 1))
    part = _prefix(game, 30, True)
    part.trim(19)
    replay.add_segment(cut_segment(part, 9, 20, 1, final=True))  # positions 10 .. 19 lost
    first, second = replay.games()
    assert first.truncated and len(first) == 9 and first.final_value == game.root_values[9]
    assert second.base == 19 and len(second) == 30 and second.terminated
    assert sorted(replay._slot_step[replay._slot_game == 1]) == list(range(20, 30))


def test_replay_state_keeps_running_games_and_their_links(tmp_path):
    game = random_game(12, seed=8)
    replay = buffer(game, 3, 2)
    replay.add_segment(cut_segment(_prefix(game, 5, False), 4, 0, 1))
    path = tmp_path / "replay.pt"
    replay.save(path)
    restored = buffer(game, 3, 2)
    restored.load(path, encoder=VECTOR)
    assert restored.running_games() == [4]
    for target in (replay, restored):
        part = _prefix(game, 12, True)
        part.trim(4)
        target.add_segment(cut_segment(part, 4, 5, 1, final=True))
    whole = buffer(game, 3, 2)
    whole.add_game(game)
    assert_same_records(restored, whole)


def test_learning_starts_after_the_warm_up_on_games_that_never_end(tmp_path, monkeypatch):
    config = load_config("cartpole", [
        "env.id=fake_envs:EndlessWalk-v0", "env.num_envs=2", "search.num_simulations=4",
        "train.batch_size=8", "train.warmup_transitions=60", "replay.segment_length=20",
        "train.eval_interval=0", "log.progress=false"])
    agent = MuZeroAgent(config)
    first_step = []
    train_steps = MuZeroAgent.train_steps

    def recording(self, count):
        if count:
            first_step.append(self.env_steps)
        train_steps(self, count)

    monkeypatch.setattr(MuZeroAgent, "train_steps", recording)
    agent.learn(300)
    assert agent.episodes == 0 and agent.training_steps > 0
    # Two envs send 20 positions each every 20 steps, of which 19 become samples at once (the
    # last waits for the next segment): 78 samples >= 60 at 80 env steps; the first whole
    # learner step is earned by the next moves at replay_ratio learner steps per env step.
    assert 80 <= first_step[0] <= 80 + 2 * int(np.ceil(0.5 / config.train.replay_ratio))
    assert len(agent.replay) >= 300 - 2 * 20 - 2


def test_games_in_progress_survive_a_stop_as_truncated_games(tmp_path):
    """CartPole's envs cannot be restored: at each stop the games in progress go into the
    checkpoint's replay, and the resumed run ends them there as truncated games."""
    config = load_config("cartpole", [
        "env.num_envs=4", "search.num_simulations=4", "train.batch_size=8",
        "train.warmup_transitions=30", "train.eval_interval=0", "log.progress=false",
        "log.checkpoint_interval=1000000"])
    agent = MuZeroAgent(config, run_dir=tmp_path / "run")
    for total in (40, 90, 130, 170):
        agent.learn(total)
        agent.close()  # the process stops here
        agent = MuZeroAgent.load(tmp_path / "run", run_dir=tmp_path / "run")
        assert agent.replay.running_games() == []
    assert agent.replay.num_transitions_added == agent.env_steps  # every move played is kept
    # a game cut at a stop ends on its last position, which then is its final state, not a
    # sample: at most one position per env and stop
    assert len(agent.replay) >= agent.env_steps - 4 * 4


def test_games_in_progress_of_restorable_envs_continue_after_a_stop(tmp_path):
    """Connect Four's envs can be restored: a resumed run plays its games on from where they
    stopped, so no game is cut short."""
    config = load_config("connect4", [
        "env.num_envs=4", "search.num_simulations=3", "search.eval_simulations=3",
        "train.batch_size=8", "train.warmup_transitions=20", "train.eval_interval=0",
        "log.progress=false", "log.checkpoint_interval=1000000", "train.num_threads=1"])
    agent = MuZeroAgent(config, run_dir=tmp_path / "run")
    for total in (15, 33, 61, 90):
        agent.learn(total)
        running = agent.replay.running_games()
        agent.close()
        agent = MuZeroAgent.load(tmp_path / "run", run_dir=tmp_path / "run")
        assert agent.replay.running_games() == running and running
    agent.learn(200)
    games = agent.replay.games()
    finished = [g for g in games if g.terminated or g.truncated]
    assert finished and not any(g.truncated for g in games)
    for game in finished:  # whole games, moves alternating from the first player
        assert game.base == 0 and game.to_play_history == [i % 2 for i in range(len(game) + 1)]
    assert agent.replay.num_transitions_added == agent.env_steps
