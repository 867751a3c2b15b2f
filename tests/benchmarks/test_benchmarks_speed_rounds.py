"""The interleaved speed rounds against PureJaxRL (`benchmarks/speed_rounds.py`): the bootstrap
of the median ratio, the order and resumption of the rounds, and the summary, with a stand-in
for the two training processes."""

import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `benchmarks/` is a folder of scripts beside the package

from benchmarks import speed_rounds  # noqa: E402


def fake_result(side: str, rate: float = 100.0, cpu_rate: float = 50.0,
                steps: int = 4096) -> dict:
    """The fields of `benchmarks.parity`'s or `benchmarks.purejaxrl`'s output the summary reads."""
    returns = [[1.0, None, 9.0], [2.0, 8.0, None]]
    if side == "vaco_jax":
        return {"runs": [{"variant": "default", "seed": s} for s in (0, 1)],
                "env_steps": [steps / 2, float(steps)], "training_steps_per_s": rate,
                "training_cpu_steps_per_s": cpu_rate, "compile_s": 1.0, "episode_return": returns}
    return {"seeds": 2, "env_steps": [steps // 2, steps], "steps_per_s": rate,
            "cpu_steps_per_s": cpu_rate, "compile_s": 1.0, "episode_return": returns}


def test_median_interval_of_two_rounds_spans_them():
    # Resampled pairs have median 1 (both draws 1, probability 1/4), 2 (1/2) or 3 (1/4), so the
    # 2.5th and 97.5th percentiles of 10,000 resamples are 1 and 3.
    assert speed_rounds.median_interval([1.0, 3.0]) == (2.0, 1.0, 3.0)


def test_median_interval_leaves_out_a_rare_outlier():
    # A resample of the 7 rounds has median 0.9 only when 4 or more of its draws are the 0.9:
    # binomial(7, 1/7) >= 4 has probability 0.010, under the 2.5% tail.
    tail = sum(math.comb(7, k) * (1 / 7) ** k * (6 / 7) ** (7 - k) for k in range(4, 8))
    assert 0.009 < tail < 0.011
    assert speed_rounds.median_interval([1.2] * 6 + [0.9]) == (1.2, 1.2, 1.2)


def test_rounds_alternate_their_order_and_resume_where_they_stopped(tmp_path):
    for side in speed_rounds.SIDES:  # round 1 is complete
        speed_rounds.result_path(tmp_path, side, 1).write_text(json.dumps(fake_result(side)))
    # Round 2 was interrupted after its first side (PureJaxRL in even rounds).
    speed_rounds.result_path(tmp_path, "purejaxrl", 2).write_text("stale")
    calls = []

    def runner(side: str, out: Path) -> None:
        calls.append(side)
        out.write_text(json.dumps(fake_result(side)))

    ran = speed_rounds.run_rounds(tmp_path, 3, runner)
    assert ran == [(2, "purejaxrl"), (2, "vaco_jax"), (3, "vaco_jax"), (3, "purejaxrl")]
    assert calls == [side for _, side in ran]
    for r, side in ran:
        result = json.loads(speed_rounds.result_path(tmp_path, side, r).read_text())
        assert result["speed_round"]["round"] == r
        assert result["speed_round"]["position"] == speed_rounds.round_order(r).index(side) + 1
    assert not list(tmp_path.glob(".*.tmp"))
    assert speed_rounds.run_rounds(tmp_path, 3, runner) == []  # nothing left to run


def test_a_failed_side_leaves_its_round_to_run_again(tmp_path):
    def failing(side: str, out: Path) -> None:
        if side == "purejaxrl":
            raise RuntimeError("killed")
        out.write_text(json.dumps(fake_result(side)))

    with pytest.raises(RuntimeError):
        speed_rounds.run_rounds(tmp_path, 1, failing)
    assert speed_rounds.result_path(tmp_path, "vaco_jax", 1).exists()
    assert not speed_rounds.result_path(tmp_path, "purejaxrl", 1).exists()
    ran = speed_rounds.run_rounds(
        tmp_path, 1, lambda side, out: out.write_text(json.dumps(fake_result(side))))
    assert ran == [(1, "vaco_jax"), (1, "purejaxrl")]


def test_summary_takes_per_round_ratios_by_wall_and_cpu_time(tmp_path):
    rates = {1: (120.0, 100.0), 2: (90.0, 100.0), 3: (110.0, 100.0)}
    for r, (vaco, purejaxrl) in rates.items():
        for side, rate in (("vaco_jax", vaco), ("purejaxrl", purejaxrl)):
            speed_rounds.result_path(tmp_path, side, r).write_text(
                json.dumps(fake_result(side, rate=rate, cpu_rate=rate / 2)))
    summary = speed_rounds.summarise(tmp_path)
    assert [rec["ratio_wall"] for rec in summary["rounds"]] == pytest.approx([1.2, 0.9, 1.1])
    assert summary["ratio_wall"]["median"] == pytest.approx(1.1)
    assert summary["ratio_cpu"] == summary["ratio_wall"]
    assert summary["ratio_wall"]["low"] <= 1.1 <= summary["ratio_wall"]["high"]
    assert summary["rounds"][0]["final_returns"] == {"vaco_jax": [9.0, 8.0],
                                                     "purejaxrl": [9.0, 8.0]}
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    text = speed_rounds.markdown(summary)
    assert "| 2 | - | 90 | 100 | 0.900 |" in text and "**1.100x**" in text


def test_summary_refuses_rounds_of_unequal_training(tmp_path):
    speed_rounds.result_path(tmp_path, "vaco_jax", 1).write_text(
        json.dumps(fake_result("vaco_jax", steps=4096)))
    speed_rounds.result_path(tmp_path, "purejaxrl", 1).write_text(
        json.dumps(fake_result("purejaxrl", steps=8192)))
    with pytest.raises(ValueError, match="round 1"):
        speed_rounds.summarise(tmp_path)


def test_a_folder_is_resumed_only_with_the_commands_it_was_measured_with(tmp_path):
    checkout = tmp_path / "purejaxrl"
    full = speed_rounds.side_commands(checkout, seeds=2, total_steps=None)
    short = speed_rounds.side_commands(checkout, seeds=2, total_steps=4096)
    assert not any("--config" in command for command in full.values())
    assert '{"total_steps": 4096}' in short["vaco_jax"]
    assert '{"TOTAL_TIMESTEPS": 4096}' in short["purejaxrl"]
    semantics = speed_rounds.side_commands(checkout, seeds=2, total_steps=4096,
                                           config={"restart_from": "first"})
    assert '{"restart_from": "first", "total_steps": 4096}' in semantics["vaco_jax"]
    assert semantics["purejaxrl"] == short["purejaxrl"]  # PureJaxRL's settings are its own
    speed_rounds.keep_commands(tmp_path / "rounds", {"commands": full, "cpus": None})
    speed_rounds.keep_commands(tmp_path / "rounds", {"commands": full, "cpus": None})
    with pytest.raises(SystemExit, match="other settings"):
        speed_rounds.keep_commands(tmp_path / "rounds", {"commands": short, "cpus": None})
