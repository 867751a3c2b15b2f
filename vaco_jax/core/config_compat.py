"""Configs as earlier versions of vaco_jax recorded them (a run folder's `config.json`), read
as today's: by the run layer that resumes runs and by the report layer that draws them."""

from __future__ import annotations

import json
from typing import Any, Mapping

from vaco_jax.core.config import Config
from vaco_jax.infra import io

VALUES_BEFORE_DEFAULTS_CHANGED = {"lag_warmup": "clip"}
"""Config fields whose default changed, and the value a run had before: a `config.json` that
does not record such a field ran under that value (lags beyond the pushed versions were
clipped before `lag_warmup` existed, and it defaulted to `clip` until `redraw` became the
default)."""


def recorded_config(config_type: type[Config], recorded: Mapping[str, Any]) -> Config:
    """The config of the run a `config.json` describes, a field it lacks at the value the run
    had (`VALUES_BEFORE_DEFAULTS_CHANGED`), not today's default."""
    return config_type.from_dict({**VALUES_BEFORE_DEFAULTS_CHANGED, **recorded})


def config_as_now(config_type: type[Config], recorded: Any) -> Any:
    """The config a `config.json` records, as `recorded_config` reads it today (in JSON
    values), so that a record written before a config field existed (a token run's five-field
    warm start, read as `LEGACY`; no `lag_warmup`, read as `clip`) describes the run it was;
    anything but a dict is left as it is."""
    if not isinstance(recorded, dict):
        return recorded
    return json.loads(json.dumps(recorded_config(config_type, recorded).to_dict(),
                                 default=io.jsonable))
