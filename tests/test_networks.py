"""Value transform, supports, network shapes and hidden-state scaling."""

from __future__ import annotations

import contextlib
import copy

import numpy as np
import pytest
import torch

from muzero_gym.config import ModelConfig
from muzero_gym.inference import plan
from muzero_gym.mcts import BatchedMCTS, SearchSettings
from muzero_gym.networks import (
    MLPNetwork,
    ResNetNetwork,
    _scale_hidden,
    build_network,
    inference_network,
    scale_gradient,
    weights_permuted_once,
)
from muzero_gym.support import h, h_inverse, scalar_to_support, support_to_scalar

VALUES = torch.tensor([-12345.0, -300.0, -3.7, -1.0, 0.0, 0.3, 1.0, 42.0, 9999.0],
                      dtype=torch.float64)


def test_h_matches_its_formula_and_inverts_exactly():
    expected = torch.sign(VALUES) * (torch.sqrt(VALUES.abs() + 1) - 1) + 0.001 * VALUES
    torch.testing.assert_close(h(VALUES), expected)
    torch.testing.assert_close(h_inverse(h(VALUES)), VALUES, rtol=1e-12, atol=1e-9)
    assert h(torch.tensor(3.0)).item() == pytest.approx(1.003)


def test_support_projection_is_two_hot_and_round_trips():
    support = scalar_to_support(torch.tensor([0.3, -2.5]), 5)
    y = h(torch.tensor([0.3, -2.5]))
    grid = torch.arange(-5, 6, dtype=torch.float32)
    torch.testing.assert_close(support.sum(-1), torch.ones(2))
    torch.testing.assert_close((support * grid).sum(-1), y)  # the mean is h(x) exactly
    assert ((support > 0).sum(-1) <= 2).all()
    logits = torch.log(scalar_to_support(VALUES, 300) + 1e-300)
    torch.testing.assert_close(support_to_scalar(logits, 300), VALUES, rtol=1e-9, atol=1e-6)


def test_support_clips_values_beyond_its_range():
    support = scalar_to_support(torch.tensor([1e6, -1e6]), 3)
    assert support[0, -1] == 1 and support[1, 0] == 1


def test_mlp_shapes_and_hidden_scaling():
    net = build_network(ModelConfig(hidden_size=8, layer_size=16, value_support_size=5,
                                    reward_support_size=3), (4,), 2)
    assert isinstance(net, MLPNetwork)
    out = net.initial_inference(torch.randn(3, 4))
    assert out.value_logits.shape == (3, 11) and out.policy_logits.shape == (3, 2)
    assert out.hidden.min() >= 0 and out.hidden.max() <= 1
    torch.testing.assert_close(net.reward_scalar(out.reward_logits), torch.zeros(3))
    nxt = net.recurrent_inference(out.hidden, torch.tensor([0, 1, 1]))
    assert nxt.reward_logits.shape == (3, 7) and nxt.hidden.shape == (3, 8)
    assert nxt.hidden.amin(1).eq(0).all() and nxt.hidden.amax(1).gt(0.99).all()


@pytest.mark.parametrize("kind", ["resnet_small", "resnet"])
def test_resnet_downsamples_96_to_6(kind):
    config = ModelConfig(kind=kind, num_channels=16, num_blocks=1, value_support_size=4,
                         reward_support_size=4)
    net = build_network(config, (4, 96, 96), 6, image_input=True)
    assert isinstance(net, ResNetNetwork)
    obs = torch.randint(0, 255, (2, 4, 96, 96), dtype=torch.uint8)
    out = net.initial_inference(obs)
    assert out.hidden.shape[2:] == (6, 6)
    assert out.hidden.shape[1] == (64 if kind == "resnet_small" else 16)
    nxt = net.recurrent_inference(out.hidden, torch.tensor([1, 5]))
    assert nxt.hidden.shape == out.hidden.shape and nxt.policy_logits.shape == (2, 6)


