"""Environment registry: task names, their physics backends, time limits and reference scores.

`register(name, factory, ...)` adds a task without editing the package; the built-in tasks are
registered below (Brax, gymnax's classic control and MinAtar, MuJoCo Playground's DM Control
suite, `toy_reach` and `toy_reach_discrete`), each factory importing its library only when the
task is built. Installed packages register theirs through entry points of group
`vaco_jax.envs` (`ENTRY_POINT_GROUP`, `vaco_jax.infra.entry_points`). A factory takes the backend name and returns an adapter
implementing `vaco_jax.control.envs.base.Environment`.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from vaco_jax.control.envs.base import Environment, EnvState
from vaco_jax.control.envs.brax_env import BRAX_ACTION_SIZES, BRAX_BACKENDS, BraxEnvironment
from vaco_jax.control.envs.gymnax_env import GYMNAX_TASKS, GymnaxEnvironment
from vaco_jax.control.envs.playground_env import (EPISODE_LENGTH, EXTRA_NAME,
                                                  PLAYGROUND_ACTION_SIZES, PlaygroundEnvironment)
from vaco_jax.control.envs.toy import ToyReach, ToyReachDiscrete
from vaco_jax.infra.entry_points import call_entry_points

ENTRY_POINT_GROUP = "vaco_jax.envs"
"""Each entry point of this group is a callable taking no arguments that calls `register`,
e.g. `[project.entry-points."vaco_jax.envs"] my_tasks = "my_package.tasks:register_all"`."""


@dataclasses.dataclass(frozen=True)
class Task:
    """A registered task."""

    name: str
    factory: Callable[[str], Environment]  # backend -> adapter
    backends: tuple[str, ...]  # the first is the default
    episode_length: int  # the task's own time limit, the default of `episode_length`
    # A score that gives a return its scale, and what it is ("maximum", a published result).
    reference_score: float | None = None
    reference: str = ""
    # What the adapter will report, for listings that do not build it (None: not given).
    discrete: bool | None = None
    action_size: int | None = None
    # The optional extra of vaco-jax that installs its library ("" for none), for listings.
    extra: str = ""


_TASKS: dict[str, Task] = {}


def register(name: str, factory: Callable[[str], Environment], *,
             backends: tuple[str, ...] = ("jax",), episode_length: int = 1000,
             reference_score: float | None = None, reference: str = "",
             discrete: bool | None = None, action_size: int | None = None, extra: str = "",
             replace: bool = False) -> Task:
    """Registers task `name`; `replace=True` overrides an existing registration."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"register: name must be a non-empty string, got {name!r}")
    if name in _TASKS and not replace:
        raise ValueError(f"register: env={name!r} is already registered; pass replace=True to "
                         f"override it")
    if not backends or not all(isinstance(b, str) for b in backends):
        raise ValueError(f"register: backends must be a non-empty tuple of names, got {backends!r}")
    if not isinstance(episode_length, int) or episode_length <= 0:
        raise ValueError(f"register: episode_length must be a positive integer, "
                         f"got {episode_length!r}")
    if action_size is not None and (not isinstance(action_size, int) or action_size <= 0):
        raise ValueError(f"register: action_size must be a positive integer or None, "
                         f"got {action_size!r}")
    task = Task(name, factory, tuple(backends), episode_length, reference_score, reference,
                discrete, action_size, extra)
    _TASKS[name] = task
    return task


def names() -> tuple[str, ...]:
    """Every registered task name, in registration order."""
    call_entry_points(ENTRY_POINT_GROUP, "tasks")
    return tuple(_TASKS)


def task(env: str) -> Task:
    call_entry_points(ENTRY_POINT_GROUP, "tasks")
    if env not in _TASKS:
        raise ValueError(f"env={env!r} is not supported; allowed values: {', '.join(_TASKS)}")
    return _TASKS[env]


def backends_for(env: str) -> tuple[str, ...]:
    """The physics backends a task can run on (the first is the default)."""
    return task(env).backends


def make_env(env: str, backend: str | None = None) -> Environment:
    """Builds the adapter of task `env` on `backend` (default: the task's first backend)."""
    spec = task(env)
    backend = spec.backends[0] if backend is None else backend
    if backend not in spec.backends:
        raise ValueError(f"backend={backend!r} is not supported for env={env!r}; "
                         f"allowed values: {', '.join(spec.backends)}")
    return spec.factory(backend)


_REFERENCES = {
    "inverted_pendulum": (1000.0, "maximum (reward 1 per step)"),
    # The reward is 10 - 0.01 x^2 - (y - 2)^2 - velocity penalties, the tip's height y <= 1.2.
    "inverted_double_pendulum": (9360.0, "maximum (reward at most 9.36 per step)"),
    "CartPole-v1": (500.0, "maximum (reward 1 per step)"),
    **{name: (float(EPISODE_LENGTH), "maximum (reward at most 1 per control step)")
       for name in PLAYGROUND_ACTION_SIZES},
}
"""Reference scores with what they are; a task without a well-defined one has none."""


def _reference(name: str) -> dict[str, float | str]:
    score, text = _REFERENCES.get(name, (None, ""))
    return {"reference_score": score, "reference": text}


for _name, _size in BRAX_ACTION_SIZES.items():
    register(_name, lambda backend, _name=_name: BraxEnvironment(_name, backend),
             backends=BRAX_BACKENDS, discrete=False, action_size=_size, **_reference(_name))
for _name, _gymnax in GYMNAX_TASKS.items():
    register(_name, lambda backend, _name=_name: GymnaxEnvironment(_name),
             episode_length=_gymnax.episode_length, discrete=_gymnax.discrete,
             action_size=_gymnax.action_size, **_reference(_name))
for _name, _size in PLAYGROUND_ACTION_SIZES.items():
    register(_name, lambda backend, _name=_name: PlaygroundEnvironment(_name), backends=("mjx",),
             episode_length=EPISODE_LENGTH, discrete=False, action_size=_size, extra=EXTRA_NAME,
             **_reference(_name))
register("toy_reach", lambda backend: ToyReach(), discrete=False, action_size=1,
         reference_score=1000.0, reference="maximum (reward at most 1 per step)")
register("toy_reach_discrete", lambda backend: ToyReachDiscrete(), discrete=True, action_size=3,
         reference_score=1000.0, reference="maximum (reward at most 1 per step)")

__all__ = ["ENTRY_POINT_GROUP", "Environment", "EnvState", "Task", "backends_for", "make_env",
           "names", "register", "task"]
