"""Gymnasium environments shipped with muzero_gym (installed as ``muzero_gym.envs``).

Importing this package registers them:

- ``muzero_gym/TicTacToe-v0`` (:mod:`.tictactoe`)
- ``muzero_gym/ConnectFour-v0`` (:mod:`.connect_four`; ``rows``/``cols`` kwargs, 6 x 7 default)
- ``muzero_gym/2048-v0`` (:mod:`.game2048`)
- ``muzero_gym/Go-v0`` (:mod:`.go`; ``size`` 9, 13 or 19, ``komi``, ``max_moves`` kwargs)
- ``muzero_gym/Chess-v0`` (:mod:`.chess_game`; needs the ``chess`` package: the [chess] extra)
- ``muzero_gym/Shogi-v0`` (:mod:`.shogi_game`; needs ``cshogi``: the [shogi] extra)

The two-player contract (``info["to_play"]``, ``info["action_mask"]``, perspective of the player
to move, reward to the mover, ``get_state``/``set_state``) is described in :mod:`.board`.
"""

import gymnasium as gym

from muzero_gym.envs.board import BoardGameEnv, BoardState, IllegalMoveError

ENV_IDS = ("muzero_gym/TicTacToe-v0", "muzero_gym/ConnectFour-v0", "muzero_gym/2048-v0",
           "muzero_gym/Go-v0", "muzero_gym/Chess-v0", "muzero_gym/Shogi-v0")
_ENTRY_POINTS = ("muzero_gym.envs.tictactoe:TicTacToeEnv",
                 "muzero_gym.envs.connect_four:ConnectFourEnv",
                 "muzero_gym.envs.game2048:Game2048Env",
                 "muzero_gym.envs.go:GoEnv",
                 "muzero_gym.envs.chess_game:ChessEnv",
                 "muzero_gym.envs.shogi_game:ShogiEnv")

for _env_id, _entry_point in zip(ENV_IDS, _ENTRY_POINTS):
    if _env_id not in gym.registry:
        gym.register(_env_id, entry_point=_entry_point, disable_env_checker=True)

__all__ = ["ENV_IDS", "BoardGameEnv", "BoardState", "IllegalMoveError"]
