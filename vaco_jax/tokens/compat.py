"""Token runs' records as earlier versions of vaco_jax wrote them, read as today's."""

from __future__ import annotations

from typing import Collection

PRE_CALIBRATION_FIELDS = frozenset({"steps", "batch", "learning_rate", "corrupt_fraction",
                                    "seed"})
"""The warm-start fields every `config.json` held before `corruption` existed: a record of
exactly these is that warm start, `warm_start.LEGACY`'s with those values."""


def is_pre_calibration(fields: Collection[str]) -> bool:
    """Whether a warm-start record of these fields was written before `corruption` existed, so
    that it reads as `warm_start.LEGACY`'s settings, not over today's defaults."""
    return set(fields) == PRE_CALIBRATION_FIELDS


STABILISER_COLUMNS = ("clip_fraction", "is_weight_mean", "is_truncated_fraction",
                      "is_masked_fraction", "is_tapered_fraction", "stale_dropped_fraction",
                      "filter_fraction", "bapo_ratio_low", "bapo_ratio_high", "gate_weight_mean",
                      "kl_penalty_mean")
"""The stabiliser columns of a token metrics table in the order tables listed them before each
entry declared its metrics (`knobs.columns`)."""

