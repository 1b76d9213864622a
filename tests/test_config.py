"""Config loading, overrides and validation errors."""

from __future__ import annotations

import pytest

from muzero_gym.config import (
    Config,
    ConfigError,
    SearchConfig,
    TrainConfig,
    field_doc,
    list_presets,
    load_config,
)


def test_every_preset_loads_and_names_an_env():
    assert {"cartpole", "atari"} <= set(list_presets())
    for name in list_presets():
        config = load_config(name)
        assert config.env.id
        assert config.preset == name


def test_overrides_are_typed_and_applied():
    config = load_config("cartpole", ["search.num_simulations=8", "env.id=Acrobot-v1",
                                      "train.lr_init=1e-3", "search.known_bounds=[-1, 1]"])
    assert config.search.num_simulations == 8
    assert config.env.id == "Acrobot-v1"
    assert config.train.lr_init == pytest.approx(1e-3)
    assert config.search.known_bounds == [-1.0, 1.0]


def test_unknown_key_is_an_error_that_names_it():
    with pytest.raises(ConfigError, match="unknown config key search.num_simulation"):
        load_config("cartpole", ["search.num_simulation=8"])
    with pytest.raises(ConfigError, match="unknown config section 'serch'"):
        load_config("cartpole", ["serch.num_simulations=8"])


def test_unknown_key_in_a_file_is_an_error(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text("[train]\nlearning_rate = 0.1\n")
    with pytest.raises(ConfigError, match="unknown config key train.learning_rate"):
        load_config(path)


def test_negative_simulations_names_field_value_and_range():
    with pytest.raises(ConfigError) as info:
        load_config("cartpole", ["search.num_simulations=-5"])
    assert str(info.value) == "search.num_simulations = -5: allowed range is [1, inf]"


def test_wrong_types_and_choices_are_errors():
    with pytest.raises(ConfigError, match="search.num_simulations = 'many'"):
        load_config("cartpole", ["search.num_simulations=many"])
    with pytest.raises(ConfigError, match="allowed values are sgd, adam"):
        load_config("cartpole", ["train.optimizer=rmsprop"])
    with pytest.raises(ConfigError, match="train.discount = 1.5: allowed range"):
        load_config("cartpole", ["train.discount=1.5"])
    with pytest.raises(ConfigError, match="known_bounds"):
        SearchConfig(known_bounds=[1.0, -1.0])
    with pytest.raises(ConfigError, match="one more entry"):
        SearchConfig(temperature_steps=[10.0], temperatures=[1.0])
    with pytest.raises(ConfigError, match="expected section.key=value"):
        load_config("cartpole", ["num_simulations=3"])


def test_a_reanalyse_that_would_change_nothing_is_an_error():
    with pytest.raises(ConfigError, match="reanalyse would change nothing"):
        TrainConfig(bootstrap_source="target_network", reanalyse_fraction=0.5)
    TrainConfig(bootstrap_source="target_network", reanalyse_fraction=0.5, reanalyse_policy=True)
    TrainConfig(bootstrap_source="search", reanalyse_fraction=0.5)


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ConfigError, match="'cartpol' is neither a preset.*cartpole"):
        load_config("cartpol")


def test_toml_round_trip(tmp_path):
    config = load_config("atari", ["train.seed=3"])
    path = tmp_path / "config.toml"
    path.write_text(config.to_toml())
    again = load_config(path)
    assert again.to_dict() == config.to_dict()


def test_every_field_has_a_doc():
    import dataclasses

    from muzero_gym.config import SECTIONS

    for section in SECTIONS.values():
        for f in dataclasses.fields(section):
            assert field_doc(section, f.name)


def test_reference_configs_are_expressible(tmp_path):
    board = tmp_path / "board.toml"
    board.write_text("""
[env]
id = "CartPole-v1"
num_players = 2
[search]
num_simulations = 800
dirichlet_alpha = 0.3
known_bounds = [-1.0, 1.0]
temperature_zero_after_moves = 30
[train]
discount = 1.0
td_steps = 512
batch_size = 2048
lr_init = 0.1
lr_decay_steps = 400000.0
""")
    config = load_config(board)
    assert config.search.temperature(training_step=0, move_number=29) == 1.0
    assert config.search.temperature(training_step=0, move_number=30) == 0.0
    atari = load_config("atari")
    assert atari.train.discount == 0.997 and atari.train.td_steps == 10
    assert atari.search.num_simulations == 50 and atari.search.dirichlet_alpha == 0.25
    assert [atari.search.temperature(s) for s in (0, 600_000, 800_000)] == [1.0, 0.5, 0.25]
    assert atari.train.lr_init == 0.05 and atari.train.lr_decay_rate == 0.1


def test_configs_are_frozen():
    config = Config()
    with pytest.raises(AttributeError):
        config.search.num_simulations = 3  # type: ignore[misc]