def test_resnet_without_downsampling_reads_board_planes():
    config = ModelConfig(kind="resnet", num_channels=8, num_blocks=1, downsample=False,
                         value_support_size=1, reward_support_size=1)
    net = build_network(config, (3, 6, 7), 7)
    out = net.initial_inference(torch.rand(2, 3, 6, 7))
    assert out.hidden.shape == (2, 8, 6, 7) and out.policy_logits.shape == (2, 7)
    # auto stays an MLP for float planes: only uint8 images get the Atari network
    assert isinstance(build_network(ModelConfig(kind="auto"), (3, 6, 7), 7), MLPNetwork)


def test_heads_reduce_the_hidden_state_to_head_channels():
    config = ModelConfig(kind="resnet", num_channels=8, num_blocks=0, downsample=False,
                         value_support_size=2, reward_support_size=1, head_channels=3,
                         head_width=5)
    net = build_network(config, (3, 6, 7), 7)
    for head in (net.reward_head, net.value_head, net.policy_head):
        assert head[0].out_channels == 3 and head[4].in_features == 3 * 6 * 7
        assert head[4].out_features == 5 and head[6].in_features == 5
    out = net.recurrent_inference(net.initial_inference(torch.rand(2, 3, 6, 7)).hidden,
                                  torch.tensor([0, 6]))
    assert out.value_logits.shape == (2, 5) and out.reward_logits.shape == (2, 3)
    with pytest.raises(ValueError, match="head_channels"):
        ModelConfig(head_channels=0)
    with pytest.raises(ValueError, match="head_width"):
        ModelConfig(head_width=0)


def test_one_hot_action_planes_give_each_action_its_own_plane():
    torch.manual_seed(0)
    config = ModelConfig(kind="resnet", num_channels=4, num_blocks=0, downsample=False,
                         value_support_size=1, reward_support_size=1, action_planes="one_hot")
    net = build_network(config, (2, 5, 5), 3).double().eval()
    assert net.dynamics_conv.in_channels == 4 + 3
    hidden = torch.rand(3, 4, 5, 5, dtype=torch.float64)
    actions = torch.tensor([2, 0, 1])
    planes = torch.zeros(3, 3, 5, 5, dtype=torch.float64)
    planes[torch.arange(3), actions] = 1.0  # action a: plane a all ones, the others zero
    with torch.no_grad():
        x = net.dynamics_bn(net.dynamics_conv(torch.cat([hidden, planes], dim=1)))
        want = _scale_hidden(torch.relu(x + hidden))
        got, _ = net.dynamics(hidden, actions)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    # the default keeps one plane holding action / num_actions (and the checkpoints' shapes)
    scalar = build_network(ModelConfig(kind="resnet", num_channels=4, num_blocks=0,
                                       downsample=False, value_support_size=1,
                                       reward_support_size=1), (2, 5, 5), 3)
    assert scalar.dynamics_conv.in_channels == 4 + 1
    with pytest.raises(ValueError, match="action_planes"):
        ModelConfig(action_planes="two_hot")


def test_small_resnet_size_is_efficientzero_scale():
    net = build_network(ModelConfig(kind="resnet_small", value_support_size=300,
                                    reward_support_size=300), (4, 96, 96), 18, image_input=True)
    params = sum(p.numel() for p in net.parameters())
    assert 0.3e6 < params < 1.0e6


def test_image_model_on_vector_observations_is_an_error():
    with pytest.raises(ValueError, match="needs image observations"):
        build_network(ModelConfig(kind="resnet"), (4,), 2)


def test_scale_gradient_halves_the_gradient():
    x = torch.ones(3, requires_grad=True)
    (scale_gradient(x, 0.5) * 2).sum().backward()
    torch.testing.assert_close(x.grad, torch.ones(3))


def test_plan_runs_a_batched_search_with_a_real_model():
    net = build_network(ModelConfig(hidden_size=8, layer_size=16), (4,), 3)
    search = BatchedMCTS(SearchSettings(num_simulations=10), 3)
    legal = np.array([[True, True, False], [True, True, True]])
    result = plan(net, search, np.random.default_rng(0).normal(size=(2, 4)).astype(np.float32),
                  legal, rng=np.random.default_rng(0))
    assert result.visit_counts.sum(axis=1).tolist() == [10, 10]
    assert result.visit_counts[0, 2] == 0
    assert net.training  # plan restores the mode it found


