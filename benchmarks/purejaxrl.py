"""PureJaxRL's side of the parity checks, run from a clone of its repository (see README.md).

Imports `make_train` from one of PureJaxRL's PPO scripts unmodified (`--script discrete`:
`purejaxrl/ppo.py`; `--script continuous`: `purejaxrl/ppo_continuous_action.py`), vmaps it over
seeds, and writes the per-update training-episode returns (the mean over the episodes that ended
in an update, as its `LogWrapper` reports them) and the throughput, by wall time and by the
process's CPU time, in the format `benchmarks.parity_figure` reads. Before the script is
imported:

- `distrax` is replaced by a few lines with the same sample, log-prob and entropy for the
  categorical and diagonal Gaussian distributions the scripts use: tensorflow-probability's JAX
  substrate, which distrax imports, does not import under jax 0.10;
- the continuous script's `BraxGymnaxWrapper` builds its Brax task with the backend `--backend`
  names (default `mjx`, vaco_jax's default): the wrapper's own default is `positional`, which
  the script does not override;
- `navix`, which the script's `wrappers.py` imports for a wrapper the script does not use, is an
  empty module;
- flax's orthogonal initialiser is replaced by `vaco_jax.control.networks.orthogonal` (the same
  distribution, without LAPACK), because a vmapped LAPACK QR can hang a 2-core CPU (see that
  function); `--flax-orthogonal` keeps flax's;
- the script was written for gymnax 0.0.x, whose auto-resetting `step` returns
  `(obs, state, reward, done, info)` with `done` = termination or time limit; gymnax 1.0 returns
  `terminated` and `truncated` apart and adds them and the final observation to `info`, so
  `gymnax.make` hands out environments whose `step` returns the old five values (`done` =
  either) and the old `info` (the script returns every step's `info` as its metrics, and the
  final observations of a MinAtar run would fill tens of GB).

    PYTHONPATH=$PWD python -m benchmarks.purejaxrl --checkout PATH/TO/purejaxrl --seeds 8 \
        --config '{"ENV_NAME": "CartPole-v1"}' --out FILE.json
    PYTHONPATH=$PWD python -m benchmarks.purejaxrl --script continuous \
        --checkout PATH/TO/purejaxrl --seeds 2 --out FILE.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import subprocess
import sys
import time
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from vaco_jax.infra import records

# `ppo.py`'s own `__main__` settings, which `--config` updates.
PPO_CONFIG = {"LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 5e5,
            "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95,
            "CLIP_EPS": 0.2, "ENT_COEF": 0.01, "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5,
            "ACTIVATION": "tanh", "ENV_NAME": "CartPole-v1", "ANNEAL_LR": True}
# `ppo_continuous_action.py`'s settings at the continuous parity comparison (its `__main__`
# trains hopper with 2048 environments): those of `benchmarks.parity.PUREJAXRL_SETTINGS`.
CONTINUOUS_CONFIG = {"LR": 3e-4, "NUM_ENVS": 64, "NUM_STEPS": 32, "TOTAL_TIMESTEPS": 499_712,
                     "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95,
                     "CLIP_EPS": 0.2, "ENT_COEF": 0.0, "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5,
                     "ACTIVATION": "tanh", "ENV_NAME": "inverted_double_pendulum",
                     "ANNEAL_LR": False, "NORMALIZE_ENV": True, "DEBUG": False}
# --script -> (module in the clone's `purejaxrl/` folder, settings `--config` updates).
SCRIPTS = {"discrete": ("ppo", PPO_CONFIG),
           "continuous": ("ppo_continuous_action", CONTINUOUS_CONFIG)}


_GYMNAX_V1_INFO = ("terminated", "truncated", "final_observation")


class _GymnaxV0Step:
    """A gymnax 1.0 environment whose `step` returns gymnax 0.0.x's five values."""

    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        return getattr(self._env, name)

    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        info = {k: v for k, v in info.items() if k not in _GYMNAX_V1_INFO}
        return obs, state, reward, jnp.logical_or(terminated, truncated), info


class _Categorical:
    def __init__(self, logits):
        self.logits = jax.nn.log_softmax(logits)

    def sample(self, seed):
        return jax.random.categorical(seed, self.logits)

    def log_prob(self, value):
        return jnp.take_along_axis(self.logits, value[..., None].astype(jnp.int32), -1)[..., 0]

    def entropy(self):
        return -jnp.sum(jnp.exp(self.logits) * self.logits, axis=-1)


class _MultivariateNormalDiag:
    """distrax's `MultivariateNormalDiag`: independent Gaussians over the last axis."""

    def __init__(self, loc, scale_diag):
        self.loc = loc
        self.scale = jnp.broadcast_to(scale_diag, jnp.shape(loc))

    def sample(self, seed):
        return self.loc + self.scale * jax.random.normal(seed, jnp.shape(self.loc))

    def log_prob(self, value):
        z = (value - self.loc) / self.scale
        return jnp.sum(-0.5 * z ** 2 - jnp.log(self.scale) - 0.5 * math.log(2 * math.pi), axis=-1)

    def entropy(self):
        return jnp.sum(0.5 * math.log(2 * math.pi * math.e) + jnp.log(self.scale), axis=-1)


