"""Numerical fingerprint of the package: the result tables of a fixed set of small runs.

A refactoring that must not change numbers is checked by writing the fingerprint before and
after it and comparing the two bit for bit:

    python benchmarks/fingerprint.py write /tmp/before            # on the old code
    python benchmarks/fingerprint.py write /tmp/after             # on the new code
    python benchmarks/fingerprint.py compare /tmp/before /tmp/after

The runs go through the command line only, so the fingerprint does not depend on the package's
module layout: every built-in control and token algorithm in a toy sweep, single
`train` and `tokens` runs (several lag models, both warm-up rules: `clip` unless a run names
`redraw`, so that fingerprints written before `redraw` became the default compare), and
with `--quick` the quick study and the token quick study of `experiments/`. Every `.parquet`
file written is compared with `check_exact`; columns renamed between versions are matched
through `RENAMED`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from vaco_jax.infra import records

ROOT = Path(__file__).resolve().parents[1]
RENAMED = {"final_return": "final_score", "filled_return": "filled_score"}
"""Old column name -> new one, for tables written before a column was renamed."""
ADDED = ("initial_policy_share", "sequence_log_ratio")
"""Metrics added since: their columns are left out of a table when the other table lacks them,
so that a fingerprint written before they existed still compares."""
REMEDY = "write that fingerprint again: python benchmarks/fingerprint.py write DIR"

CONTROL_SWEEP = """
name = "fingerprint_control"
tasks = ["toy_reach"]
algos = {algos}
seeds = 2
[lag]
model = "uniform"
levels = [0, 2]
[forward]
epochs = 2
minibatches = 2
[config]
lag_warmup = "clip"  # the default before redraw: fingerprints stay comparable
total_steps = 2_048
num_envs = 8
rollout_length = 16
buffer_capacity = 4
episode_length = 32
eval_every = 4
num_eval_envs = 4
actor_hidden = [8]
critic_hidden = [8]
"""

TOKEN_SWEEP = """
name = "fingerprint_tokens"
testbed = "tokens"
tasks = ["add"]
algos = {algos}
seeds = 2
[lag]
model = "fixed"
levels = [0, 2]
[forward]
epochs = 1
minibatches = 2
[config]
lag_warmup = "clip"  # the default before redraw: fingerprints stay comparable
task_size = 1
prompts = 4
group_size = 4
buffer_capacity = 3
num_updates = 4
eval_every = 2
layers = 1
width = 16
heads = 2
partial_credit = true  # rewards differ within groups even at low accuracy
warm_start_dir = "{warm}"
[config.warm_start]
steps = 30
[reference_returns]
add = 1.0
"""

# Every built-in algorithm, named (not read from the registry) so that an older checkout runs
# the same list.
CONTROL_ALGOS = ["ppo", "ppo_recompute", "ppo_kl", "spo", "decoupled_ppo", "impala",
                 "impala_multistep", "vaco", "vaco_filter_only", "vaco_filter_only_behaviour",
                 "vaco_realign_only", "decoupled_ppo_ess", "sapo", "icepop", "kl_cov"]
TOKEN_ALGOS = ["grpo", "dr_grpo", "reinforce", "rloo", "tis", "mis", "decoupled_ppo",
               "freshness", "freshness_mask", "m2po", "m2po_drop", "topr", "gspo",
               "gspo_behaviour", "cispo", "cispo_behaviour", "bapo", "vaco", "grpo_tv_filter",
               "dppo_binary_tv", "dppo_binary_kl", "tba", "vcpo", "vcpo_ess_only",
               "vcpo_opob_only", "sapo", "gmpo", "icepop", "opsm", "kl_cov"]
TRAIN_RUNS = {
    "train_in_flight_redraw": ["--algo", "vaco", "--lag", "in_flight:3", "--lag-warmup",
                               "redraw", "--tv-scope", "batch"],
    "train_geometric": ["--algo", "ppo_kl", "--lag", "geometric:0.5", "--grad-clip",
                        "per_network"],
    "train_empirical": ["--algo", "impala", "--lag", "empirical:0.5,0.25,0.25",
                        "--reward-scaling", "none"],
}
TOKEN_RUNS = {
    "tokens_vaco_behaviour": ["--algo", "vaco", "--tv-reference", "behaviour", "--lag",
                              "uniform:2", "--epochs", "2"],
    "tokens_tis_sequence": ["--algo", "tis", "--is-level", "sequence", "--lag", "bounded:1",
                            "--group-unit", "sample"],
    # The default before `shared`: fingerprints stay comparable.
    "tokens_in_flight": ["--algo", "grpo", "--lag", "in_flight:2", "--in-flight-cache",
                         "per_snapshot"],
}


def _cli(*args: str) -> None:
    """Runs one command, unless its `--out` folder holds its result (so `write` resumes)."""
    folder = Path(args[args.index("--out") + 1])
    if (folder / "runs.parquet").exists() or (folder / "metrics.parquet").exists():
        return
    subprocess.run([sys.executable, "-m", "vaco_jax.cli", *args, "--no-progress"], check=True,
                   cwd=ROOT)


def write(out: Path, quick: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    warm = out / "warm_start"
    with tempfile.TemporaryDirectory() as tmp:
        control, tokens = Path(tmp) / "control.toml", Path(tmp) / "tokens.toml"
        control.write_text(CONTROL_SWEEP.format(algos=CONTROL_ALGOS))
        tokens.write_text(TOKEN_SWEEP.format(algos=TOKEN_ALGOS, warm=warm))
        _cli("sweep", str(control), "--out", str(out / "sweep_control"))
        _cli("sweep", str(tokens), "--out", str(out / "sweep_tokens"))
    for name, args in TRAIN_RUNS.items():
        _cli("train", "--env", "toy_reach", "--lag-warmup", "clip", *args, "--seeds", "2",
             "--total-steps", "2048", "--num-envs", "8", "--rollout-length", "16",
             "--buffer-capacity", "4", "--episode-length", "32", "--eval-every", "4",
             "--num-eval-envs", "4", "--actor-hidden", "8", "--critic-hidden", "8",
             "--out", str(out / name))
    for name, args in TOKEN_RUNS.items():
        _cli("tokens", "--task", "add", "--lag-warmup", "clip", *args, "--task-size", "1",
             "--prompts", "4", "--group-size", "4", "--buffer-capacity", "3", "--updates", "4",
             "--eval-every", "2", "--layers", "1", "--width", "16", "--heads", "2",
             "--warm-start-steps", "30", "--warm-start-dir", str(warm), "--seeds", "2",
             "--hparam", "learning_rate=3e-3",
             "--out", str(out / name))
    if quick:
        _cli("sweep", "experiments/quick.toml", "--out", str(out / "quick"))
        _cli("sweep", "experiments/tokens_quick.toml", "--out", str(out / "tokens_quick"))


def _tables(folder: Path) -> dict[str, Path]:
    return {str(p.relative_to(folder)): p for p in sorted(folder.rglob("*.parquet"))
            if "warm_start" not in p.parts}


def _without_added_columns(table: pd.DataFrame, other: pd.DataFrame) -> pd.DataFrame:
    """`table` without the columns of `ADDED` metrics that `other` lacks."""
    return table.drop(columns=[c for c in table.columns
                               if c.startswith(ADDED) and c not in other.columns])


def compare(before: Path, after: Path) -> int:
    old, new = _tables(before), _tables(after)
    problems = [f"only in {before}: {name}" for name in sorted(set(old) - set(new))]
    problems += [f"only in {after}: {name}" for name in sorted(set(new) - set(old))]
    for name in sorted(set(old) & set(new)):
        a = records.read_parquet(old[name], REMEDY).rename(columns=RENAMED)
        b = records.read_parquet(new[name], REMEDY).rename(columns=RENAMED)
        a, b = _without_added_columns(a, b), _without_added_columns(b, a)
        try:
            pd.testing.assert_frame_equal(a, b, check_exact=True)
        except AssertionError as error:
            problems.append(f"{name}: {str(error).splitlines()[0]}")
    for line in problems:
        print(line)
    print(f"{len(set(old) & set(new))} tables compared, {len(problems)} differ or are missing")
    return 1 if problems else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="run the fixed set of runs into a folder (finished runs are kept)")
    w.add_argument("out", type=Path)
    w.add_argument("--quick", action="store_true",
                   help="also the quick study and the token quick study (minutes of MJX)")
    c = sub.add_parser("compare", help="compare two fingerprints bit for bit")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "write":
        write(args.out, args.quick)
    else:
        sys.exit(compare(args.before, args.after))


if __name__ == "__main__":
    main()
