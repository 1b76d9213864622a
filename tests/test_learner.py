"""Learner: loss goes down on a fixed batch, LR schedule, target network, priorities."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from muzero_gym.config import ConfigError, ModelConfig, ReplayConfig, TrainConfig
from muzero_gym.game import Game, ObservationEncoder
from muzero_gym.learner import Learner, TrainingDivergedError, learning_rate
from muzero_gym.networks import build_network
from muzero_gym.replay import Batch, ReplayBuffer

ENCODER = ObservationEncoder(spaces.Box(-5, 5, (3,)))


def filled_replay(seed=0):
    rng = np.random.default_rng(seed)
    replay = ReplayBuffer(ReplayConfig(capacity=500), num_actions=2, num_unroll_steps=3,
                          td_steps=3, discount=0.9)
    for _ in range(6):
        game = Game(2, ENCODER)
        game.start(rng.normal(size=3))
        length = int(rng.integers(5, 15))
        for i in range(length):
            game.store_search_statistics(float(rng.normal()), rng.dirichlet([1, 1]))
            game.record_step(int(rng.integers(2)), float(rng.integers(0, 2)),
                             rng.normal(size=3), i == length - 1, False)
        replay.add_game(game)
    return replay


def make_learner(**train):
    torch.manual_seed(0)
    net = build_network(ModelConfig(hidden_size=16, layer_size=32, value_support_size=5,
                                    reward_support_size=2), (3,), 2)
    defaults = dict(optimizer="adam", lr_init=1e-2, target_update_interval=2)
    defaults.update(train)
    return Learner(net, TrainConfig(**defaults))


def test_one_learner_step_lowers_the_loss_on_a_fixed_batch():
    learner = make_learner()
    batch = filled_replay().sample(64, np.random.default_rng(0))
    before, _, _ = learner.compute_loss(batch)
    metrics = learner.train_step(batch)
    after, _, _ = learner.compute_loss(batch)
    assert metrics["total"] == pytest.approx(before.item(), rel=1e-5)
    assert after.item() < before.item()
    assert metrics["priorities"].shape == (64,)
    assert {"value", "reward", "policy", "lr", "grad_norm"} <= metrics.keys()


def test_sgd_training_lowers_the_loss_over_steps():
    learner = make_learner(optimizer="sgd", lr_init=0.05)
    batch = filled_replay(1).sample(64, np.random.default_rng(1))
    first = learner.compute_loss(batch)[0].item()
    for _ in range(20):
        learner.train_step(batch)
    assert learner.compute_loss(batch)[0].item() < 0.8 * first


@pytest.mark.parametrize("decay_norms_and_biases", [True, False])
def test_weight_decay_reaches_norms_and_biases_only_when_asked(decay_norms_and_biases):
    # With their loss gradients zeroed, the one-dimensional parameters (layer-norm scales and
    # shifts, biases) move only by the decay: Adam's first step is lr * sign(decay * p).
    # (Parameters the loss does not reach, such as the unused projection head, get no step.)
    learner = make_learner(weight_decay=0.1, lr_init=0.01,
                           decay_norms_and_biases=decay_norms_and_biases)
    params = list(learner.network.parameters())
    for p in params:
        if p.ndim == 1:
            p.register_hook(torch.zeros_like)
    before = [p.detach().clone() for p in params]
    learner.train_step(filled_replay().sample(32, np.random.default_rng(0)))
    stepped = [(p, b) for p, b in zip(params, before) if p.grad is not None]
    flat = [((p.detach() - b).abs(), b) for p, b in stepped if p.ndim == 1]
    nonzero = [moved[b.abs() > 0.01] for moved, b in flat]  # |decay * p| far above eps
    assert sum(n.numel() for n in nonzero) > 0  # layer-norm scales start at 1
    if decay_norms_and_biases:
        assert all(torch.allclose(n, torch.full_like(n, 0.01), rtol=1e-4) for n in nonzero)
    else:
        assert all(torch.equal(moved, torch.zeros_like(moved)) for moved, _ in flat)
    assert all(not torch.equal(p.detach(), b) for p, b in stepped if p.ndim > 1)


def test_learning_rate_schedule_matches_the_reference_with_warmup():
    config = TrainConfig(lr_init=0.05, lr_decay_rate=0.1, lr_decay_steps=350e3)
    assert learning_rate(config, 0) == pytest.approx(0.05)
    assert learning_rate(config, 350_000) == pytest.approx(0.005)
    assert learning_rate(config, 700_000) == pytest.approx(0.0005)
    warm = TrainConfig(lr_init=0.1, lr_warmup_steps=10, lr_decay_steps=1e9)
    assert learning_rate(warm, 0) == pytest.approx(0.01)
    assert learning_rate(warm, 9) == pytest.approx(0.1)


def test_target_network_is_refreshed_every_n_steps():
    learner = make_learner(target_update_interval=2)
    batch = filled_replay().sample(16, np.random.default_rng(0))
    start = [p.clone() for p in learner.target_network.parameters()]
    learner.train_step(batch)
    assert all(torch.equal(a, b) for a, b in zip(start, learner.target_network.parameters()))
    learner.train_step(batch)
    for a, b in zip(learner.network.parameters(), learner.target_network.parameters()):
        assert torch.equal(a, b)


def test_polyak_target_moves_tau_of_the_way_every_step():
    learner = make_learner(target_update_tau=0.25, target_update_interval=1)
    batch = filled_replay().sample(16, np.random.default_rng(0))
    for _ in range(2):
        before = [p.clone() for p in learner.target_network.parameters()]
        learner.train_step(batch)
        for old, new, trained in zip(before, learner.target_network.parameters(),
                                     learner.network.parameters()):
            # new = old + 0.25 (trained - old): a float32 lerp, exact to a few ulps
            torch.testing.assert_close(new, old + 0.25 * (trained - old), rtol=1e-6, atol=1e-7)
        assert not all(torch.equal(a, b) for a, b in zip(learner.network.parameters(),
                                                         learner.target_network.parameters()))


def test_averaged_weights_move_tau_of_the_way_every_step_and_travel_with_the_state():
    learner = make_learner(averaged_weights_tau=0.25)
    plain = make_learner()
    assert plain.averaged_network is None  # off by default
    assert plain.playing_network is plain.network  # play uses the trained weights then
    assert learner.playing_network is learner.averaged_network
    batch = filled_replay().sample(16, np.random.default_rng(0))
    for _ in range(2):
        before = [p.clone() for p in learner.averaged_network.parameters()]
        learner.train_step(batch)
        for old, new, trained in zip(before, learner.averaged_network.parameters(),
                                     learner.network.parameters()):
            # new = old + 0.25 (trained - old): a float32 lerp, exact to a few ulps
            torch.testing.assert_close(new, old + 0.25 * (trained - old), rtol=1e-6, atol=1e-7)
    assert not all(torch.equal(a, b) for a, b in zip(learner.network.parameters(),
                                                     learner.averaged_network.parameters()))
    state = learner.state_dict()
    restored = make_learner(averaged_weights_tau=0.25)
    restored.load_state_dict(state)
    for a, b in zip(learner.averaged_network.parameters(),
                    restored.averaged_network.parameters()):
        assert torch.equal(a, b)
    # A state saved without the average (the option was off) starts it from the trained weights.
    del state["averaged_network"]
    restored.load_state_dict(state)
    for a, b in zip(learner.network.parameters(), restored.averaged_network.parameters()):
        assert torch.equal(a, b)


def test_bootstrap_from_the_target_network():
    learner = make_learner(bootstrap_source="target_network")
    replay = filled_replay()
    batch = replay.sample(32, np.random.default_rng(0), with_bootstrap_inputs=True)
    values = learner.value_targets(batch)
    # A fresh network predicts 0 everywhere, so only the reward part remains.
    torch.testing.assert_close(values, torch.as_tensor(batch.reward_sum, dtype=torch.float32),
                               atol=1e-4, rtol=0)
    metrics = learner.train_step(batch)
    assert np.isfinite(metrics["total"])
    with pytest.raises(ValueError, match="with_bootstrap_inputs"):
        learner.value_targets(replay.sample(4, np.random.default_rng(0)))


def test_state_dict_round_trip(tmp_path):
    learner = make_learner()
    batch = filled_replay().sample(16, np.random.default_rng(0))
    learner.train_step(batch)
    path = tmp_path / "learner.pt"
    torch.save(learner.state_dict(), path)
    other = make_learner()
    other.load_state_dict(torch.load(path, weights_only=True))
    assert other.training_step == 1
    a = learner.train_step(batch)
    b = other.train_step(batch)
    assert a["total"] == pytest.approx(b["total"], rel=1e-6)


def test_consistency_loss_trains_the_projection():
    learner = make_learner(consistency_loss_weight=2.0)
    replay = filled_replay()
    batch = replay.sample(32, np.random.default_rng(0), with_unrolled_inputs=True)
    before = learner.compute_loss(batch)[1]["consistency"].item()
    for _ in range(30):
        learner.train_step(batch)
    after = learner.compute_loss(batch)[1]["consistency"].item()
    assert -1.0 <= after < before <= 0.0 + 1e-6
    with pytest.raises(ValueError, match="with_unrolled_inputs"):
        learner.compute_loss(replay.sample(4, np.random.default_rng(0)))


@pytest.mark.parametrize("prefetch", [False, True])
def test_learner_worker_runs_are_reproducible_with_and_without_prefetch(prefetch):
    """With prefetch the next batch is sampled while the current one trains, before the
    current step's priorities land: the same every run, so a seed's run is reproducible."""
    from muzero_gym.config import Config
    from muzero_gym.workers import LearnerWorker

    runs = []
    for _ in range(2):
        learner = make_learner(reanalyse_fraction=0.5, num_unroll_steps=3)  # the replay's K
        replay = filled_replay()
        config = Config(train=learner.config)
        worker = LearnerWorker(config, learner, replay, np.random.default_rng(3), [], 2,
                               prefetch=prefetch)
        metrics = worker.train(7)
        assert len(metrics["losses/total"]) == 7 and learner.training_step == 7
        runs.append(([p.detach().clone() for p in learner.network.parameters()],
                     replay.priorities()))
    (first, first_priorities), (second, second_priorities) = runs
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    np.testing.assert_array_equal(first_priorities, second_priorities)


def test_the_root_policy_is_a_softmax_over_the_legal_moves():
    """With one of two actions illegal and the target on the other, the legal softmax is
    certain of it (no root policy loss); over all actions the same batch has a loss."""
    learner = make_learner()
    batch = filled_replay().sample(64, np.random.default_rng(0))
    batch.policy_mask[:, 1:] = False  # the root alone
    batch.target_policy[:, 0] = [1.0, 0.0]
    batch.legal_action_mask = None
    _, parts, _ = learner.compute_loss(batch)
    assert parts["policy"].item() > 0.01
    batch.legal_action_mask = np.tile([True, False], (64, 1))
    _, parts, _ = learner.compute_loss(batch)
    assert parts["policy"].item() == 0.0


def test_unroll_loss_divisor_scales_each_unrolled_step():
    """Each unrolled step's losses are divided by train.unroll_loss_divisor (0: by K, the
    reference's 1/K); the root's losses are not."""
    batch = filled_replay().sample(64, np.random.default_rng(0))  # K = 3

    def parts(divisor, root_only=False):
        b = batch
        if root_only:
            b = filled_replay().sample(64, np.random.default_rng(0))
            b.value_mask[:, 1:] = False
            b.policy_mask[:, 1:] = False
        _, out, _ = make_learner(unroll_loss_divisor=divisor).compute_loss(b)
        return np.array([out[k].item() for k in ("value", "reward", "policy")])

    root = parts(1, root_only=True)
    assert root[1] == 0.0  # no reward at the root
    unrolled = parts(1) - root  # the sum of the unrolled steps' losses
    assert unrolled.min() > 0.01
    np.testing.assert_allclose(parts(0), parts(3), rtol=1e-6)
    for divisor in (2, 3, 5):
        np.testing.assert_allclose(parts(divisor) - root, unrolled / divisor, rtol=1e-4)
    with pytest.raises(Exception, match="unroll_loss_divisor"):
        TrainConfig(unroll_loss_divisor=-1)


@pytest.mark.parametrize("prefetch", [False, True])
def test_early_unroll_steps_unroll_shallower_first_then_the_full_k(prefetch):
    """train.early_num_unroll_steps: the first early_unroll_learner_steps learner steps unroll
    that many steps, the later ones num_unroll_steps (whether or not the next batch is sampled
    ahead); a later call picks up where the schedule stands."""
    from muzero_gym.config import Config
    from muzero_gym.workers import LearnerWorker, replay_unroll_depth, unroll_depth

    learner = make_learner(num_unroll_steps=3, early_num_unroll_steps=1,
                           early_unroll_learner_steps=4)
    train = learner.config
    assert [unroll_depth(train, s) for s in range(6)] == [1, 1, 1, 1, 3, 3]
    assert replay_unroll_depth(train) == 3
    assert replay_unroll_depth(TrainConfig(num_unroll_steps=2, early_num_unroll_steps=6,
                                           early_unroll_learner_steps=1)) == 6
    assert replay_unroll_depth(TrainConfig(num_unroll_steps=2)) == 2
    assert unroll_depth(TrainConfig(num_unroll_steps=2), 0) == 2
    for half in ({"early_num_unroll_steps": 6}, {"early_unroll_learner_steps": 10}):
        with pytest.raises(ConfigError, match="set both"):
            TrainConfig(**half)
    depths = []
    train_step = learner.train_step

    def recording_train_step(batch):
        depths.append(batch.actions.shape[1])
        assert batch.target_value.shape[1] == batch.actions.shape[1] + 1
        return train_step(batch)

    learner.train_step = recording_train_step
    worker = LearnerWorker(Config(train=train), learner, filled_replay(),
                           np.random.default_rng(3), [], 2, prefetch=prefetch)
    worker.train(3)
    worker.train(3)
    assert depths == [1, 1, 1, 1, 3, 3]


def random_image_batch(seed: int, batch_size: int = 32, num_unroll: int = 3,
                       num_actions: int = 4, shape=(2, 12, 12)) -> Batch:
    """A batch of random uint8 frames and targets (for networks with batch norm)."""
    rng = np.random.default_rng(seed)
    steps = num_unroll + 1
    return Batch(
        observations=rng.integers(0, 256, (batch_size, *shape), dtype=np.uint8),
        actions=rng.integers(0, num_actions, (batch_size, num_unroll)),
        target_value=rng.normal(size=(batch_size, steps)).astype(np.float32),
        target_reward=rng.integers(-1, 2, (batch_size, steps)).astype(np.float32),
        target_policy=rng.dirichlet(np.ones(num_actions), (batch_size, steps)).astype(
            np.float32),
        value_mask=rng.random((batch_size, steps)) < 0.9,
        policy_mask=rng.random((batch_size, steps)) < 0.9,
        weights=rng.uniform(0.5, 1.0, batch_size).astype(np.float32),
        slots=np.arange(batch_size), game_ids=np.zeros(batch_size, dtype=np.int64),
        ages=np.zeros(batch_size), td_horizons=np.zeros(batch_size),
        reward_sum=np.zeros((batch_size, steps), np.float32),
        bootstrap_scale=np.zeros((batch_size, steps), np.float32))


def image_learner(device: str, **train) -> Learner:
    torch.manual_seed(0)
    net = build_network(ModelConfig(kind="resnet_small", value_support_size=5,
                                    reward_support_size=2), (2, 12, 12), 4, image_input=True)
    return Learner(net, TrainConfig(**{"lr_init": 1e-3, **train}), device=device)


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@needs_cuda
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_cuda_graph_steps_equal_eager_steps(optimizer):
    """The recorded step gives the eager step's losses, priorities and weights (batch norm
    statistics, the optimizer's state and the learning-rate warm-up included), its warm-up
    leaves no trace, and its checkpoint loads into a CPU learner."""
    batches = [random_image_batch(seed) for seed in range(3)]
    runs = {}
    for graphs in (False, True):
        learner = image_learner("cuda", optimizer=optimizer, cuda_graphs=graphs,
                                lr_warmup_steps=3, target_update_interval=2)
        assert learner.uses_cuda_graphs == graphs
        metrics = [learner.train_step(batch) for batch in batches * 2]
        runs[graphs] = metrics, learner
    (eager_metrics, eager), (graph_metrics, graph) = runs[False], runs[True]
    # The same kernels on the same inputs; the tolerance covers only the order of atomic
    # additions in a few backward kernels.
    for a, b in zip(eager_metrics, graph_metrics):
        for key in ("total", "value", "reward", "policy", "grad_norm", "lr"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), key
        np.testing.assert_allclose(b["priorities"], a["priorities"], rtol=1e-4, atol=1e-6)
    for name, value in eager.state_dict()["network"].items():
        torch.testing.assert_close(graph.state_dict()["network"][name], value, rtol=1e-4,
                                   atol=1e-5)
    cpu = image_learner("cpu", optimizer=optimizer)
    cpu.load_state_dict(graph.state_dict())
    assert np.isfinite(cpu.train_step(batches[0])["total"])


@needs_cuda
def test_a_diverging_cuda_graph_step_leaves_the_weights_unchanged():
    learner = image_learner("cuda", cuda_graphs=True)
    batch = random_image_batch(0)
    learner.train_step(batch)  # records the step
    before = {k: v.clone() for k, v in learner.network.state_dict().items()}
    moments = [v.clone() for s in learner.optimizer.state.values() for v in s.values()]
    bad = random_image_batch(1)
    bad.weights[3] = np.nan
    with pytest.raises(TrainingDivergedError, match="at learner step 2"):
        learner.train_step(bad)
    for name, value in learner.network.state_dict().items():
        torch.testing.assert_close(value, before[name], rtol=0, atol=0)
    after = [v for s in learner.optimizer.state.values() for v in s.values()]
    for a, b in zip(after, moments):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert learner.training_step == 1
    assert np.isfinite(learner.train_step(batch)["total"])