def test_numpy_inference_matches_torch():
    """The NumPy forward pass computes the same function as the PyTorch one. Both run in
    float64, where the two implementations' different summation orders leave differences near
    1e-16 relative: float32 rounding depends on the CPU's vector units and would need a
    tolerance that says little about whether the algebra is the same."""
    from muzero_gym.numpy_inference import NumpyMLP, torch_reference

    torch.manual_seed(0)
    net = build_network(ModelConfig(hidden_size=8, layer_size=16, value_support_size=5,
                                    reward_support_size=3), (4,), 3).double()
    for p in net.parameters():  # non-zero heads, so every output is exercised
        torch.nn.init.normal_(p, std=0.3)
    obs = np.random.default_rng(0).normal(size=(5, 4))
    actions = np.array([0, 1, 2, 1, 0])
    fast = NumpyMLP(net)
    hidden, value, logits = fast.initial(obs)
    nxt, reward, value2, logits2 = fast.recurrent(hidden, actions)
    expected = torch_reference(net, obs, actions)
    for got, want in zip((hidden, value, logits, nxt, reward, value2, logits2), expected):
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    # The float32 snapshot of the same network computes in float32.
    fast32 = NumpyMLP(net.float())
    assert fast32.initial(obs)[1].dtype == np.float32


def test_h_inverse_keeps_float32_precision():
    """float32 values near 0 and 0.25 map back with float32's relative precision (the textbook
    root cancelled three digits there)."""
    x = torch.tensor([-300.0, -1.0, -0.2459, -1e-4, 1e-6, 0.3, 7.0, 5000.0], dtype=torch.float64)
    y32 = h(x).float()
    exact = h_inverse(y32.double())
    relative = ((h_inverse(y32).double() - exact).abs() / exact.abs()).max().item()
    assert relative < 8 * torch.finfo(torch.float32).eps


@pytest.mark.parametrize("kind", ["resnet_small", "resnet"])
def test_inference_network_folds_batch_norm_without_changing_outputs(kind):
    torch.manual_seed(0)
    config = ModelConfig(kind=kind, num_channels=16, num_blocks=1, value_support_size=4,
                         reward_support_size=4)
    # float64, so that the comparison shows whether folding changed the function, not how a
    # CPU rounds float32 convolutions computed in two different orders
    net = build_network(config, (4, 96, 96), 6, image_input=True).double()
    for module in net.modules():  # trained-looking statistics, so folding has work to do
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
            module.weight.data.uniform_(0.5, 1.5)
            module.bias.data.uniform_(-0.2, 0.2)
    for head in (net.value_head, net.policy_head, net.reward_head):
        torch.nn.init.normal_(head[-1].weight, std=0.3)
    with pytest.raises(ValueError, match="eval mode"):
        inference_network(net, torch.float64)
    net.eval()
    fast = inference_network(net, torch.float64)
    assert fast is not net
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in fast.modules())
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in net.modules())  # original kept
    obs = torch.randint(0, 255, (3, 4, 96, 96), dtype=torch.uint8)
    actions = torch.tensor([0, 3, 5])

    def assert_same_outputs():
        with torch.no_grad():
            want = net.initial_inference(obs)
            got = fast.initial_inference(obs)
            want_next = net.recurrent_inference(want.hidden, actions)
            got_next = fast.recurrent_inference(got.hidden, actions)
        for a, b in zip((*got, *got_next), (*want, *want_next)):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)

    assert_same_outputs()
    assert inference_network(net, torch.float64) is fast  # unchanged weights: the same copy
    # New weights (as a learner step or load_state_dict writes them) reach the same copy.
    with torch.no_grad():
        net.dynamics_conv.weight.mul_(1.5)
        net.dynamics_bn.running_var.mul_(2.0)
        net.prediction_tower[0].conv1.weight.add_(0.05)
    assert inference_network(net, torch.float64) is fast
    assert_same_outputs()


def test_inference_network_keeps_networks_without_batch_norm():
    net = build_network(ModelConfig(hidden_size=8, layer_size=16), (4,), 3).eval()
    assert inference_network(net) is net


