"""Environment registry: task names, their physics backends, and construction."""

from __future__ import annotations

from vaco_jax.control.envs.base import Environment, EnvState
from vaco_jax.control.envs.brax_env import BRAX_BACKENDS, BRAX_ENV_NAMES, BraxEnvironment
from vaco_jax.control.envs.toy import ToyReach

TOY_ENV_NAMES = ("toy_reach",)
ENV_NAMES = BRAX_ENV_NAMES + TOY_ENV_NAMES


def backends_for(env: str) -> tuple[str, ...]:
    """The physics backends a task can run on (the first is the default)."""
    if env in TOY_ENV_NAMES:
        return ("jax",)
    if env in BRAX_ENV_NAMES:
        return BRAX_BACKENDS
    raise ValueError(f"env={env!r} is not supported; allowed values: {', '.join(ENV_NAMES)}")


def make_env(env: str, backend: str | None = None) -> Environment:
    """Builds the adapter of task `env` on `backend` (default: the task's first backend)."""
    allowed = backends_for(env)
    backend = allowed[0] if backend is None else backend
    if backend not in allowed:
        raise ValueError(f"backend={backend!r} is not supported for env={env!r}; "
                         f"allowed values: {', '.join(allowed)}")
    if env == "toy_reach":
        return ToyReach()
    return BraxEnvironment(env, backend)


__all__ = ["ENV_NAMES", "BRAX_ENV_NAMES", "TOY_ENV_NAMES", "Environment", "EnvState",
           "backends_for", "make_env"]
