"""The killed-and-resumed long run (`benchmarks/hundred_million.py`) on a tiny pure-JAX task:
the first segment is killed once a checkpoint covers the asked share of the run, the resumed one
finishes it with the results of a run never killed, and memory is sampled in both."""

import json
import os
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `benchmarks/` is a folder of scripts beside the package

from benchmarks import hundred_million  # noqa: E402
from vaco_jax import cli  # noqa: E402

# 48 updates of 8 environments x 16 steps, a checkpoint after every evaluation period of 1
# update: the checkpoints' writing keeps the run alive long enough to be killed mid-way.
TRAIN = ["--env", "toy_reach", "--algo", "vaco", "--lag", "uniform:2", "--total-steps", "6144",
         "--num-envs", "8", "--rollout-length", "16", "--epochs", "1", "--minibatches", "2",
         "--buffer-capacity", "4", "--eval-every", "1", "--num-eval-envs", "2",
         "--actor-hidden", "8", "--critic-hidden", "8", "--seeds", "1", "--chunk-periods", "1",
         "--keep-checkpoints", "1", "--no-progress"]


def test_memory_of_this_process_is_read_and_of_no_process_is_none():
    mine = hundred_million.memory_mb(os.getpid())
    assert mine["VmHWM"] >= mine["VmRSS"] > 10
    assert hundred_million.memory_mb(2 ** 22 + 7) is None


@pytest.mark.slow
def test_a_run_killed_mid_way_and_resumed_ends_as_a_run_never_killed(tmp_path):
    out = tmp_path / "measured"
    assert hundred_million.main(["--out", str(out), "--kill-after", "0.25",
                                 "--sample-every", "0.02", "--", *TRAIN]) == 0
    summary = json.loads((out / "summary.json").read_text())
    first, resumed = summary["segments"]
    assert summary["complete"] and resumed["exit_code"] == 0
    assert first["exit_code"] == -9 and 12 <= first["killed_after_checkpoint"] < 48
    assert "--resume" in resumed["command"]
    assert resumed["steps_per_second"] > 0 and resumed["peak_rss_mb"] >= resumed["rss_mb_last"]
    memory = pd.read_csv(out / "memory.csv")
    assert set(memory["segment"]) == {"first", "resumed"}
    assert (memory["VmHWM"] >= memory["VmRSS"]).all()
    status = json.loads((out / "status.json").read_text())
    assert status["complete"] and status["updates_done"] == 48

    # Training is deterministic given the seed: killing and resuming changes nothing.
    never_killed = tmp_path / "never_killed"
    assert cli.main(["train", *TRAIN, "--out", str(never_killed)]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(out / "metrics.parquet"),
                                  pd.read_parquet(never_killed / "metrics.parquet"))


def test_a_used_run_folder_is_refused(tmp_path):
    (tmp_path / "run").mkdir()
    with pytest.raises(SystemExit):
        hundred_million.main(["--out", str(tmp_path), "--", *TRAIN])
