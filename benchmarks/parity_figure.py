"""Learning curves of the parity check: training-episode return against environment steps.

    PYTHONPATH=$PWD python -m benchmarks.parity_figure OUT.png RESULT.json [RESULT.json ...]

Each result file holds `env_steps` and per-run `episode_return` curves (as written by
`benchmarks/parity.py`, or by any other implementation in the same format), and optionally
`label` (else `impl`) and `runs` naming each curve's variant.
"""

from __future__ import annotations

import sys

import matplotlib
import numpy as np

from vaco_jax.infra import records

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def curves(result: dict) -> dict[str, np.ndarray]:
    """`label -> [runs, updates]`, grouping runs by variant."""
    returns = np.array([[np.nan if v is None else v for v in run]
                        for run in result["episode_return"]], np.float64)
    variants = [r.get("variant") for r in result.get("runs", [{}] * len(returns))]
    grouped: dict[str, list[np.ndarray]] = {}
    for variant, run in zip(variants, returns):
        label = result.get("label", result["impl"]) + ("" if variant in (None, "default") else f" ({variant})")
        grouped.setdefault(label, []).append(run)
    return {label: np.stack(runs) for label, runs in grouped.items()}


def main(out: str, paths: list[str]) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for path in paths:
        result = records.load_json(path, records.BENCHMARK_RESULT).value
        steps = np.asarray(result["env_steps"])
        for label, runs in curves(result).items():
            # Updates in which no episode ended are NaN; long episodes leave only a few points.
            ended = ~np.isnan(runs).all(axis=0)
            with np.errstate(all="ignore"):
                mean = np.nanmean(runs[:, ended], axis=0)
            line, = ax.plot(steps[ended], mean, marker="." if ended.sum() < 50 else None,
                            label=f"{label}, {len(runs)} seeds")
            for run in runs:
                finite = ~np.isnan(run)
                ax.plot(steps[finite], run[finite], color=line.get_color(), alpha=0.25,
                        linewidth=0.8)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("training-episode return")
    ax.set_title(result["env"])
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
