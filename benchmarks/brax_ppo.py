"""Brax's own PPO trainer (`brax.training.agents.ppo.train`) on vaco_jax's settings, timed.

Settings are mapped one to one: `num_envs`; `unroll_length = rollout_length`;
`num_minibatches = minibatches` with `batch_size = num_envs / minibatches` trajectories, so one
training step consumes exactly one rollout of every environment (`num_envs * rollout_length`
steps, like one vaco_jax update) and each minibatch holds the same number of samples;
`num_updates_per_batch = epochs`; the same hidden sizes with tanh activations; observation
normalisation, advantage normalisation, gradient clipping 0.5, clip 0.2, gamma 0.99, GAE 0.95.
Remaining differences are Brax's: a tanh-squashed Gaussian policy whose network also outputs the
scale, GAE recomputed inside every minibatch loss, and its episode wrappers.

Timing: the trainer runs `timed_epochs + 1` training epochs of `updates` training steps each,
with no evaluation (`run_evals=False`). The first epoch includes compilation; the trainer itself
times every epoch around a blocking call (`training/sps`), and the fastest later epoch is its
steady-state throughput.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import time
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vaco_jax.control.config import ControlHParams, ControlConfig


def _device_put_replicated(tree: Any, devices: list, *, axis_name: str) -> Any:
    """Stand-in for `jax.device_put_replicated`, which JAX 0.10 removed and Brax 0.14.2 still
    calls: every leaf stacked `len(devices)` times along a new leading axis, one copy per device.
    An identity `pmap` over Brax's own axis name places the copies, so they carry exactly the
    sharding of the outputs of Brax's `pmap`-ed epoch, whose mesh names that axis: with `pmap`'s
    default axis name the epoch compiled a second time at its second call, when its own outputs
    came back in (5 s on an H100 for `ant`)."""
    stacked = jax.tree.map(
        lambda x: jnp.broadcast_to(jnp.asarray(x), (len(devices),) + jnp.shape(x)), tree)
    return jax.pmap(lambda t: t, axis_name=axis_name, devices=devices)(stacked)


def _brax() -> tuple[Any, Any]:
    """Brax's `envs` and PPO `train` modules, imported quietly, with the stand-in for
    `jax.device_put_replicated` in place where JAX has none."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from brax import envs
        from brax.training.agents.ppo import train as ppo
    if not hasattr(jax, "device_put_replicated"):
        jax.device_put_replicated = functools.partial(_device_put_replicated,
                                                      axis_name=ppo._PMAP_AXIS_NAME)
    return envs, ppo


def _train_settings(config: ControlConfig) -> dict[str, Any]:
    """`ppo.train` keyword arguments for `config`'s settings (see the module docstring)."""
    from brax.training.agents.ppo import networks as ppo_networks
    from flax import linen

    if config.num_envs % config.minibatches:
        raise ValueError("Brax PPO needs num_envs divisible by minibatches")
    hp = ControlHParams()
    network_factory = functools.partial(
        ppo_networks.make_ppo_networks, policy_hidden_layer_sizes=config.actor_hidden,
        value_hidden_layer_sizes=config.critic_hidden, activation=linen.tanh)
    return dict(
        num_envs=config.num_envs, episode_length=config.episode_length,
        unroll_length=config.rollout_length, num_minibatches=config.minibatches,
        batch_size=config.num_envs // config.minibatches, num_updates_per_batch=config.epochs,
        learning_rate=hp.learning_rate, entropy_cost=hp.entropy_coef, discounting=hp.gamma,
        gae_lambda=hp.gae_lambda, clipping_epsilon=hp.clip_eps, max_grad_norm=hp.max_grad_norm,
        vf_loss_coefficient=hp.value_coef, normalize_observations=config.normalize_observations,
        normalize_advantage=True, network_factory=network_factory)


