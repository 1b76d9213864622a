"""Go 9 x 9 self-play speed beside pgx + mctx, on this machine, in the same set-ups.

pgx's AlphaZero example (`examples/alphazero` in the pgx repository) trains go_9x9 with Gumbel
AlphaZero through mctx: a pre-activation residual network of 128 channels and 6 blocks, 32
simulations (16 actions considered at the root, mctx's completed-Q transform with c_visit 50
and c_scale 0.1), 1,024 games at once on accelerators. This script plays untrained self-play
(no learning) of Go 9 x 9 in two set-ups, each with both programs:

- ``pgx``: pgx's example network and search (above);
- ``go9_cpu``: the go9_cpu preset's network (32 channels, 2 blocks) and its 64 simulations.

Both rows search with mctx's Gumbel root selection and settings in both programs (the go9_cpu
preset itself selects by pUCT at the root).

muzero_gym plays with its true-simulator search (our numba Go rules, PyTorch network); the pgx
side is pgx's JAX rules with mctx's ``gumbel_muzero_policy``, the whole move one XLA program
(jit), stepping the rules inside the search as the example does. Both use every core, print
moves (agent steps summed over the games) per second after a warm-up, B games at once. The
JAX side needs ``pip install "jax[cpu]" pgx mctx dm-haiku`` (not muzero_gym dependencies); it
is skipped, and said so, without them.

    python tests/benchmarks/go9_selfplay_pgx.py [--batch 64] [--moves 6] [--setups pgx go9_cpu]
"""

from __future__ import annotations

import argparse
import itertools
import os
import time

from _machine import cpu_name

SETUPS = {  # name: (channels, blocks, simulations)
    "pgx": (128, 6, 32),
    "go9_cpu": (32, 2, 64),
}


def ours(batch: int, moves: int, channels: int, blocks: int, simulations: int) -> float:
    """muzero_gym's Go self-play moves/s: the go9_cpu preset with this network and search."""
    from muzero_gym.agents.muzero import MuZeroAgent
    from muzero_gym.config import load_config

    config = load_config("go9_cpu", [
        f"env.num_envs={batch}", f"model.num_channels={channels}", f"model.num_blocks={blocks}",
        f"search.num_simulations={simulations}", "search.root_selection=gumbel",
        "search.gumbel_c_scale=0.1", f"train.num_threads={os.cpu_count() or 1}",
        "log.progress=false"])
    agent = MuZeroAgent(config)
    player, _ = agent.selfplay_worker.start()
    player.step()  # warm-up: compiles the rules' kernels, fills the caches
    done, steps, start = 0, 0, time.perf_counter()
    while steps < moves:
        done += player.step().num_transitions
        steps += 1
    rate = done / (time.perf_counter() - start)
    agent.close()
    return rate


def pgx_side(batch: int, moves: int, channels: int, blocks: int, simulations: int) -> float:
    """pgx + mctx Go self-play moves/s: Gumbel AlphaZero over pgx's rules, one jitted move."""
    import haiku as hk
    import jax
    import jax.numpy as jnp
    import mctx
    import pgx
    from pgx.experimental import auto_reset

    env = pgx.make("go_9x9")

    def network(x):
        # A pre-activation residual tower with policy and value heads, as pgx's example uses.
        # Batch norm at inference is a per-channel scale and offset, which is what runs here.
        names = itertools.count()

        def norm(h):
            n = next(names)
            scale = hk.get_parameter(f"scale{n}", h.shape[-1:], init=jnp.ones)
            offset = hk.get_parameter(f"offset{n}", h.shape[-1:], init=jnp.zeros)
            return h * scale + offset

        h = hk.Conv2D(channels, 3)(x.astype(jnp.float32))
        for _ in range(blocks):
            skip = h
            h = hk.Conv2D(channels, 3)(jax.nn.relu(norm(h)))
            h = hk.Conv2D(channels, 3)(jax.nn.relu(norm(h)))
            h = h + skip
        h = jax.nn.relu(norm(h))
        logits = hk.Linear(env.num_actions)(hk.Flatten()(jax.nn.relu(norm(hk.Conv2D(2, 1)(h)))))
        v = hk.Flatten()(jax.nn.relu(norm(hk.Conv2D(1, 1)(h))))
        value = jnp.tanh(hk.Linear(1)(jax.nn.relu(hk.Linear(channels)(v))))[:, 0]
        return logits, value

    model = hk.without_apply_rng(hk.transform_with_state(network))
    states = jax.vmap(env.init)(jax.random.split(jax.random.PRNGKey(0), batch))
    params, bn_state = model.init(jax.random.PRNGKey(1), states.observation)

    def evaluate(observation):
        (logits, value), _ = model.apply(params, bn_state, observation)
        return logits, value

    def recurrent(_, key, action, state):
        del key
        mover = state.current_player
        state = jax.vmap(env.step)(state, action)
        logits, value = evaluate(state.observation)
        logits = jnp.where(state.legal_action_mask, logits, jnp.finfo(logits.dtype).min)
        reward = state.rewards[jnp.arange(batch), mover]
        value = jnp.where(state.terminated, 0.0, value)
        discount = jnp.where(state.terminated, 0.0, -jnp.ones_like(value))
        return mctx.RecurrentFnOutput(reward=reward, discount=discount, prior_logits=logits,
                                      value=value), state

    @jax.jit
    def move(state, key):
        search_key, reset_key = jax.random.split(key)
        logits, value = evaluate(state.observation)
        root = mctx.RootFnOutput(prior_logits=logits, value=value, embedding=state)
        out = mctx.gumbel_muzero_policy(
            params=None, rng_key=search_key, root=root, recurrent_fn=recurrent,
            num_simulations=simulations, invalid_actions=~state.legal_action_mask,
            qtransform=mctx.qtransform_completed_by_mix_value, gumbel_scale=1.0)
        step = jax.vmap(auto_reset(env.step, env.init))
        return step(state, out.action, jax.random.split(reset_key, batch))

    key = jax.random.PRNGKey(2)
    states = move(states, key)  # warm-up: compiles
    jax.block_until_ready(states)
    start = time.perf_counter()
    for i in range(moves):
        states = move(states, jax.random.fold_in(key, i))
    jax.block_until_ready(states)
    return batch * moves / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64, help="games played at once")
    parser.add_argument("--moves", type=int, default=6, help="timed moves of every game")
    parser.add_argument("--setups", nargs="+", choices=sorted(SETUPS), default=list(SETUPS))
    args = parser.parse_args()
    print(f"Go 9 x 9 self-play, untrained, B = {args.batch}, {cpu_name()}, "
          f"{os.cpu_count()} cores")
    print(f"{'set-up':<10} {'network':>18} {'simulations':>12} {'muzero_gym':>12} "
          f"{'pgx + mctx':>12}   (moves/s)")
    for name in args.setups:
        channels, blocks, simulations = SETUPS[name]
        mine = ours(args.batch, args.moves, channels, blocks, simulations)
        try:
            theirs = f"{pgx_side(args.batch, args.moves, channels, blocks, simulations):12,.1f}"
        except ImportError as e:
            theirs = f"{'-':>12}   ({e.name} not installed: pip install \"jax[cpu]\" pgx mctx " \
                     "dm-haiku)"
        print(f"{name:<10} {f'{channels} ch x {blocks} blocks':>18} {simulations:>12} "
              f"{mine:12,.1f} {theirs}", flush=True)


if __name__ == "__main__":
    main()