def load_make_train(checkout: Path, flax_orthogonal: bool, script: str = "discrete",
                    backend: str = "mjx"):
    stub = types.ModuleType("distrax")
    stub.Categorical = _Categorical
    stub.MultivariateNormalDiag = _MultivariateNormalDiag
    sys.modules["distrax"] = stub
    sys.modules.setdefault("navix", types.ModuleType("navix"))
    if not flax_orthogonal:
        from flax.linen import initializers

        from vaco_jax.control.networks import orthogonal
        initializers.orthogonal = orthogonal
    import gymnax
    make = gymnax.make

    def make_v0(*args, **kwargs):
        env, params = make(*args, **kwargs)
        return _GymnaxV0Step(env), params
    gymnax.make = make_v0
    sys.path.insert(0, str(checkout / "purejaxrl"))  # the script imports its `wrappers`
    # The continuous script calls `BraxGymnaxWrapper(env_name)`, so the backend is the
    # constructor's default; the script imports the class from this same module.
    wrappers = importlib.import_module("wrappers")
    wrappers.BraxGymnaxWrapper.__init__.__defaults__ = (backend,)
    return importlib.import_module(SCRIPTS[script][0]).make_train


def checkout_commit(checkout: Path) -> str | None:
    """The commit the clone has checked out, None where it is no git work tree."""
    found = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"],
                           capture_output=True, text=True)
    return found.stdout.strip() if found.returncode == 0 else None


def per_update_returns(metrics: dict) -> np.ndarray:
    """`[seeds, updates]` mean return of the episodes that ended in each update (NaN if none)."""
    ended = np.asarray(metrics["returned_episode"], bool)
    returns = np.asarray(metrics["returned_episode_returns"], np.float64)
    axes = tuple(range(2, ended.ndim))
    counts = ended.sum(axis=axes)
    with np.errstate(invalid="ignore"):
        return np.where(counts > 0, (returns * ended).sum(axis=axes) / counts, np.nan)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkout", type=Path, required=True, help="a clone of PureJaxRL")
    p.add_argument("--script", default="discrete", choices=sorted(SCRIPTS))
    p.add_argument("--config", default="{}", help="JSON updates of the script's settings")
    p.add_argument("--backend", default="mjx",
                   help="Brax physics of the continuous script (its wrapper's default: positional)")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--flax-orthogonal", action="store_true",
                   help="keep flax's orthogonal initialiser (LAPACK QR)")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    module, defaults = SCRIPTS[args.script]
    config = {**defaults, **records.parse_json(args.config, "--config",
                                               records.BENCHMARK_RESULT).table()}
    make_train = load_make_train(args.checkout, args.flax_orthogonal, args.script, args.backend)
    keys = jnp.stack([jax.random.PRNGKey(s) for s in range(args.seeds)])
    start = time.time()
    train_fn = make_train(dict(config))  # builds the environment
    build_s = time.time() - start
    start = time.time()
    train = jax.jit(jax.vmap(train_fn)).lower(keys).compile()
    compile_s = time.time() - start
    start, start_cpu = time.time(), time.process_time()
    out = jax.block_until_ready(train(keys))
    run_s, run_cpu_s = time.time() - start, time.process_time() - start_cpu
    returns = per_update_returns(out["metrics"])
    updates = returns.shape[1]
    steps_per_update = int(config["NUM_ENVS"] * config["NUM_STEPS"])
    steps = updates * steps_per_update * args.seeds
    result = {
        "impl": "purejaxrl", "script": f"purejaxrl/{module}.py",
        "commit": checkout_commit(args.checkout), "env": config["ENV_NAME"], "config": config,
        **({"backend": args.backend} if args.script == "continuous" else {}),
        "flax_orthogonal": args.flax_orthogonal, "seeds": args.seeds,
        "build_s": build_s, "compile_s": compile_s, "run_s": run_s, "steps_per_s": steps / run_s,
        "run_cpu_s": run_cpu_s, "cpu_steps_per_s": steps / run_cpu_s,
        "env_steps": [(u + 1) * steps_per_update for u in range(updates)],
        "episode_return": [[None if np.isnan(x) else float(x) for x in r] for r in returns],
    }
    Path(args.out).write_text(json.dumps(result))
    for seed, r in enumerate(returns):
        print(f"{config['ENV_NAME']} seed {seed}: final training return {r[~np.isnan(r)][-1]:9.1f}")
    print(f"compile {compile_s:.0f} s, run {run_s:.0f} s ({run_cpu_s:.0f} s CPU), "
          f"{steps / run_s:,.0f} steps/s, {steps / run_cpu_s:,.0f} steps per CPU second "
          f"({args.seeds} seeds)")


if __name__ == "__main__":
    main()
