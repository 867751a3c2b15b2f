"""Token runs' records as earlier versions of vaco_jax wrote them, read as today's."""

PRE_CALIBRATION_FIELDS = frozenset({"steps", "batch", "learning_rate", "corrupt_fraction",
                                    "seed"})
"""The warm-start fields every `config.json` held before `corruption` existed: a record of
exactly these is that warm start, `warm_start.LEGACY`'s with those values."""
