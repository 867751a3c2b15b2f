"""Run folders as earlier versions of vaco_jax wrote them, read as today's."""

from __future__ import annotations

import json
from typing import Any

from vaco_jax.core.config import Config
from vaco_jax.infra import io


def config_as_now(config_type: type[Config], recorded: Any) -> Any:
    """The config a `config.json` records, as `from_dict` reads it today (in JSON values), so
    that a record written before a config field existed (a token run's five-field warm start,
    read as `LEGACY`) describes the run it was; anything but a dict is left as it is."""
    if not isinstance(recorded, dict):
        return recorded
    return json.loads(json.dumps(config_type.from_dict(recorded).to_dict(), default=io.jsonable))
