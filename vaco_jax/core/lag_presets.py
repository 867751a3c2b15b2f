"""Named lag presets: a production system's staleness setting as one of the lag models and a
level, so that a run can say "AReaL's default bound" instead of `bounded:4`.

A preset only names a model and a level; the run draws its lags with that model exactly as it
would under `MODEL:LEVEL`. It is chosen with `--lag NAME` (or `NAME:LEVEL` for another level
of the same setting), `[lag] preset = "NAME"` in an experiment, or in Python
(`LAG_PRESETS[name].choice()`); the config holds it as `lag_preset` beside its `lag_model`, and
a run's `config.json` records its name.

Each preset's docstring cites where its setting, its value and its semantics were read in the
system's own code.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from vaco_jax.core.lag_models import Bounded, Fixed, InFlight, LagModel


@dataclasses.dataclass(frozen=True)
class LagPreset:
    """One system's staleness setting as `model` at `level`, the lag hyper-parameter (versions
    behind the learner; `eta` for `bounded`)."""

    name: str  # how `--lag`, `[lag] preset` and `config.json` name it
    system: str
    setting: str  # the system's own name of the setting
    model: LagModel
    # The level the system's default (or documented) configuration sets; None where the system
    # sets no bound by default, so that a run must give one.
    level: int | None

    def choice(self, level: float | None = None) -> LagChoice:
        """The model at `level`, by default the preset's own; `ValueError` if neither exists."""
        if level is None and self.level is None:
            raise ValueError(f"lag preset {self.name!r} has no default level ({self.system}'s "
                             f"{self.setting} sets no bound by default); give one: "
                             f"{self.name}:LEVEL, or levels beside preset in an experiment")
        return LagChoice(self.model, float(self.level if level is None else level), self)

    def check_model(self, model: LagModel) -> None:
        """Refuses a config whose lag model is not this preset's."""
        if model != self.model:
            raise ValueError(f"lag_preset={self.name!r} ({self.system}'s {self.setting}) needs "
                             f"lag_model={self.model.name!r}, got lag_model={model.name!r}")

    def record(self) -> dict[str, Any]:
        """The preset in a config record: its name."""
        return {"lag_preset": self.name}

    def describe(self) -> str:
        return f"{self.name} ({self.system}'s {self.setting})"


@dataclasses.dataclass(frozen=True)
class LagChoice:
    """A run's lag: its model, its level (the lag hyper-parameter) and the preset that named
    them, if any."""

    model: LagModel
    level: float
    preset: LagPreset | None = None

    def config_fields(self) -> dict[str, Any]:
        """The config fields this choice sets (the level is a hyper-parameter, `lag`)."""
        return {"lag_model": self.model, "lag_preset": self.preset}


AREAL = LagPreset(name="areal", system="AReaL", setting="rollout.max_head_offpolicyness",
                  model=Bounded(), level=4)
"""AReaL's staleness bound eta = 4: `bounded:4`, the model written after AReaL's rule.

`inclusionAI/AReaL` @`4aef98d`: `areal/api/cli_args.py` (`max_head_offpolicyness`, default 0,
synchronous); `areal/infra/staleness_manager.py` (`get_capacity` admits a rollout while
accepted + running <= (eta + version + 1) x the consumer batch, so a generator that would fall
further behind waits); `docs/en/algorithms/async.md` and `examples/math/boba_grpo.yaml` set 4."""

PRIME_RL = LagPreset(name="prime_rl", system="prime-rl", setting="max_async_level",
                     model=Fixed(), level=2)
"""prime-rl's async level 2: step `n`'s batch is generated with checkpoint `n - 2` exactly and
trained from checkpoint `n`, so every batch is 2 versions stale (the first two steps use the
initial weights): `fixed:2`.

`PrimeIntellect-ai/prime-rl` @`449b3eba` (2025-11-03): `src/prime_rl/orchestrator/config.py`
(`async_level`, default 2; the trainer's `max_async_level`, default 2, in
`src/zeroband/training/config.py` @`b27450d3`); `src/prime_rl/orchestrator/orchestrator.py`
(step `n` waits for checkpoint `n - async_level` and loads exactly it, never a newer one);
`src/prime_rl/trainer/rl/train.py` (step `n` trains from checkpoint `n`'s weights). The
default fell to 1 on 2025-11-03 (`83636183`; `strict_async_level` kept the lag exact) and the
setting was removed on 2026-05-25 (`e792f9cf`) for `max_off_policy_steps`, a drop rule."""

OPEN_INSTRUCT = LagPreset(name="open_instruct", system="open-instruct", setting="async_steps",
                          model=Bounded(), level=8)
"""open-instruct's `async_steps` 8: generation runs at most 8 training steps ahead and waits
there, and a result generated more than 8 steps back is dropped, the rule `bounded` models:
`bounded:8`. Its default `inflight_updates=True` also changes weights mid-generation, which
this preset leaves out (`in_flight:8` models that, without the wait at the bound).

`allenai/open-instruct` @`e6c3044a`: `open_instruct/data_loader.py`
(`StreamingDataLoaderConfig.async_steps`, default 8 since `7917d417`, 2026-03-20, OLMo 3's
value, 1 before; `DataPreparationActor._data_preparation_loop` keeps `async_steps` batches of
prompts in flight and waits while more than `async_steps` steps ahead; `result_is_stale`)."""

PIPELINERL = LagPreset(name="pipelinerl", system="PipelineRL", setting="max_lag",
                       model=InFlight(), level=None)
"""PipelineRL's in-flight weight updates: new weights reach the inference engines after every
optimizer step while sequences are being generated, `in_flight`. Its `max_lag` is null by
default (no bound) and counts samples, so the preset has no level of its own: `pipelinerl:K`
with `K` about `max_lag` / 1024, the samples of one optimizer step at its defaults.

`ServiceNow/PipelineRL` @`58d3934`: `conf/base.yaml` (`max_lag: null`);
`conf/finetune/base.yaml` (`weight_update_interval` 1, `train_batch_size` 1,
`gradient_accumulation_passes` 1024); `pipelinerl/actor.py` (a group is submitted only within
`max_lag` samples of the next weight update); `pipelinerl/finetune_loop.py` (a version is the
number of samples trained)."""

LAG_PRESETS: dict[str, LagPreset] = {
    preset.name: preset for preset in (AREAL, PRIME_RL, OPEN_INSTRUCT, PIPELINERL)}
"""Each preset by the name `--lag`, `[lag] preset` and config records use; no preset shares a
lag model's name, so `--lag NAME` is never ambiguous."""


def named(name: Any) -> LagPreset | None:
    """The preset a config record names (None: none)."""
    if name is None:
        return None
    if not isinstance(name, str) or name not in LAG_PRESETS:
        raise ValueError(f"lag_preset={name!r} is not supported; allowed values: "
                         f"{', '.join(LAG_PRESETS)}")
    return LAG_PRESETS[name]
