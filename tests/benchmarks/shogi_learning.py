"""Shogi on a CPU: the shogi_cpu preset trained for ``--minutes``, then 40 games (both colours)
against a random mover and GNU Shogi at depth 1 (apt-get install gnushogi).

    python tests/benchmarks/shogi_learning.py [--minutes 30] [--seeds 0 1 2] [--set ...]
"""

from _boardgames import parser, run

if __name__ == "__main__":
    run("shogi_cpu", "gnushogi", parser(__doc__, "gnushogi", 1).parse_args())
