"""Chess on a CPU: the chess_cpu preset trained for ``--minutes``, then 40 games (both colours)
against a random mover and Stockfish at Skill Level 0, 1000 nodes a move (apt-get install
stockfish).

    python tests/benchmarks/chess_learning.py [--minutes 30] [--seeds 0 1 2] [--set ...]
"""

from _boardgames import parser, run

if __name__ == "__main__":
    run("chess_cpu", "stockfish", parser(__doc__, "stockfish", 0).parse_args())
