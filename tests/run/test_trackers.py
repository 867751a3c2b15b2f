"""`--log tensorboard`: the event files hold every per-update metric of every seed, equal to
`metrics.parquet`, and an overwrite removes them like every file vaco_jax wrote."""

import struct
from pathlib import Path

import numpy as np
import pandas as pd
from tensorboardX.proto import event_pb2

from vaco_jax import cli

TRAIN = ["train", "--env", "toy_reach", "--algo", "ppo", "--seeds", "2", "--total-steps", "512",
         "--num-envs", "8", "--rollout-length", "16", "--epochs", "1", "--minibatches", "1",
         "--episode-length", "40", "--eval-every", "2", "--num-eval-envs", "4",
         "--actor-hidden", "8", "--critic-hidden", "8", "--chunk-periods", "1", "--no-progress"]


def scalars(folder: Path) -> dict[tuple[str, int], float]:
    """(tag, step) -> value of every scalar in the TFRecord event files of `folder`."""
    found = {}
    for path in sorted(folder.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset:offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12:offset + 12 + length])
            offset += 12 + length + 4  # length, its CRC, the record, its CRC
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    found[(value.tag, event.step)] = value.simple_value
    return found


def test_tensorboard_events_equal_the_metrics_table(tmp_path):
    out = tmp_path / "run"
    assert cli.main([*TRAIN, "--out", str(out), "--log", "tensorboard"]) == 0
    table = pd.read_parquet(out / "metrics.parquet")
    metrics = [c for c in table.columns if c not in ("run", "seed", "update")]
    for seed, rows in table.groupby("seed"):
        logged = scalars(out / "tensorboard" / f"seed={seed}")
        expected = {(name, int(update)): float(value) for name in metrics
                    for update, value in zip(rows["update"], rows[name]) if np.isfinite(value)}
        assert logged.keys() == expected.keys()
        np.testing.assert_allclose([logged[k] for k in expected], list(expected.values()),
                                   rtol=1e-6)
    # Recorded in the run's manifest: an overwrite removes the event files with the run.
    assert cli.main([*TRAIN, "--out", str(out), "--overwrite", "--seed-offset", "7"]) == 0
    assert not (out / "tensorboard").exists()