def run(config: ControlConfig, *, updates: int, timed_epochs: int) -> dict[str, Any]:
    """Trains Brax PPO on `config`'s task and settings; returns its steady-state throughput."""
    envs, ppo = _brax()
    environment = envs.get_environment(config.env, backend=config.backend or "mjx")
    epochs = timed_epochs + 1
    records: list[dict[str, float]] = []

    def progress(step: int, metrics: dict) -> None:
        if "training/sps" in metrics:
            records.append({"step": int(step), "sps": float(metrics["training/sps"]),
                            "walltime_s": float(metrics["training/walltime"])})

    start = time.perf_counter()
    ppo.train(environment=environment, num_timesteps=epochs * updates * config.steps_per_update,
              num_evals=epochs + 1, run_evals=False, seed=0, progress_fn=progress,
              **_train_settings(config))
    total = time.perf_counter() - start
    if len(records) < 2:
        raise RuntimeError(f"Brax reported {len(records)} training epochs; at least 2 are needed")
    first_s = records[0]["walltime_s"]
    epoch_times = [b["walltime_s"] - a["walltime_s"] for a, b in zip(records, records[1:])]
    steps_per_epoch = updates * config.steps_per_update
    return {
        "steps_per_s": max(r["sps"] for r in records[1:]),
        "steps_per_s_median": float(np.median([r["sps"] for r in records[1:]])),
        "steps_per_epoch": steps_per_epoch,
        "epoch_s": [round(first_s, 3)] + [round(t, 3) for t in epoch_times],
        # The first epoch minus a steady one: compilation (and first-call set-up).
        "compile_s": round(first_s - min(epoch_times), 3),
        "total_s": round(total, 3),
        "stand_ins": ["jax.device_put_replicated"],
        "settings": {"num_envs": config.num_envs, "unroll_length": config.rollout_length,
                     "num_minibatches": config.minibatches,
                     "batch_size": config.num_envs // config.minibatches,
                     "num_updates_per_batch": config.epochs,
                     "policy_hidden_layer_sizes": list(config.actor_hidden),
                     "value_hidden_layer_sizes": list(config.critic_hidden),
                     "activation": "tanh", "distribution": "tanh_normal"},
    }


def learning_curve(config: ControlConfig, seed: int, reward_scaling: float = 1.0) -> np.ndarray:
    """Brax PPO's training-episode return after each training step (one rollout of every
    environment, like one vaco_jax update), NaN until an episode has ended.

    Brax reports the mean of the last 100 episodes that ended (its `EpisodeMetricsLogger`), a
    smoother curve than the mean over one update's ended episodes that PureJaxRL and
    `benchmarks/parity.py` record. `reward_scaling` is Brax's constant reward multiplier (it has
    no running return normalisation).
    """
    envs, ppo = _brax()
    environment = envs.get_environment(config.env, backend=config.backend or "mjx")
    returns = np.full(config.num_updates, np.nan)

    def progress(step: int, metrics: dict) -> None:
        if "episode/sum_reward" in metrics and step > 0:
            returns[step // config.steps_per_update - 1] = float(metrics["episode/sum_reward"])

    ppo.train(environment=environment, num_timesteps=config.num_updates * config.steps_per_update,
              num_evals=2, run_evals=False, log_training_metrics=True,
              training_metrics_steps=config.steps_per_update, seed=seed, progress_fn=progress,
              reward_scaling=reward_scaling, **_train_settings(config))
    return returns


def main() -> None:
    """Learning curves at PureJaxRL's settings, in `benchmarks/parity.py`'s result format:

        PYTHONPATH=$PWD python -m benchmarks.brax_ppo --env inverted_double_pendulum --seeds 2 \\
            --out benchmarks/results/parity/brax_idp.json
    """
    import argparse
    import json

    from benchmarks.parity import PUREJAXRL_SETTINGS
    from vaco_jax.infra import io as vaco_io

    p = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    p.add_argument("--env", default="inverted_double_pendulum")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--out", required=True)
    p.add_argument("--reward-scaling", type=float, default=1.0,
                   help="Brax's constant reward multiplier (1: rewards as the task gives them)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    args = p.parse_args()
    if os.path.exists(args.out) and not args.overwrite:
        p.error(f"--out {args.out} exists; pass --overwrite to replace it")
    config = ControlConfig(env=args.env, **PUREJAXRL_SETTINGS)
    start = time.time()
    curves = [learning_curve(config, seed, args.reward_scaling) for seed in range(args.seeds)]
    label = "Brax PPO" + (f" (reward_scaling={args.reward_scaling:g})"
                          if args.reward_scaling != 1 else "")
    result = {
        "impl": "brax", "label": label, "env": args.env, "config": config.to_dict(),
        "reward_scaling": args.reward_scaling,
        "settings": {k: v for k, v in _train_settings(config).items() if k != "network_factory"},
        "runs": [{"seed": s} for s in range(args.seeds)], "total_s": time.time() - start,
        "env_steps": [(u + 1) * config.steps_per_update for u in range(config.num_updates)],
        "episode_return": [[None if np.isnan(v) else v for v in c] for c in curves],
        "final_return": [float(c[np.isfinite(c)][-1]) for c in curves],
        "device": jax.devices()[0].device_kind, "jax": jax.__version__,
    }
    vaco_io.write_json(args.out, result)
    print(json.dumps({"env": args.env, "final_return": result["final_return"]}))


if __name__ == "__main__":
    main()
