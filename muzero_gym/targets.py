"""Training targets of MuZero as pure functions over one episode's arrays.

For an episode of ``T`` actions: ``rewards[T]`` (reward of action i, seen by the player who took
it), ``to_play[T + 1]`` (player to move at each state, the final one included), ``state_values
[T + 1]`` (the root search value of each searched state, then the value of the final state:
0 after termination, the bootstrap value after truncation) and ``search_policies[T, A]``.

The value target at state j is the reference's ``make_target``: the discounted sum of the next
``n = td_steps`` rewards plus ``discount**n`` times the search value n steps ahead, each term
signed for two-player games by whether its player is the one to move at j. Where the window
passes the end of the episode:

- after a *termination* the rest of the sum is 0 and states past the end are absorbing (value 0,
  reward 0, policy masked out of the loss), as in the reference;
- after a *truncation* (a time limit) the episode did not end, so the sum bootstraps from the
  value of the final state (``discount**(T - j) * state_values[T]``) instead of 0; the final state
  itself gets that value as its target, and positions further past the end are masked out of the
  value and reward losses because nothing is known about them. The reference treats every end
  as terminal, which teaches the model that time limits are the end of the world.

Optionally (:func:`mix_own_values`) the target also leans on the state's own search value:
``(1 - w) * n-step target + w * state_values[j]``, the "Q + Z" averaging of AlphaZero
re-implementations, which trades the noise of long Monte Carlo returns for the search's bias.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class NStepParts(NamedTuple):
    """Value target of every state j in [0, T] as ``reward_sum[j] + bootstrap_scale[j] *
    state_values[bootstrap_index[j]]``; ``bootstrap_index`` is -1 (and the scale 0) where the
    target does not bootstrap. Kept apart so the bootstrap values can be recomputed
    (target network, reanalyse) without touching the rewards. ``reward_sum`` is the fixed part:
    the rewards, and the state's own value when mixed in (:func:`mix_own_values`)."""

    reward_sum: np.ndarray  # [T + 1] float64
    bootstrap_index: np.ndarray  # [T + 1] int64
    bootstrap_scale: np.ndarray  # [T + 1] float64


class UnrollTargets(NamedTuple):
    """Targets of the K + 1 positions index, ..., index + K of one sample."""

    value: np.ndarray  # [K + 1]
    reward: np.ndarray  # [K + 1]; entry 0 is the reward before ``index`` (unused by the loss)
    policy: np.ndarray | None  # [K + 1, A]; None where the caller reads policies itself
    value_mask: np.ndarray  # [K + 1] bool: value and reward targets are known
    policy_mask: np.ndarray  # [K + 1] bool: a search happened at that position


def n_step_parts(rewards: np.ndarray, to_play: np.ndarray, terminated: bool, td_steps: int,
                 discount: float) -> NStepParts:
    """The parts of the n-step value target of every state of an episode (see module doc)."""
    rewards = np.asarray(rewards, dtype=np.float64)
    to_play = np.asarray(to_play)
    num_steps = rewards.shape[0]
    if to_play.shape[0] != num_steps + 1:
        raise ValueError(f"to_play has {to_play.shape[0]} entries, expected {num_steps + 1} "
                         "(one per state, the final state included)")
    if td_steps < 1:
        raise ValueError(f"td_steps = {td_steps}: must be >= 1")
    # The whole game as one window, padded so that every state's window fits.
    parts = n_step_window_parts(
        np.concatenate([rewards, np.zeros(td_steps)])[None],
        np.concatenate([to_play, np.zeros(td_steps, dtype=to_play.dtype)])[None], None,
        np.array([num_steps]), np.array([terminated]), np.array([td_steps]), num_steps + 1,
        discount)
    return NStepParts(parts.reward_sum[0], parts.bootstrap_index[0], parts.bootstrap_scale[0])


