"""Go 9 x 9 on a CPU: the go9_cpu preset trained for ``--minutes``, then 40 games (both colours)
against a random mover and GNU Go at level 1 (apt-get install gnugo).

    python tests/benchmarks/go9_learning.py [--minutes 30] [--seeds 0 1 2] [--set ...]
"""

from _boardgames import parser, run

if __name__ == "__main__":
    run("go9_cpu", "gnugo", parser(__doc__, "gnugo", 1).parse_args())
