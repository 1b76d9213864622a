"""MinAtar learning on a CPU: the ``minatar_<game>`` preset trained for a fixed wall-clock time.

For each seed, trains for ``--minutes`` of training time (evaluations are not counted), with a
greedy evaluation of ``--eval-episodes`` episodes every ``--eval-every`` env steps, then a final
evaluation of ``--final-episodes`` episodes; prints the curve, the final mean with its standard
error, and a uniformly random policy's mean on the same game. ``--final-simulations N ...``
evaluates the same final weights again on the same episodes with a play-time search of N
simulations each (``search.eval_simulations``): what a deeper or shallower search at play does
with the weights that play (the moving average where the run keeps one; 1: the policy head
alone). With ``train.averaged_weights_tau`` > 0 evaluations play the moving average of the
weights; ``--trained-too`` plays every evaluation again with the trained weights (same
episodes; training is unchanged, evaluations are not counted), so one run measures both.
Needs the [minatar] extra.

    python tests/benchmarks/minatar_learning.py [--game breakout] [--seeds 0 1 2]
        [--minutes 30] [--eval-every N] [--eval-episodes N] [--final-episodes N]
        [--final-simulations N ...] [--trained-too] [--set section.key=value ...]

The evaluation schedule defaults to the game's (``EVALUATION``): 10 episodes every 10,000 env
steps and 50 at the end, except Freeway, whose episodes last 2,500 steps (an evaluation of 10
would take about a minute every 10,000 env steps): 8 every 40,000 and 32 at the end.

Games: asterix, breakout, freeway, seaquest, space_invaders.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch
from _machine import cpu_name
from _seeds import spread

from muzero_gym.agents.muzero import MuZeroAgent, torch_threads
from muzero_gym.config import load_config
from muzero_gym.environment import register_envs

GAMES = ("asterix", "breakout", "freeway", "seaquest", "space_invaders")
# (eval every N env steps, episodes per evaluation, final episodes) of each game
EVALUATION = {game: (10_000, 10, 50) for game in GAMES} | {"freeway": (40_000, 8, 32)}


def random_policy_mean(env_id: str, episodes: int, seed: int) -> float:
    """Mean return of uniformly random actions (the MinAtar paper's baseline)."""
    register_envs()
    env = gym.make(env_id)
    env.action_space.seed(seed)
    returns = []
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total += reward
            done = terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns))


def evaluate_trained_weights(agent: MuZeroAgent, episodes: int, seed: int) -> np.ndarray:
    """``agent.evaluate`` played with the trained weights although the run keeps a moving
    average of them (the average is hidden from the agent for the call, not changed)."""
    averaged, agent.learner.averaged_network = agent.learner.averaged_network, None
    try:
        return agent.evaluate(episodes, seed=seed)
    finally:
        agent.learner.averaged_network = averaged


def run_seed(game: str, seed: int, minutes: float, eval_every: int, eval_episodes: int,
             final_episodes: int, final_simulations: list[int], trained_too: bool,
             overrides: list[str]) -> dict:
    config = load_config(f"minatar_{game}", [*overrides, f"train.seed={seed}",
                                             "train.eval_interval=0", "log.progress=false"])
    agent = MuZeroAgent(config)
    trained, curve, trained_curve = 0.0, [], []
    while trained < minutes * 60:
        start = time.perf_counter()
        agent.learn(agent.env_steps + eval_every, progress=False)
        trained += time.perf_counter() - start
        returns = agent.evaluate(eval_episodes, seed=seed)
        curve.append((agent.env_steps, trained / 60, float(returns.mean())))
        print(f"  {game} seed {seed}: {agent.env_steps:>8,} env steps, "
              f"{agent.training_steps:>7,} learner steps, {trained / 60:5.1f} min, "
              f"eval mean {returns.mean():6.2f}", flush=True)
        if trained_too:
            returns = evaluate_trained_weights(agent, eval_episodes, seed)
            trained_curve.append(float(returns.mean()))
            print(f"  {game} seed {seed}: {agent.env_steps:>8,} env steps, trained weights: "
                  f"eval mean {returns.mean():6.2f}", flush=True)
    final = agent.evaluate(final_episodes, seed=10_000 + seed)
    final_trained = (evaluate_trained_weights(agent, final_episodes, 10_000 + seed)
                     if trained_too else None)
    at_play = {}
    for simulations in final_simulations:
        agent.set_eval_simulations(simulations)
        at_play[simulations] = agent.evaluate(final_episodes, seed=10_000 + seed)
        print(f"  {game} seed {seed}: final weights, {_simulations(simulations)} at play: "
              f"mean {_mean_sem(at_play[simulations])}", flush=True)
    agent.close()
    return {"seed": seed, "env_steps": agent.env_steps, "learner_steps": agent.training_steps,
            "minutes": trained / 60, "final": final, "at_play": at_play, "curve": curve,
            "final_trained": final_trained, "trained_curve": trained_curve}