def n_step_window_parts(rewards: np.ndarray, to_play: np.ndarray, state_values: np.ndarray | None,
                        actions_left: np.ndarray, terminated: np.ndarray, horizons: np.ndarray,
                        num_states: int, discount: float,
                        search_value_mix: float = 0.0) -> NStepParts:
    """Parts [B, num_states] of the value targets of the first ``num_states`` states of B windows
    of games, window b with its own horizon ``horizons[b]`` (1 <= it).

    Window b starts at some state s of its game: ``rewards[b, m]``, ``to_play[b, m]`` and
    ``state_values[b, m]`` are those of state s + m, the game has ``actions_left[b]`` actions from
    s on (its final state, in the targets' sense, is m = ``actions_left[b]``) and ended by a
    termination where ``terminated[b]``. Entries past the final state are ignored; ``rewards``
    needs ``num_states - 1 + max(horizons)`` columns, the others one more. The result equals
    :func:`n_step_parts` (then :func:`mix_own_values`) with ``td_steps = horizons[b]`` at those
    states, which it computes; ``bootstrap_index`` counts from the window's start, and states
    past the final one get no target (0, -1, 0), as the replay pads them. ``state_values`` is
    read only with ``search_value_mix`` > 0.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    horizons = np.asarray(horizons, dtype=np.int64)
    actions_left = np.asarray(actions_left, dtype=np.int64)[:, None]
    if horizons.size and horizons.min() < 1:
        raise ValueError(f"horizons must be >= 1, got {int(horizons.min())}")
    states = np.arange(num_states)[None, :]  # [1, S]
    width = rewards.shape[1]
    own_player = to_play[:, :num_states]
    reward_sum = np.zeros((rewards.shape[0], num_states))
    for k in range(int(horizons.max(initial=0))):
        later = np.minimum(states + k, width - 1)
        valid = (k < horizons[:, None]) & (states + k < actions_left)
        sign = np.where(np.take_along_axis(to_play, later, axis=1) == own_player, 1.0, -1.0)
        term = discount ** k * sign * np.take_along_axis(rewards, later, axis=1)
        reward_sum += np.where(valid, term, 0.0)
    ahead = states + horizons[:, None]
    inside = ahead < actions_left
    bootstrap_index = np.where(inside, ahead,
                               np.where(np.asarray(terminated)[:, None], -1, actions_left))
    past_end = states > actions_left
    bootstrap_index = np.where(past_end, -1, bootstrap_index)
    # The powers as n_step_parts takes them (a Python power per horizon, numpy's for the
    # distance to a truncation), so that the targets agree bit for bit.
    powers = np.array([discount ** h for h in range(int(horizons.max(initial=0)) + 1)])
    scale = np.where(inside, powers[horizons][:, None],
                     discount ** np.maximum(actions_left - states, 0))
    boot_player = np.take_along_axis(to_play, np.maximum(bootstrap_index, 0), axis=1)
    sign = np.where(boot_player == own_player, 1.0, -1.0)
    scale = np.where(bootstrap_index >= 0, scale * sign, 0.0)
    if search_value_mix:
        mixed = mix_own_values(NStepParts(reward_sum, bootstrap_index, scale),
                               np.asarray(state_values, dtype=np.float64)[:, :num_states],
                               search_value_mix)
        reward_sum, scale = mixed.reward_sum, mixed.bootstrap_scale
    reward_sum = np.where(past_end, 0.0, reward_sum)
    scale = np.where(past_end, 0.0, scale)
    return NStepParts(reward_sum, bootstrap_index.astype(np.int64), scale)


def mix_own_values(parts: NStepParts, state_values: np.ndarray, weight: float) -> NStepParts:
    """Parts of ``(1 - weight) * n-step target + weight * state_values[j]`` for every state j.

    The own-value term is folded into ``reward_sum`` (a fixed number once the game is played);
    only the bootstrap term is left to be recomputed (target network, reanalyse), scaled by
    ``1 - weight``. Weight 0 returns the parts unchanged.
    """
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"weight = {weight}: must be in [0, 1]")
    if weight == 0.0:
        return parts
    state_values = np.asarray(state_values, dtype=np.float64)
    if state_values.shape != parts.reward_sum.shape:
        raise ValueError(f"state_values has shape {state_values.shape}, expected "
                         f"{parts.reward_sum.shape} (one value per state, the final one included)")
    return NStepParts((1.0 - weight) * parts.reward_sum + weight * state_values,
                      parts.bootstrap_index, (1.0 - weight) * parts.bootstrap_scale)


def n_step_values(parts: NStepParts, state_values: np.ndarray) -> np.ndarray:
    """Value targets [T + 1] from the parts and the values of states [T + 1]."""
    state_values = np.asarray(state_values, dtype=np.float64)
    boot = state_values[np.maximum(parts.bootstrap_index, 0)]
    return parts.reward_sum + parts.bootstrap_scale * boot


def unroll_targets(values: np.ndarray, rewards: np.ndarray, search_policies: np.ndarray | None,
                   terminated: bool, index: int, num_unroll_steps: int) -> UnrollTargets:
    """Targets of positions ``index .. index + K`` given the episode's value targets [T + 1].

    Reward targets follow the reference's ``last_reward``: position p learns the reward of the
    action that led to it (``rewards[p - 1]``), 0 at p = 0 and past a termination. Policy
    targets are the search policies where ``policy_mask`` holds, zeros elsewhere; with
    ``search_policies=None`` they are left out (``policy`` None).
    """
    num_steps = rewards.shape[0]
    positions = index + np.arange(num_unroll_steps + 1)
    in_episode = positions <= num_steps
    value = np.where(in_episode, values[np.minimum(positions, num_steps)], 0.0)
    has_reward = (positions > 0) & in_episode
    reward = np.where(has_reward, np.asarray(rewards, dtype=np.float64)[
        np.clip(positions - 1, 0, max(num_steps - 1, 0))] if num_steps else 0.0, 0.0)
    searched = positions < num_steps
    policy = None
    if search_policies is not None:
        policy = np.zeros((num_unroll_steps + 1, search_policies.shape[1]))
        policy[searched] = search_policies[positions[searched]]
    value_mask = in_episode | terminated
    return UnrollTargets(value, reward, policy, value_mask, searched)


def make_target(rewards: np.ndarray, to_play: np.ndarray, state_values: np.ndarray,
                search_policies: np.ndarray, terminated: bool, index: int, num_unroll_steps: int,
                td_steps: int, discount: float, search_value_mix: float = 0.0) -> UnrollTargets:
    """All targets of one sample, as the reference's ``Game.make_target`` (with
    ``search_value_mix`` > 0, mixed with the states' own values: :func:`mix_own_values`)."""
    parts = mix_own_values(n_step_parts(rewards, to_play, terminated, td_steps, discount),
                           state_values, search_value_mix)
    values = n_step_values(parts, state_values)
    return unroll_targets(values, np.asarray(rewards), np.asarray(search_policies), terminated,
                          index, num_unroll_steps)
