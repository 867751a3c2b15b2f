"""PureJaxRL's side of the discrete parity check, run from a clone of its repository (see
README.md).

Imports `make_train` from PureJaxRL's discrete PPO script (`purejaxrl/ppo.py`) unmodified,
vmaps it over seeds, and writes the per-update training-episode returns (the mean over the
episodes that ended in an update, as its `LogWrapper` reports them) and the throughput, in the
format `benchmarks.parity_figure` reads. Before the script is imported:

- `distrax` is replaced by a few lines with the same sample, log-prob and entropy for the
  categorical distribution the script uses: tensorflow-probability's JAX substrate, which
  distrax imports, does not import under jax 0.10;
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
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

# `ppo.py`'s own `__main__` settings, which `--config` updates.
PPO_CONFIG = {"LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 5e5,
            "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95,
            "CLIP_EPS": 0.2, "ENT_COEF": 0.01, "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5,
            "ACTIVATION": "tanh", "ENV_NAME": "CartPole-v1", "ANNEAL_LR": True}


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


def load_make_train(checkout: Path, flax_orthogonal: bool):
    stub = types.ModuleType("distrax")
    stub.Categorical = _Categorical
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
    return importlib.import_module("ppo").make_train


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
    p.add_argument("--config", default="{}", help="JSON updates of ppo.py's settings")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--flax-orthogonal", action="store_true",
                   help="keep flax's orthogonal initialiser (LAPACK QR)")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    config = {**PPO_CONFIG, **json.loads(args.config)}
    make_train = load_make_train(args.checkout, args.flax_orthogonal)
    keys = jnp.stack([jax.random.PRNGKey(s) for s in range(args.seeds)])
    start = time.time()
    train = jax.jit(jax.vmap(make_train(dict(config)))).lower(keys).compile()
    compile_s = time.time() - start
    start = time.time()
    out = jax.block_until_ready(train(keys))
    run_s = time.time() - start
    returns = per_update_returns(out["metrics"])
    updates = returns.shape[1]
    steps_per_update = int(config["NUM_ENVS"] * config["NUM_STEPS"])
    steps = updates * steps_per_update * args.seeds
    result = {
        "impl": "purejaxrl", "env": config["ENV_NAME"], "config": config, "seeds": args.seeds,
        "compile_s": compile_s, "run_s": run_s, "steps_per_s": steps / run_s,
        "env_steps": [(u + 1) * steps_per_update for u in range(updates)],
        "episode_return": [[None if np.isnan(x) else float(x) for x in r] for r in returns],
    }
    Path(args.out).write_text(json.dumps(result))
    for seed, r in enumerate(returns):
        print(f"{config['ENV_NAME']} seed {seed}: final training return {r[~np.isnan(r)][-1]:9.1f}")
    print(f"compile {compile_s:.0f} s, run {run_s:.0f} s, {steps / run_s:,.0f} steps/s "
          f"({args.seeds} seeds)")


if __name__ == "__main__":
    main()