def test_bfloat16_search_follows_the_float32_network_closely():
    """``model.search_precision = bfloat16``: the search's calls run a bfloat16 copy under
    autocast, whose values and priors stay close to float32's and which follows weight
    changes; the network being trained stays float32."""
    from muzero_gym.inference import ModelSearchAdapter
    from muzero_gym.networks import search_dtype

    torch.manual_seed(0)
    config = ModelConfig(kind="resnet", num_channels=16, num_blocks=1, downsample=False,
                         value_support_size=1, reward_support_size=1,
                         search_precision="bfloat16")
    net = build_network(config, (3, 6, 7), 7).eval()
    for head in (net.value_head, net.policy_head):
        torch.nn.init.normal_(head[-1].weight, std=0.3)
    assert search_dtype(net, torch.device("cpu")) == torch.bfloat16
    observations = (np.random.default_rng(0).random((16, 3, 6, 7)) < 0.3).astype(np.float32)
    fast = ModelSearchAdapter(net, 4)
    exact = ModelSearchAdapter(net, 4)
    exact._dtype, exact._model = torch.float32, inference_network(net)

    def assert_close():
        value, logits = fast.initial(observations)
        want_value, want_logits = exact.initial(observations)
        assert value.dtype == logits.dtype == np.float64
        np.testing.assert_allclose(value, want_value, atol=0.03)
        np.testing.assert_allclose(logits, want_logits, atol=0.1)
        assert np.abs(logits - want_logits).max() > 0  # it did compute in bfloat16
        # A learned-model step from the stored (bfloat16) hidden states.
        parents, actions = np.zeros(16, dtype=np.int64), np.arange(16) % 7
        _, step_value, step_logits = fast.recurrent_fn(parents, actions, 1)
        _, want_step_value, want_step_logits = exact.recurrent_fn(parents, actions, 1)
        np.testing.assert_allclose(step_value, want_step_value, atol=0.03)
        np.testing.assert_allclose(step_logits, want_step_logits, atol=0.1)
        return logits

    before = assert_close()
    assert {p.dtype for p in inference_network(net, torch.bfloat16).parameters()} == {
        torch.bfloat16}
    assert {p.dtype for p in net.parameters()} == {torch.float32}
    with torch.no_grad():  # as a learner step would
        net.policy_head[-1].weight.mul_(-2.0)
    fast.refresh()
    exact._model = inference_network(net)
    after = assert_close()
    np.testing.assert_allclose(after, -2.0 * before, atol=0.2)


@pytest.mark.parametrize("precision", ["float32", "bfloat16", "auto"])
def test_search_precision_comes_from_the_config(precision):
    from muzero_gym.networks import native_bfloat16, search_dtype

    config = ModelConfig(kind="resnet", num_channels=8, num_blocks=1, downsample=False,
                         search_precision=precision)
    net = build_network(config, (3, 6, 7), 7)
    cpu = torch.device("cpu")
    bf16 = precision == "bfloat16" or (precision == "auto" and native_bfloat16(cpu))
    assert search_dtype(net, cpu) == (torch.bfloat16 if bf16 else torch.float32)


