"""Adapter over MuJoCo Playground's DM Control suite (MJX physics), an optional extra.

Registered: every task of Playground's `dm_control_suite.ALL_ENVS` but those in `UNSUPPORTED`;
all load offline (their models ship with the package). Each runs one control step per `step`
(`ctrl_dt`, several physics substeps). Their default configs all set `episode_length = 1000`
control steps and `action_repeat = 1`: `action_repeat` belongs to Playground's training wrappers,
not to the environment's `step`, so the adapter never repeats an action. Rewards lie in [0, 1]
per control step. `done` is raised only when the physics turns NaN, a termination. Observations
are flat vectors for every registered task (vision variants, whose observations are dicts, are
off by default and refused).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import io
import sys
import types

import jax
import numpy as np

from vaco_jax.control.envs.brax_env import BraxStateAdapter

EXTRA_NAME = "playground"
"""The optional extra of vaco-jax that installs MuJoCo Playground."""
EXTRA = f"pip install 'vaco-jax[{EXTRA_NAME}]'"
EPISODE_LENGTH = 1000
"""Every registered task's default `episode_length` (control steps)."""
PLAYGROUND_ACTION_SIZES = {
    "AcrobotSwingup": 1, "AcrobotSwingupSparse": 1, "BallInCup": 2, "CartpoleBalance": 1,
    "CartpoleBalanceSparse": 1, "CartpoleSwingup": 1, "CartpoleSwingupSparse": 1,
    "CheetahRun": 6, "FingerSpin": 2, "FingerTurnEasy": 2, "FingerTurnHard": 2, "HopperHop": 4,
    "HopperStand": 4, "HumanoidStand": 21, "HumanoidWalk": 21, "HumanoidRun": 21,
    "PendulumSwingup": 1, "PointMass": 2, "ReacherEasy": 2, "ReacherHard": 2, "WalkerRun": 6,
    "WalkerStand": 6, "WalkerWalk": 6,
}
"""The registered tasks (Playground's names) and their action dimensions."""
UNSUPPORTED = {
    name: "its fluid model calls jnp.clip(a_min=...), which JAX 0.10 removed, in MJX 3.3 "
          "(mujoco-mjx's passive forces), so it fails at its first reset"
    for name in ("FishSwim", "SwimmerSwimmer6")
}
"""The suite's other tasks, and why they are not registered."""

_PACKAGE = "mujoco_playground"
_SUITE = "mujoco_playground._src.dm_control_suite"


@functools.cache
def _suite() -> types.ModuleType:
    """Playground's DM Control suite module, imported without the package's `__init__`.

    Playground 0.0.5's `__init__` imports its locomotion and manipulation tasks, which
    `git clone` MuJoCo Menagerie at import time: slow online, fatal offline, and needless for
    the suite, whose models ship with the package. Unless the package is already imported, a
    stand-in parent (the package's path, no `__init__`) lets Python import the suite alone;
    then every module of the package is dropped from `sys.modules` again, so that a later
    `import mujoco_playground` elsewhere runs the real `__init__` and gets complete modules.
    The suite's modules import nothing from the package after their own import.
    """
    if sys.modules.get(_PACKAGE) is not None:
        return importlib.import_module(_SUITE)
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None:
        raise ModuleNotFoundError(f"MuJoCo Playground tasks need the optional extra: {EXTRA}",
                                  name=_PACKAGE)
    before = set(sys.modules)
    stand_in = types.ModuleType(_PACKAGE)
    stand_in.__path__ = list(spec.submodule_search_locations)
    sys.modules[_PACKAGE] = stand_in
    try:
        # MJX prints a notice to stdout when the optional Warp backend is absent.
        with contextlib.redirect_stdout(io.StringIO()):
            return importlib.import_module(_SUITE)
    finally:
        for name in set(sys.modules) - before:
            if name == _PACKAGE or name.startswith(_PACKAGE + "."):
                del sys.modules[name]


class PlaygroundEnvironment(BraxStateAdapter):
    """A task of MuJoCo Playground's DM Control suite, with its default config."""

    def __init__(self, name: str):
        if name in UNSUPPORTED:
            raise ValueError(f"env={name!r} is not supported: {UNSUPPORTED[name]}")
        self.name = name
        try:
            suite = _suite()
        except ModuleNotFoundError as error:
            if error.name != _PACKAGE:
                raise
            # Refused like any input this machine cannot serve: in one line, before any work.
            raise ValueError(f"env={name!r}: {error}") from None
        self._env = suite.load(name)
        # The engine's actions lie in [-1, 1]; MJX clamps controls to the actuators' ranges,
        # so the two must agree for an action to mean what the policy chose.
        ranges = self._env.mj_model.actuator_ctrlrange
        if not np.all(self._env.mj_model.actuator_ctrllimited) or not np.all(ranges == [-1, 1]):
            raise ValueError(f"env={name!r}: its actuators' control ranges are not all "
                             f"[-1, 1], got {ranges.tolist()}")
        reset_shapes = jax.eval_shape(self._env.reset, jax.random.PRNGKey(0))
        obs = reset_shapes.obs
        if not isinstance(obs, jax.ShapeDtypeStruct) or obs.ndim != 1:
            raise ValueError(f"env={name!r}: observations must be one vector, got "
                             f"{jax.tree.map(lambda x: x.shape, obs)}")
        self.observation_size = int(obs.shape[0])
        self.action_size = int(self._env.action_size)
        self.prepare(reset_shapes)
