"""The token benchmark's programs (`benchmarks/tokens.py`): the teacher-forced forward pass,
generation and whole updates of a `TokenConfig`, each a `harness.Program` of several batches or
updates per call, the compiled updates kept between its parts, and XLA's operation count of a
compiled program against the device's peak."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from benchmarks import harness
from benchmarks.programs import seed_keys
from vaco_jax.core.lag_models import Fixed
from vaco_jax.core.policy_buffer import push
from vaco_jax.tokens import tasks
from vaco_jax.tokens.config import TokenConfig, TokenHParams
from vaco_jax.tokens.model import TokenPolicy
from vaco_jax.tokens.train import TokenTrainer

BASELINE = "fixed:0"
"""The acting every other row is timed against."""


def _tokens(config: TokenConfig) -> int:
    """Response tokens of one generation or update."""
    return config.batch_size * config.response_length


def _start(config: TokenConfig, num_seeds: int) -> tuple[TokenTrainer, TokenHParams, Any]:
    """A trainer of `config` (random parameters: the cost does not depend on their values) and
    `num_seeds` initial states whose buffers hold K versions, so that no lag is capped."""
    params = TokenPolicy(config.model_spec).init(jax.random.PRNGKey(0))
    trainer = TokenTrainer(config, params)
    lag = 0.0 if isinstance(config.lag_model, Fixed) else float(config.buffer_capacity - 1)
    hp = jax.tree.map(lambda x: jnp.broadcast_to(x, (num_seeds,)), TokenHParams.create(lag=lag))
    state = jax.jit(jax.vmap(trainer.init))(seed_keys(num_seeds), hp)
    for _ in range(config.buffer_capacity - 1):
        state = state.replace(buffer=jax.vmap(push)(state.buffer, state.params))
    return trainer, hp, state


def forward_program(config: TokenConfig, batches: int) -> harness.Program:
    """`batches` teacher-forced passes over P x G prompt+response sequences."""
    policy = TokenPolicy(config.model_spec)
    params = policy.init(jax.random.PRNGKey(0))
    length = config.task_spec.prompt_length + config.response_length
    sequences = jax.random.randint(jax.random.PRNGKey(1), (batches, config.batch_size, length),
                                   0, tasks.VOCAB_SIZE)

    def chunk(params, sequences):  # every batch's logits returned: none is dead code
        return jax.lax.scan(lambda _, s: (None, policy.logits(params, s)), None, sequences)[1]

    return harness.Program(fn=jax.jit(chunk), args=(params, sequences),
                           advance=lambda args, out: args,
                           steps_per_call=batches * _tokens(config))


def generate_program(config: TokenConfig, batches: int) -> harness.Program:
    """`batches` generations (prompts, lags, stale sampling, rewards, advantages, phase-start
    log-probs) from the same state, each with its own key."""
    trainer, hp, state = _start(config, 1)

    def chunk(state, hp):
        keys = jax.random.split(state.key, batches)
        return jax.lax.scan(lambda _, k: (None, trainer.collect(state, k, hp)[1]), None, keys)[1]

    return harness.Program(fn=jax.jit(jax.vmap(chunk)), args=(state, hp),
                           advance=lambda args, out: args,
                           steps_per_call=batches * _tokens(config))


def update_program(config: TokenConfig, num_seeds: int, updates: int) -> harness.Program:
    """`updates` training updates (generation and optimisation) of `num_seeds` runs per call."""
    trainer, hp, state = _start(config, num_seeds)

    def chunk(state, hp):
        return jax.lax.scan(lambda s, _: trainer.update(s, hp), state, None, length=updates)

    return harness.Program(fn=jax.jit(jax.vmap(chunk)), args=(state, hp),
                           advance=lambda args, out: (out[0], args[1]),
                           steps_per_call=num_seeds * updates * _tokens(config))


_UPDATES: dict[tuple[TokenConfig, int, int], harness.Compiled] = {}


def compiled_update(config: TokenConfig, num_seeds: int, updates: int) -> harness.Compiled:
    """`update_program` compiled (not yet warmed up: `.warm_up()`) once until `seeds` has run:
    its one-seed program is `throughput`'s `fixed:0` update. Each holds its state on the device,
    so `release_updates` lets them go after `seeds` and before `capacity`, which measures what
    fits."""
    key = (config, num_seeds, updates)
    if key not in _UPDATES:
        _UPDATES[key] = harness.Compiled(update_program(config, num_seeds, updates),
                                         warm_up=False)
    return _UPDATES[key]


def release_updates(*keys: tuple[TokenConfig, int, int]) -> None:
    """Lets the programs of `compiled_update` (those of `keys`, or every one) and their device
    state go."""
    for key in keys or list(_UPDATES):
        _UPDATES.pop(key, None)


def flops_fields(compiled: harness.Compiled, summary: dict[str, Any], calls_inside: int,
                 decodes: bool) -> dict[str, Any]:
    """XLA's count of the program's operations per call, the rate its fastest call reached, and
    the model FLOPs utilisation against the device's published peak for fp32 matrix products
    (`benchmarks/hardware.py`; None on a device it does not know). XLA counts a loop's body
    once: the count of the scan over the call's `calls_inside` batches or updates is multiplied
    by it, and a program that `decodes` token by token keeps a loop whose body is counted once,
    so its count and utilisation are lower bounds (`loops_counted_once`)."""
    from benchmarks import hardware

    counts = harness.xla_counts(compiled.executable)
    if calls_inside > 1 and calls_inside not in counts["loop_trip_counts"]:
        # XLA unrolled or removed the scan the multiplication stands for: no count to trust.
        return {"xla_flops_per_call": None, "xla_bytes_per_call": None, "flops_per_s": None,
                "loops_counted_once": decodes, "peak_flops": None, "mfu": None,
                "note": f"no loop of {calls_inside} trips in the optimised program "
                        f"(trip counts {counts['loop_trip_counts']})"}
    flops = counts["flops"] * calls_inside
    per_s = flops * summary["steps_per_s"] / summary["steps_per_call"]
    peak = hardware.peak_for(jax.devices()[0].device_kind)
    return {"xla_flops_per_call": flops, "xla_bytes_per_call": counts["bytes"] * calls_inside,
            "flops_per_s": per_s, "loops_counted_once": decodes,
            "peak_flops": None if peak is None else peak.matrix_flops,
            "mfu": None if peak is None else per_s / peak.matrix_flops}