def test_channels_last_training_network_computes_the_channels_first_function():
    """The learner keeps convolutional networks channels-last; the heads' flatten and the
    dynamics' action plane read that layout as it lies. Outputs and gradients equal those of
    the channels-first network (float64: only the order of additions differs), and the
    parameter names are those of checkpoints written before."""
    torch.manual_seed(0)
    config = ModelConfig(kind="resnet", num_channels=8, num_blocks=1, downsample=False,
                         value_support_size=3, reward_support_size=2)
    first = build_network(config, (4, 10, 10), 3).double()
    for head in (first.value_head, first.policy_head, first.reward_head):
        torch.nn.init.normal_(head[-1].weight, std=0.3)
    last = copy.deepcopy(first).to(memory_format=torch.channels_last)
    assert {"value_head.4.weight", "value_head.6.weight", "reward_head.4.bias"} <= set(
        first.state_dict())
    obs = torch.rand(5, 4, 10, 10, dtype=torch.float64)
    actions = torch.tensor([0, 2, 1, 1, 0])
    outputs = []
    for net, x in ((first, obs), (last, obs.contiguous(memory_format=torch.channels_last))):
        root = net.initial_inference(x)
        step = net.recurrent_inference(root.hidden, actions)
        if net is last:
            assert step.hidden.is_contiguous(memory_format=torch.channels_last)
        projected = net.project(step.hidden, with_head=True)  # the consistency loss's
        loss = sum((t ** 2).sum() for t in (*root, *step, projected))
        grads = torch.autograd.grad(loss, list(net.parameters()))
        outputs.append((*root, *step, projected, *grads))
    for got, want in zip(outputs[1], outputs[0]):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_heads_sharing_one_permuted_weight_compute_the_same_loss_and_gradients():
    """Within ``weights_permuted_once`` (the learner's loss) each head's weight is permuted
    for channels-last planes once and shared by the unrolled steps: the same outputs bit for
    bit, the same gradients up to the order in which the steps' shares are summed (float64),
    a gradient still reaching a weight first used without autograd in the block (the
    consistency loss's target branch), and nothing left on the network after the block."""
    torch.manual_seed(1)
    config = ModelConfig(kind="resnet", num_channels=8, num_blocks=0, downsample=False,
                         value_support_size=3, reward_support_size=2)
    net = build_network(config, (4, 10, 10), 3).double().to(memory_format=torch.channels_last)
    for head in (net.value_head, net.policy_head, net.reward_head):
        torch.nn.init.normal_(head[-1].weight, std=0.3)
    obs = torch.rand(5, 4, 10, 10, dtype=torch.float64).contiguous(
        memory_format=torch.channels_last)
    actions = torch.tensor([[0, 2, 1, 1, 0], [2, 2, 0, 1, 1], [1, 0, 0, 2, 1]])

    def unrolled(shared: bool):
        with weights_permuted_once(net) if shared else contextlib.nullcontext():
            with torch.no_grad():
                target = net.project(net.representation(obs), with_head=False)
            out = net.initial_inference(obs)
            outputs = [out.value_logits, out.policy_logits]
            for step in actions:
                out = net.recurrent_inference(out.hidden, step)
                outputs += [out.value_logits, out.policy_logits, out.reward_logits]
            outputs.append(net.project(out.hidden, with_head=True) - target)
        loss = sum((t ** 2).sum() for t in outputs)
        return outputs, torch.autograd.grad(loss, list(net.parameters()))

    want_outputs, want_grads = unrolled(shared=False)
    got_outputs, got_grads = unrolled(shared=True)
    for got, want in zip(got_outputs, want_outputs):
        assert torch.equal(got, want)
    for got, want in zip(got_grads, want_grads):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert all("_permuted" not in m.__dict__ for m in net.modules())
    copy.deepcopy(net)  # a block's permuted weights would be autograd results: not copyable


def test_compiled_mlp_gives_each_row_the_same_bits_in_any_batch():
    """A position's network outputs do not depend on which other positions share its batch:
    the compiled forward pass takes rows four at a time and the rest one at a time, and both
    ways must sum in the same order (a search of one game would otherwise change with the
    number of envs beside it)."""
    from muzero_gym.numpy_inference import NumpyMLP

    torch.manual_seed(1)
    net = build_network(ModelConfig(hidden_size=8, layer_size=16, value_support_size=5,
                                    reward_support_size=3), (4,), 3)
    for p in net.parameters():
        torch.nn.init.normal_(p, std=0.3)
    fast = NumpyMLP(net)
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(7, 4)).astype(np.float32)
    actions = rng.integers(0, 3, size=7)
    hidden, value, logits = fast.initial(obs)
    batch = (hidden, value, logits, *fast.recurrent(hidden, actions))
    for row in range(7):
        h1, v1, l1 = fast.initial(obs[row:row + 1])
        single = (h1, v1, l1, *fast.recurrent(h1, actions[row:row + 1]))
        for got, whole in zip(single, batch):
            np.testing.assert_array_equal(got[0], whole[row])


def test_compiled_mlp_rejects_actions_outside_the_action_space():
    from muzero_gym.numpy_inference import NumpyMLP

    net = build_network(ModelConfig(hidden_size=8, layer_size=16), (4,), 3)
    fast = NumpyMLP(net)
    hidden = fast.initial(np.zeros((2, 4), dtype=np.float32))[0]
    with pytest.raises(IndexError, match=r"\[0, 3\)"):
        fast.recurrent(hidden, np.array([0, 3]))
