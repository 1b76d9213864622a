"""MinAtar's games as muzero_gym registers them: minatar's own Gymnasium env, which also
declares the symmetries a game has, so that ``train.augment_symmetries`` can train on them.

Breakout's rules are left-right symmetric: reversing the columns of every plane and swapping
"left" with "right" maps a game to an equally good game, move for move (the ball's diagonals,
the wall and paddle bounces and the bricks all mirror; only the paddle's start column, 4 of 0-9,
has no mirror image among start positions, which the augmentation does not need). The other
four declare none: Freeway's chicken always walks column 4, so its mirror is a game that cannot
occur; Space Invaders picks the alien that shoots by column order when two are equally near;
Asterix's and Seaquest's rules have not been checked for an exact mirror.

Importing this module imports minatar (about 2 s); :mod:`muzero_gym.environment` registers the
ids by name, so only a run that makes a MinAtar env pays for it.
"""

from __future__ import annotations

import numpy as np
from minatar.gym import BaseEnv

from muzero_gym.symmetry import Symmetry, mirror_columns

# MinAtar's full action set, in its order: no-op, left, up, right, down, fire.
_FULL_ACTIONS = ("n", "l", "u", "r", "d", "f")
_MIRRORED_ACTION = {"n": "n", "l": "r", "u": "u", "r": "l", "d": "d", "f": "f"}
MIRROR_SYMMETRIC_GAMES = frozenset({"breakout"})


class MinAtarEnv(BaseEnv):
    """``minatar.gym.BaseEnv`` with :meth:`symmetries` (the entry point of muzero_gym's
    ``MinAtar/<Game>-v0/v1`` ids; the same game, spaces and steps as minatar's own)."""

    def symmetries(self) -> list[Symmetry]:
        """Breakout's left-right mirror (columns reversed, left and right swapped); [] for the
        other games."""
        if self.game.env_name not in MIRROR_SYMMETRIC_GAMES:
            return []
        names = [_FULL_ACTIONS[action] for action in self.action_set]
        permutation = np.array([names.index(_MIRRORED_ACTION[name]) for name in names])
        return [Symmetry("mirror", mirror_columns, permutation)]
