"""The candidate cells of this note against its bar, from a calibration sweep's runs table.

    python experiments/results/tokens_calibration/candidates.py RUNS.parquet 3e-4:80,1e-3:80

For each `learning_rate:updates` cell: each seed's held-out accuracy at that update, its gain
over the update-0 evaluation (the warm start), and whether any run collapses by then
(`vaco_jax.report.collapse.collapse_index` on the evaluations up to it, or a divergence).
"""

import sys

import numpy as np
import pandas as pd

from vaco_jax.report import collapse

BAR_GAIN, BAR_SEEDS = 0.25, 9


def main(runs_path: str, cells: str) -> None:
    runs = pd.read_parquet(runs_path)
    for cell in cells.split(","):
        rate, updates = float(cell.split(":")[0]), int(cell.split(":")[1])
        rows = runs[np.isclose(runs["hp_learning_rate"], rate) & (runs["update"] <= updates)]
        finals, gains, collapsed = [], [], 0
        for _, run in rows.sort_values("update").groupby("seed"):
            scores = run["eval_accuracy"].dropna().to_numpy()
            finals.append(scores[-1])
            gains.append(scores[-1] - scores[0])
            collapsed += collapse.collapse_index(scores) is not None or bool(run["diverged"].any())
        gains = np.asarray(gains)
        passing = int((gains >= BAR_GAIN).sum())
        print(f"lr {rate:g}, {updates} updates: per seed {' '.join(f'{f:.3f}' for f in finals)}; "
              f"gain min/mean/max {gains.min():.3f}/{gains.mean():.3f}/{gains.max():.3f}; "
              f"gain >= {BAR_GAIN} in {passing}/{len(gains)}; collapsed {collapsed}; "
              f"passes: {passing >= BAR_SEEDS and collapsed == 0}")


if __name__ == "__main__":
    main(*sys.argv[1:])
