"""Sample efficiency, wall-clock time and stability of the cartpole preset on CartPole-v1.

For each seed, trains the ``cartpole`` preset for ``--max-env-steps`` env steps and evaluates it
every ``--eval-every`` env steps on 20 greedy episodes. Prints each seed's curve, the env steps
and minutes (evaluations included) at which the evaluation mean first reached 475, and the
lowest evaluation after that (the goal: 475 within 30k env steps and 10 minutes, and no later
evaluation below 400), then the mean and spread over the seeds.

With ``--diagnose`` each evaluation also prints what the greedy episodes show (the curve is the
same: the diagnosis reads the evaluation's games and draws nothing from the run's random
streams): how they ended (``P`` the pole fell, ``T`` the cart left the track, ``-`` 500 steps),
the network's value halfway through them, the mean error of the stored search values and of the
network's values against the discounted returns of the episodes that ended early, the entropy of
the network's prior, the return of the network alone (the prior's argmax, no search) over 20
episodes, and the mean return of the last 20 self-play episodes (the behaviour whose returns
the value targets hold). Its own time is left out of the minutes.

    python tests/benchmarks/cartpole_learning.py [--seeds 0 1 2 3 4] [--max-env-steps 30000]
        [--eval-every 2500] [--diagnose] [--set section.key=value ...]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from _machine import cpu_name

from muzero_gym.agents.muzero import MuZeroAgent
from muzero_gym.config import load_config
from muzero_gym.environment import make_env
from muzero_gym.game import Game

SOLVED = 475.0
HOLDS = 400.0


TRACK_END = 2.4  # |x| at which CartPole-v1 ends an episode: the cart left the track


def how_it_ended(game: Game) -> str:
    if not game.terminated:
        return "-"
    return "T" if abs(float(game.observations[-1][0])) > TRACK_END else "P"


def network_outputs(agent: MuZeroAgent, observations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values [N] and prior probabilities [N, 2] of raw observations from the weights the
    evaluation plays (the moving average with ``train.averaged_weights_tau``)."""
    network = agent.learner.playing_network
    with torch.inference_mode():
        out = network.initial_inference(torch.as_tensor(observations, dtype=torch.float32))
        return (network.value_scalar(out.value_logits).numpy(),
                torch.softmax(out.policy_logits, -1).numpy())


def network_alone_return(agent: MuZeroAgent, num_episodes: int, seed: int) -> float:
    """Mean return of greedy episodes that follow the prior's argmax, without search."""
    env = make_env(agent.config.env)
    returns = []
    for episode in range(num_episodes):
        observation, _ = env.reset(seed=seed * 1000 + episode)
        total, done = 0.0, False
        while not done:
            _, prior = network_outputs(agent, np.asarray(observation)[None])
            observation, reward, terminated, truncated, _ = env.step(int(prior[0].argmax()))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns))


def diagnosis(agent: MuZeroAgent, games: list[Game], seed: int) -> str:
    discount = agent.config.train.discount
    halfway, entropy, search_error, network_error = [], [], [], []
    for game in games:
        length = len(game.rewards)
        values, prior = network_outputs(agent, np.stack(game.observations[:length]))
        halfway.append(values[length // 2])
        entropy.append(float(-(prior * np.log(prior + 1e-12)).sum(axis=1).mean()))
        if game.terminated:  # every reward is 1: the return from step i is a geometric sum
            returns = (1 - discount ** (length - np.arange(length))) / (1 - discount)
            search_error.append(float(np.mean(np.asarray(game.root_values[:length]) - returns)))
            network_error.append(float(np.mean(values - returns)))
    error = (f"search {np.mean(search_error):+6.1f}, network {np.mean(network_error):+6.1f}"
             if search_error else "no early end")
    return (f"    ends {''.join(how_it_ended(g) for g in games)}; value halfway "
            f"{np.mean(halfway):5.1f}; value - return ({error}); prior entropy "
            f"{np.mean(entropy):.3f}; network alone {network_alone_return(agent, 20, seed):5.1f}; "
            f"self-play {np.mean(agent.recent_returns):5.1f}")


def run_seed(seed: int, max_env_steps: int, eval_every: int, overrides: list[str],
             diagnose: bool = False) -> dict:
    config = load_config("cartpole", [*overrides, f"train.seed={seed}", "train.eval_interval=0",
                                      "log.progress=false"])
    agent = MuZeroAgent(config)
    start = time.perf_counter()
    curve, solved_at = [], None
    while agent.env_steps < max_env_steps:
        agent.learn(min(agent.env_steps + eval_every, max_env_steps), progress=False)
        games = agent.evaluate_games(20, seed=seed)
        mean = float(np.mean([sum(game.rewards) for game in games]))
        minutes = (time.perf_counter() - start) / 60
        curve.append((agent.env_steps, minutes, mean))
        print(f"  seed {seed}: {agent.env_steps:>6} env steps, {minutes:5.1f} min, "
              f"eval mean {mean:6.1f}", flush=True)
        if diagnose:  # its time is left out of the run's minutes
            begun = time.perf_counter()
            print(diagnosis(agent, games, seed), flush=True)
            start += time.perf_counter() - begun
        if solved_at is None and mean >= SOLVED:
            solved_at = (agent.env_steps, minutes)
    after = [m for steps, _, m in curve if solved_at is not None and steps > solved_at[0]]
    return {"seed": seed, "solved_at": solved_at, "lowest_after": min(after) if after else None,
            "final": curve[-1][2], "curve": curve}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--max-env-steps", type=int, default=30_000)
    parser.add_argument("--eval-every", type=int, default=2500)
    parser.add_argument("--diagnose", action="store_true",
                        help="print what each evaluation's episodes show (see the docstring)")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    print(f"{cpu_name()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads available", flush=True)
    results = [run_seed(s, args.max_env_steps, args.eval_every, args.overrides, args.diagnose)
               for s in args.seeds]
    print(f"\n{'seed':>4} {'reached 475':>12} {'env steps':>10} {'minutes':>8} "
          f"{'lowest after':>13} {'final':>7}  curve")
    for r in results:
        reached = r["solved_at"] is not None
        steps, minutes = r["solved_at"] if reached else (None, None)
        lowest = r["lowest_after"]
        curve = " ".join(f"{m:.0f}" for _, _, m in r["curve"])
        print(f"{r['seed']:>4} {'yes' if reached else 'no':>12} "
              f"{steps if steps is not None else '-':>10} "
              f"{f'{minutes:.1f}' if minutes is not None else '-':>8} "
              f"{f'{lowest:.1f}' if lowest is not None else '-':>13} {r['final']:>7.1f}  {curve}")
    met = [r for r in results if r["solved_at"] is not None and r["solved_at"][1] <= 10
           and (r["lowest_after"] is None or r["lowest_after"] >= HOLDS)]
    finals = np.array([r["final"] for r in results])
    print(f"goal met (475 within the run and 10 min, never below {HOLDS:.0f} after): "
          f"{len(met)}/{len(results)} seeds; final evaluation mean {finals.mean():.1f} "
          f"(min {finals.min():.1f}, max {finals.max():.1f})")


if __name__ == "__main__":
    main()
