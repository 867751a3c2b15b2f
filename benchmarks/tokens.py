"""Token testbed throughput: generation and training against the forward pass alone.

    PYTHONPATH=. python benchmarks/tokens.py [--repeats 5] [--prompts 8 --group-size 8]

Rates count response tokens (P x G x response_length per update). `forward` is one
teacher-forced pass over every prompt+response sequence, the physical limit of both:
generation runs the same network once per token with a key-value cache, and an update is one
generation plus a phase-start pass plus `epochs x minibatches` forward-backward passes.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp

from vaco_jax.policy_buffer import push
from vaco_jax.tokens.config import TokenConfig, TokenHParams
from vaco_jax.tokens.model import TokenPolicy
from vaco_jax.tokens.train import TokenTrainer


def _seconds(fn, args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))  # compile
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=TokenConfig.prompts)
    parser.add_argument("--group-size", type=int, default=TokenConfig.group_size)
    args = parser.parse_args()
    config = TokenConfig(prompts=args.prompts, group_size=args.group_size,
                         lag_model="uniform", buffer_capacity=4)
    params = TokenPolicy(config.model_spec).init(jax.random.PRNGKey(0))
    trainer = TokenTrainer(config, params)
    key = jax.random.PRNGKey(1)
    tokens = config.batch_size * config.response_length
    rows = []
    for name, lag in (("synchronous", 0.0), ("stale per prompt group", 3.0)):
        hp = TokenHParams.create(lag=lag)
        state = trainer.init(key, hp)
        for _ in range(3):  # fill the buffer so that lags are not capped
            state = state.replace(buffer=push(state.buffer, state.params))
        batch = jax.jit(trainer.generate)(state, key, hp)
        sequences = jnp.concatenate([batch.prompt, batch.response], axis=1)
        forward = _seconds(jax.jit(trainer.policy.logits), (params, sequences), args.repeats)
        generate = _seconds(jax.jit(trainer.generate), (state, key, hp), args.repeats)
        update = _seconds(jax.jit(trainer.update), (state, hp), args.repeats)
        rows.append((name, tokens / forward, tokens / generate, tokens / update))
    print(f"{jax.devices()[0].platform}: P x G = {config.prompts} x {config.group_size}, "
          f"response {config.response_length} tokens, model {config.model_spec}")
    print(f"{'acting':<24}{'forward tok/s':>16}{'generated tok/s':>18}{'trained tok/s':>16}")
    for name, forward, generated, trained in rows:
        print(f"{name:<24}{forward:>16,.0f}{generated:>18,.0f}{trained:>16,.0f}")


if __name__ == "__main__":
    main()