def _simulations(n: int) -> str:
    """'1 simulation', '16 simulations'."""
    return f"{n} simulation{'s' if n != 1 else ''}"


def _mean_sem(returns: np.ndarray) -> str:
    """'mean +- standard error' of evaluation returns."""
    return f"{returns.mean():7.2f} +- {returns.std(ddof=1) / np.sqrt(len(returns)):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", choices=GAMES, default="breakout")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--eval-every", type=int, help="default: the game's (EVALUATION)")
    parser.add_argument("--eval-episodes", type=int, help="default: the game's")
    parser.add_argument("--final-episodes", type=int, help="default: the game's")
    parser.add_argument("--final-simulations", type=int, nargs="+", default=[],
                        help="evaluate the final weights again with these play-time searches")
    parser.add_argument("--trained-too", action="store_true",
                        help="with a moving average of the weights, evaluate the trained ones too")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    if any(n < 1 for n in args.final_simulations):
        parser.error("--final-simulations must be at least 1")
    for name, default in zip(("eval_every", "eval_episodes", "final_episodes"),
                             EVALUATION[args.game]):
        if getattr(args, name) is None:
            setattr(args, name, default)
        elif getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    config = load_config(f"minatar_{args.game}", args.overrides)
    if args.trained_too and config.train.averaged_weights_tau == 0:
        parser.error("--trained-too: this run keeps no moving average of its weights "
                     "(train.averaged_weights_tau = 0), so its evaluations play the trained ones")
    threads = torch_threads(config) or torch.get_num_threads()
    print(f"{config.env.id}, preset minatar_{args.game}, {args.minutes:g} min per seed, "
          f"evaluation: {args.eval_episodes} episodes every {args.eval_every:,} env steps, "
          f"{args.final_episodes} at the end, torch {torch.__version__} "
          f"({threads} thread{'s' if threads != 1 else ''}"
          f"{' each for self-play and learner' if config.train.concurrent_learner else ''}), "
          f"{cpu_name()}", flush=True)
    random_mean = random_policy_mean(config.env.id, 100, 0)
    results = [run_seed(args.game, s, args.minutes, args.eval_every, args.eval_episodes,
                        args.final_episodes, args.final_simulations, args.trained_too,
                        args.overrides)
               for s in args.seeds]
    print(f"\n{config.env.id}: random policy mean {random_mean:.2f} (100 episodes)")
    at_play = "".join(f" {_simulations(n):>17}" for n in args.final_simulations)
    print(f"{'seed':>4} {'env steps':>10} {'learner':>8} {'minutes':>8} {'final mean':>15}"
          + at_play)
    for r in results:
        print(f"{r['seed']:>4} {r['env_steps']:>10,} {r['learner_steps']:>8,} "
              f"{r['minutes']:>8.1f} {_mean_sem(r['final'])}"
              + "".join(f" {_mean_sem(r['at_play'][n])}" for n in args.final_simulations))
    print(spread("final mean", [r["final"].mean() for r in results], "{:.2f}"))
    if args.trained_too:
        for r in results:
            print(f"seed {r['seed']}, trained weights: final mean {_mean_sem(r['final_trained'])}; "
                  f"evaluations {' '.join(f'{m:.1f}' for m in r['trained_curve'])}")
        print(spread("final mean, trained weights",
                     [r["final_trained"].mean() for r in results], "{:.2f}"))
    for n in args.final_simulations:
        print(spread(f"final mean, {_simulations(n)} at play",
                     [r["at_play"][n].mean() for r in results], "{:.2f}"))


if __name__ == "__main__":
    main()
