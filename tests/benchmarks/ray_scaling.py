"""Speed of the local and the Ray backend side by side, and of 1, 2, 4 self-play actors.

For each preset, runs of ``--env-steps`` env steps each (learning on unless said):

- local: self-play alone (the learner never starts), then self-play with learning;
- ray with one actor: self-play alone, then with learning (the ratio limits lifted, so that
  the actor never waits: what is measured is whether the learner stalls self-play);
- ray with 1, 2, 4 actors, learning on: env steps/s, learner steps/s and env steps/s per actor
  (on a 2-core machine this shows the cost of each actor, not a speed-up).

Prints env steps/s and learner steps/s of each run, counted from the moment every actor had
sent its first results (start-up left out). With ``--two-nodes`` (root, util-linux's
unshare and iproute2 needed) the actor runs happen on a two-node Ray cluster started on this
machine inside a network namespace that has only loopback.

    python tests/benchmarks/ray_scaling.py [--presets cartpole connect4] [--env-steps 6000]
        [--actors 1 2 4] [--two-nodes]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

from _machine import cpu_name

SETTINGS = {  # a short run of each preset: small replay, no evaluation, no checkpoints
    "cartpole": ["train.eval_interval=0", "log.progress=false"],
    "connect4": ["train.eval_interval=0", "log.progress=false"],
}


def measure(preset: str, overrides: list[str], env_steps: int, address: str | None) -> dict:
    from muzero_gym.agents.muzero import MuZeroAgent
    from muzero_gym.config import load_config

    agent = MuZeroAgent(load_config(preset, [*SETTINGS.get(preset, []), *overrides]))
    agent.ray_address = address
    agent.learn(env_steps, progress=False)
    env_rate, learner_rate = agent.steady_rates()  # from the moment every actor ran
    agent.close()
    return {"env_steps_per_s": env_rate, "learner_steps_per_s": learner_rate}


def runs(preset: str, env_steps: int, actors: list[int], address: str | None,
         only_actors: bool = False) -> list[tuple[str, dict]]:
    alone = ["train.warmup_transitions=1000000000"]
    free = ["train.max_ratio_drift=1.0"]
    out = []
    if not only_actors:
        out.append(("local, self-play alone", measure(preset, alone, env_steps, None)))
        out.append(("local, learning", measure(preset, [], env_steps, None)))
        ray1 = ["train.backend=ray", "train.num_actors=1"]
        out.append(("ray 1 actor, self-play alone",
                    measure(preset, [*ray1, *alone], env_steps, address)))
        out.append(("ray 1 actor, learning", measure(preset, [*ray1, *free], env_steps,
                                                     address)))
    for count in actors:
        result = measure(preset, ["train.backend=ray", f"train.num_actors={count}", *free],
                         env_steps, address)
        result["per_actor"] = result["env_steps_per_s"] / count
        out.append((f"ray {count} actors, learning", result))
    return out


def print_table(preset: str, results: list[tuple[str, dict]]) -> None:
    print(f"\n{preset}:")
    print(f"  {'run':<32} {'env steps/s':>12} {'learner steps/s':>16} {'per actor':>10}")
    for name, r in results:
        per_actor = f"{r['per_actor']:.0f}" if "per_actor" in r else ""
        print(f"  {name:<32} {r['env_steps_per_s']:>12.0f} {r['learner_steps_per_s']:>16.1f} "
              f"{per_actor:>10}")


TWO_NODES = textwrap.dedent("""
    set -e
    ip link set lo up
    export RAY_AUTH_MODE=disabled HOME="$WORK/home"
    mkdir -p "$HOME"
    ray start --head --node-ip-address=127.0.0.1 --port=6399 --include-dashboard=false \\
        --disable-usage-stats >/dev/null
    ray start --address=127.0.0.1:6399 --node-ip-address=127.0.0.1 \\
        --resources='{"second_node": 4}' --disable-usage-stats >/dev/null
    set +e
    "$PYTHON" "$SCRIPT" --inside-cluster "$@"
    status=$?
    ray stop --force >/dev/null 2>&1
    exit $status
""")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["cartpole", "connect4"])
    parser.add_argument("--env-steps", type=int, default=6000)
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--two-nodes", action="store_true")
    parser.add_argument("--inside-cluster", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside_cluster:  # the actor runs, on the cluster started around this process
        out = {p: runs(p, args.env_steps, args.actors, "127.0.0.1:6399", only_actors=True)
               for p in args.presets}
        print("RESULTS " + json.dumps(out))
        return
    print(f"{cpu_name()}, {os.cpu_count()} cores", flush=True)
    for preset in args.presets:
        results = runs(preset, args.env_steps, [] if args.two_nodes else args.actors, None)
        print_table(preset, results)
    if args.two_nodes:
        ray_bin = os.path.dirname(sys.executable)
        with tempfile.TemporaryDirectory() as work:
            env = {**os.environ, "WORK": work, "PYTHON": sys.executable,
                   "SCRIPT": os.path.abspath(__file__),
                   "PATH": f"{ray_bin}{os.pathsep}{os.environ['PATH']}"}
            forwarded = ["--presets", *args.presets, "--env-steps", str(args.env_steps),
                         "--actors", *map(str, args.actors)]
            done = subprocess.run(["unshare", "-n", "bash", "-c", TWO_NODES, "bash",
                                   *forwarded], env=env, capture_output=True, text=True)
        lines = [x for x in done.stdout.splitlines() if x.startswith("RESULTS ")]
        if done.returncode != 0 or not lines:
            print(done.stdout[-2000:], done.stderr[-2000:])
            raise SystemExit("the two-node runs failed")
        for preset, results in json.loads(lines[0][len("RESULTS "):]).items():
            print_table(f"{preset}, two-node cluster over loopback", results)


if __name__ == "__main__":
    main()
