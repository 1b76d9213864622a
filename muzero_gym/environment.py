"""Building Gymnasium envs from an :class:`~muzero_gym.config.EnvConfig`, with clear errors.

ALE ids (``ALE/...``) are registered from ``ale_py`` and muzero_gym's own envs from
``muzero_gym.envs`` before ``gymnasium.make`` runs, so every preset's ``env.id`` resolves.
Ids of the form ``module:EnvId`` import ``module`` first (Gymnasium's convention), which must
register ``EnvId``.

Every episode has a step cap (:func:`episode_step_limit`), counted as a truncation: an env
without a time limit of its own, played by a policy that never reaches its end, would otherwise
keep self-play or an evaluation going forever.
"""

from __future__ import annotations

import importlib
import importlib.util

import gymnasium as gym

from muzero_gym.atari import (
    AtariConfigError,
    ale_settings,
    is_ale_id,
    make_ale_env,
    make_ale_vector_env,
)
from muzero_gym.config import EnvConfig
from muzero_gym.game import SpaceError, check_action_space

DEFAULT_MAX_EPISODE_STEPS = 10_000


class EnvError(ValueError):
    """The env cannot be created or is not usable by muzero_gym."""


def env_spec(env_id: str) -> gym.envs.registration.EnvSpec:
    """The registered spec of ``env_id`` (importing ``module`` of ``module:EnvId`` ids)."""
    register_envs()
    module, _, name = env_id.rpartition(":")
    if module == "pettingzoo":  # PettingZoo's classic games, adapted (muzero_gym.envs.pettingzoo)
        try:
            import pettingzoo  # noqa: F401

            from muzero_gym.envs.pettingzoo import register_classic
        except ImportError:
            raise EnvError(f"{env_id!r} needs PettingZoo: pip install -e '.[pettingzoo]'"
                           ) from None
        register_classic(name)
    if module:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise EnvError(f"cannot import module {module!r} of env id {env_id!r} ({e}); the "
                           "module must be importable from the current folder or PYTHONPATH "
                           "and register the env when imported") from None
    try:
        return gym.spec(name)
    except gym.error.Error as e:
        raise EnvError(f"cannot create env {env_id!r}: {e}") from None


def episode_step_limit(config: EnvConfig) -> int:
    """The step cap of an episode: ``env.max_episode_steps`` if set, else the env's registered
    ``max_episode_steps``, else :data:`DEFAULT_MAX_EPISODE_STEPS` (ALE ids:
    ``max_num_frames_per_episode`` / ``frameskip``)."""
    if config.max_episode_steps > 0:
        return config.max_episode_steps
    if config.vectorization == "ale":
        settings = ale_settings(config)
        return -(-settings["max_num_frames_per_episode"] // settings["frameskip"])
    own = env_spec(config.id).max_episode_steps
    return int(own) if own else DEFAULT_MAX_EPISODE_STEPS


def register_envs() -> None:
    """Registers the ALE envs and muzero_gym's own envs with Gymnasium (idempotent)."""
    import muzero_gym.envs  # noqa: F401  (registers on import)

    try:
        import ale_py

        gym.register_envs(ale_py)
    except ImportError:  # pragma: no cover - ale-py is a dependency
        pass
    if "MinAtar/Breakout-v1" not in gym.registry and importlib.util.find_spec("minatar"):
        _register_minatar()


def _register_minatar() -> None:
    """The optional [minatar] extra's ids, as ``minatar.gym.register_envs`` makes them
    (MinAtar/<Game>-v0 with all 6 actions, -v1 with the game's minimal set), with
    :class:`~muzero_gym.minatar_env.MinAtarEnv` (minatar's env that also declares its
    symmetries) as the entry point, registered by name: importing minatar (it imports seaborn
    and scipy) takes about 2 s, which only a run that makes a MinAtar env pays."""
    for game in ("asterix", "breakout", "freeway", "seaquest", "space_invaders"):
        name = game.title().replace("_", "")
        for version, minimal in (("v0", False), ("v1", True)):
            gym.register(id=f"MinAtar/{name}-{version}",
                         entry_point="muzero_gym.minatar_env:MinAtarEnv",
                         kwargs={"game": game, "use_minimal_action_set": minimal})


def make_env(config: EnvConfig, render_mode: str | None = None) -> gym.Env:
    """``gymnasium.make(config.id, **config.kwargs)`` with the time limit from the config; the
    action space must be Discrete. With ``vectorization = "ale"``, the single-env version of
    the Atari preprocessing (:func:`muzero_gym.atari.make_ale_env`)."""
    register_envs()
    if config.vectorization == "ale":
        return _checked(_make_ale(config, lambda: make_ale_env(config, render_mode)), True)
    kwargs = dict(config.kwargs)
    kwargs["max_episode_steps"] = episode_step_limit(config)
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    try:
        env = gym.make(config.id, **kwargs)
    except gym.error.DependencyNotInstalled as e:
        raise EnvError(f"cannot create env {config.id!r}"
                       f"{' for rendering' if render_mode else ''}: {e}") from None
    except gym.error.Error as e:
        raise EnvError(f"cannot create env {config.id!r}: {e}") from None
    except TypeError as e:
        raise EnvError(f"cannot create env {config.id!r} with env.kwargs {config.kwargs}: "
                       f"{e}") from None
    return _checked(env, True)


def _make_ale(config: EnvConfig, build):
    if not is_ale_id(config.id):
        raise EnvError(f"env.vectorization = 'ale' needs an ALE/ id, not {config.id!r}")
    try:
        return build()
    except AtariConfigError as e:
        raise EnvError(str(e)) from None
    except (gym.error.Error, TypeError, RuntimeError) as e:
        raise EnvError(f"cannot create env {config.id!r} with env.kwargs {config.kwargs}: "
                       f"{e}") from None


def _checked(env, single: bool):
    """``env`` if its (single) action space is Discrete; closed and a SpaceError otherwise."""
    try:
        check_action_space(env.action_space if single else env.single_action_space)
    except SpaceError:
        env.close()
        raise
    return env


def make_vector_env(config: EnvConfig, num_envs: int | None = None) -> gym.vector.VectorEnv:
    """A vector env of ``num_envs`` (default ``config.num_envs``) copies in NEXT_STEP
    autoreset mode: Gymnasium's sync or async, or ale-py's native one, as
    ``config.vectorization`` says."""
    register_envs()
    if config.vectorization == "ale":
        return _checked(_make_ale(config, lambda: make_ale_vector_env(
            config, num_envs or config.num_envs)), False)
    kwargs = dict(config.kwargs)
    kwargs["max_episode_steps"] = episode_step_limit(config)
    try:
        envs = gym.make_vec(
            config.id, num_envs=num_envs or config.num_envs,
            vectorization_mode=config.vectorization,
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}, **kwargs)
    except gym.error.Error as e:
        raise EnvError(f"cannot create env {config.id!r}: {e}") from None
    return _checked(envs, False)
