"""The GPU campaign: everything a short GPU lease should measure, as steps of under 10 minutes.

    python -m benchmarks.campaign --plan                    # steps, what each measures, budget
    python -m benchmarks.campaign --step setup --out DIR    # one step (on the GPU machine)
    python -m benchmarks.campaign --all --out DIR           # every step not yet in DIR
    python -m benchmarks.campaign --all --sizes tiny --out /tmp/dry   # the dry run, on a CPU
    python -m benchmarks.campaign --collect RETURNED   # results into benchmarks/results, committed

On the GPU machine `benchmarks/campaign/gpu_campaign.sh STEP ...` installs the carried wheels
first and runs the steps (README: "The GPU campaign"). Each step writes `DIR/STEP.json`
(beside the results files of the suites it runs) and is skipped when that file exists, so the
campaign resumes step by step. Every step reuses the benchmark suites: `benchmarks/run.py`
(preset `gpu`), `benchmarks/tokens.py` (preset `gpu`), the sweep machinery of `vaco-jax sweep`
and `benchmarks/roofline.py`'s prediction. `--sizes tiny` runs the same steps at the presets
`tiny` (the pure-JAX toy task, a one-layer token model, a toy sweep; Brax's trainer on
`inverted_pendulum`, the cheapest MJX task, since Brax has no toy task), writing the same files.
This module holds the list of steps, the plan, the runner and `--collect`; the steps are
`benchmarks/campaign/steps.py`'s and, for the study and the peers, `benchmarks/campaign/lease.py`'s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Iterator, Sequence

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

# After the setting above, which must precede JAX's import.
from benchmarks.campaign import groups as campaign_groups  # noqa: E402
from benchmarks.campaign import lease as campaign_lease  # noqa: E402
from benchmarks.campaign import study as lease_study  # noqa: E402
from benchmarks.campaign.lease import step_peers, step_study  # noqa: E402
from benchmarks.campaign.steps import (DONE, ROOT, SIZES, TOKENS_SEEDS_ENVIRONMENT,  # noqa: E402
                                       Context, Sizes, Step, StepUnavailable, physics,
                                       step_setup, step_sweep_groups, step_sweep_plan, suite,
                                       tokens)
from benchmarks.campaign.records import MANIFEST  # noqa: E402
from vaco_jax.infra import records  # noqa: E402

BUDGET_S = 55 * 60  # device time the campaign's steps may take together (about 4 leases)
MACHINE_START_S = 35  # a cold machine's start and the upload (33 s measured on the first lease)
CALL_LIMIT_S = 560  # gpu_campaign.sh stops a call's steps there, then packs what they wrote
# The steps grouped into one call: the limit less what their records' wall times leave out
# (each step's interpreter start and imports, the wheels' installation on a fresh machine).
CALL_S = CALL_LIMIT_S - 60


STEPS: tuple[Step, ...] = (
    # In each lease's order: the study's slice, then the open steps (R beside the roofline, the
    # token steps, the plan), then the peers; the steps done already after them.
    # expected_s: the wall time a lease measured where it ran the step, rounded up to 10 s:
    # the first lease's H100 (2026-11-26; wheel installation included in `setup`), the second's
    # H200 (2026-11-28) for `seeds` and `tokens`; the others are estimates.
    Step("setup", "install check, JAX version against pyproject.toml (warns), devices, imports",
         30, step_setup),
    Step("study", "the GPU lag study's next slice (experiments/gpu_lag_study.toml): continued "
         "from .lease/upload, trained for 420 s, packed into the call's returned files", 500,
         step_study),
    Step("study_groups", f"the groups {campaign_groups.STUDY} still misses (its MJX tasks, "
         f"seven methods), cell by cell for {campaign_groups.TRAIN_S} s, each cell a part "
         "folder returned without checkpoints", 500, campaign_groups.step_study_groups),
    Step("seeds", "1, 4, 16, 64 vmapped seeds of ant (1,024 environments each), total steps/s",
         170, suite("seeds")),
    Step("sweep_groups", "the paper sweep's first 2 groups (ant: ppo, ppo_recompute; 40 runs "
         "of 2,048 environments each), 30 updates: R measured", 330, step_sweep_groups),
    Step("tokens_seeds", "token testbed: 1 to 64 vmapped seeds, trained tokens/s (a count that "
         "does not fit in the device's memory recorded as such)", 240,
         tokens("seeds", TOKENS_SEEDS_ENVIRONMENT)),
    Step("tokens_capacity", "largest token model (width doubled) and batch (prompts doubled) "
         "whose update fits, time-boxed", 200, tokens("capacity")),
    Step("sweep_plan", "`vaco-jax sweep paper_lag_sweep.toml --plan --steps-per-second R` and "
         "the roofline's prediction beside R (needs no GPU: it can run on any machine once "
         "sweep_groups.json is committed)", 240, step_sweep_plan, needs=("sweep_groups",)),
    Step("peers", "PureJaxRL's continuous PPO and Brax's trainer beside vaco_jax's synchronous "
         "ppo on ant 4,096 at equal settings, in one call, as ratios", 240, step_peers),
    Step("physics_ant", "raw MJX rate (random actions) and synchronous ppo, timed alternately: "
         "ant at 4,096 and 16,384 environments", 180, physics(0)),
    Step("physics_humanoid", "raw MJX rate and synchronous ppo: humanoid at 4,096 environments",
         130, physics(1)),
    Step("async_k16", "per-environment stale policies (vaco, uniform lags over K = 16, "
         "gather) against vaco synchronous, ant 4,096", 100, suite("async")),
    Step("brax", "Brax's PPO trainer on ant 4,096 at the same settings, against synchronous ppo",
         130, suite("brax")),
    Step("tokens", "token testbed: forward, generated and trained tokens/s of synchronous and "
         "stale acting, MFU", 290, tokens("throughput")),
)
_STEP_NAMES = [s.name for s in STEPS]
# Run at every lease while work is left: never skipped as done; the study keeps its history,
# and the missing groups' parts go beside their study (`campaign_groups.move_parts`).
RECURRING = ("study", "study_groups")


def steps_for(sizes: Sizes) -> tuple[Step, ...]:
    """The steps at `sizes`: the dry run's sizes name one physics task (the toy), so it runs one
    physics step."""
    physics = [f"physics_{task}" for task, _ in SIZES["gpu"].physics][len(sizes.physics):]
    return tuple(s for s in STEPS if s.name not in physics)


def plan_text(steps: Sequence[Step], budget_s: int = BUDGET_S,
              done: dict[str, float] | None = None) -> str:
    """The steps with their expected seconds (and the measured ones of the steps `done`), the
    total against the budget, and the steps left grouped into commands of at most `CALL_S`."""
    done = done or {}
    total = sum(s.expected_s for s in steps)
    width = max(len(s.name) for s in steps)
    lines = [f"{'step':<{width}}  {'expected s':>10}  {'done in s':>9}  measures"]
    lines += [f"{s.name:<{width}}  {s.expected_s:>10}  "
              f"{'' if s.name not in done else round(done[s.name]):>9}  {s.measures}"
              for s in steps]
    lines.append(f"{'total':<{width}}  {total:>10}  = {total / 60:.1f} min of device time "
                 f"(budget {budget_s / 60:.0f} min; add about {MACHINE_START_S} s for each "
                 f"call that finds the machine cold)")
    left = [s for s in steps if s.name not in done]
    if done:
        lines.append(f"left: {len(left)} step(s), {sum(s.expected_s for s in left)} s expected")
    lines += [f"call: bash benchmarks/campaign/gpu_campaign.sh {' '.join(call)}"
              for call in calls(left)]
    return "\n".join(lines)


def calls(steps: Sequence[Step], limit_s: int = CALL_S) -> list[list[str]]:
    """`steps` in order, grouped into commands whose expected seconds stay within `limit_s`."""
    groups: list[list[str]] = []
    used = 0
    for step in steps:
        if not groups or used + step.expected_s > limit_s:
            groups.append([])
            used = 0
        groups[-1].append(step.name)
        used += step.expected_s
    return groups


def done_steps(folder: Path) -> dict[str, float]:
    """The measured wall seconds of the step records in `folder` (the committed results); a
    record that does not parse or has no wall time is left out."""
    done = {}
    for name in (n for n in _STEP_NAMES if n not in RECURRING):
        try:
            done[name] = records.load_json(folder / f"{name}.json",
                                           records.BENCHMARK_RESULT)["wall_s"].number(0)
        except ValueError:  # missing, unreadable, or no wall time (records names which)
            continue
    return done


def check_budget(steps: Sequence[Step], budget_s: int = BUDGET_S) -> None:
    """Refuses a campaign whose expected steps exceed the budget, or one step the limit."""
    total = sum(s.expected_s for s in steps)
    if total > budget_s:
        raise ValueError(f"the campaign's steps expect {total} s, over the budget of {budget_s} s")
    long = [s.name for s in steps if s.expected_s > CALL_S]
    if long:
        raise ValueError(f"steps over the {CALL_S} s that one call gives its steps: {long}")


# ----------------------------------------------------------------------------------- main
def run_step(step: Step, ctx: Context, overwrite: bool = False) -> dict[str, Any] | None:
    """Runs `step` unless its JSON exists (then None); writes `STEP.json` with its wall time,
    or `STEP.failed.json` with the error or interruption that stopped it (and re-raises; a step
    unavailable here re-raises without a record)."""
    from vaco_jax.infra import io

    path = ctx.out / f"{step.name}.json"
    if path.exists() and not overwrite:
        ctx.log(f"{step.name}: done already ({path}), skipped")
        return None
    ctx.log(f"{step.name}: {step.measures} (expected {step.expected_s} s on a GPU)")
    began = time.perf_counter()
    record: dict[str, Any] = {"step": step.name, "measures": step.measures,
                              "sizes": ctx.sizes.name, "expected_s": step.expected_s}
    try:
        record["result"] = step.run(ctx)
    except StepUnavailable:
        raise  # it stopped before measuring anything: no record to keep or collect
    except (Exception, KeyboardInterrupt) as error:  # KeyboardInterrupt: the call's time ran out
        record["error"] = f"{type(error).__name__}: {error}"
        record["traceback"] = traceback.format_exc()[-4000:]
        record["wall_s"] = round(time.perf_counter() - began, 1)
        io.write_json(path.with_suffix(".failed.json"), record)
        raise
    record["wall_s"] = round(time.perf_counter() - began, 1)
    io.write_json(path, record)
    path.with_suffix(".failed.json").unlink(missing_ok=True)  # an earlier try's
    ctx.log(f"{step.name}: {record['wall_s']} s -> {path}")
    return record


def _sizes_of(record: Any) -> str | None:
    """The sizes a results file was measured at: a step record's `sizes`, a suite's preset."""
    if not isinstance(record, dict):
        return None
    settings = record.get("settings")
    return record.get("sizes") or (settings.get("name") if isinstance(settings, dict) else None)


def collect(returned: Path, commit: bool = True, overwrite: bool = False) -> list[str]:
    """Copies what the GPU machine returned (`returned`: a folder, or the `campaign.tar.gz` that
    `gpu_campaign.sh` packs, or a folder holding only it; step records, suite results, the
    shortened sweep, the log) into `benchmarks/results/gpu-campaign/` and commits them there, so
    a later call skips the steps done. A folder with the study's `lease_study.json` also has its
    slice merged, its report committed in `experiments/results/gpu_lag_study/` and the next
    slice packed into `.lease/upload/` (`campaign_lease.collect_study`); the parts of the
    `study_groups` step go to `.lease/control_long_lag/`. Refuses the files of a
    dry run and, unless `overwrite`, a step already collected or an upload the study's pack did
    not use up; every refusal comes before anything is written. Returns the steps collected."""
    if not returned.exists():
        raise ValueError(f"{returned} does not exist")
    with _records(returned) as folder:
        _check_records(folder, overwrite)
        parts = campaign_groups.returned_parts(folder, overwrite)
        if returned.is_dir() and (returned / MANIFEST).is_file():
            history = campaign_lease.collect_study(returned, overwrite)
            if commit:
                _commit(lease_study.REPORT, f"GPU lag study: {history.progress}")
        if parts:
            parts = campaign_groups.move_parts(parts)
            print(f"{len(parts)} part(s) of {campaign_groups.STUDY} in {campaign_groups.LOCAL}; "
                  f"merge them: vaco-jax report /tmp/merged --parts "
                  f"{campaign_groups.RESULTS.relative_to(ROOT)} "
                  f"{campaign_groups.LOCAL.relative_to(ROOT)}/* --allow-incomplete")
        steps, copied = _copy_records(folder)
    if commit and copied:  # the folder whole: the files copied and the failed records removed
        _commit(DONE, f"GPU campaign results: {', '.join(steps) or 'logs'}")
    return steps


@contextlib.contextmanager
def _records(returned: Path) -> Iterator[Path]:
    """The folder of the campaign's files in `returned`: its `campaign.tar.gz` (or `returned`,
    that archive) extracted into a temporary folder, else `returned` itself."""
    packed = returned / "campaign.tar.gz" if returned.is_dir() else returned
    if not packed.is_file():
        yield returned
        return
    loose = [p.name for p in returned.glob("*.json")
             if p.name != MANIFEST] if returned.is_dir() else []
    if loose:
        raise ValueError(f"{returned} holds campaign.tar.gz and loose results {loose}: "
                         "collect one of them")
    with tempfile.TemporaryDirectory() as folder:
        try:
            with tarfile.open(packed) as tar:
                tar.extractall(folder, filter="data")
        except tarfile.TarError as error:
            raise ValueError(f"{packed} is not a readable archive ({error})") from error
        yield Path(folder)


def _check_records(folder: Path, overwrite: bool) -> None:
    """Refuses a dry run's files and, unless `overwrite`, a step already collected."""
    for path in sorted(folder.glob("*.json")):
        sizes = _sizes_of(records.load_json(path, records.BENCHMARK_RESULT).value)
        if sizes not in (None, "gpu"):
            raise ValueError(f"{path.name} was measured at the sizes {sizes!r}, not the "
                             "campaign's 'gpu': not collected")
        if path.stem in _STEP_NAMES and (DONE / path.name).exists() and not overwrite:
            raise ValueError(f"{DONE / path.name} exists: pass --overwrite to replace it")


def _copy_records(folder: Path) -> tuple[list[str], list[str]]:
    """Copies the step records, suite results and the log of `folder` into `DONE`; returns
    the steps collected and the files copied."""
    DONE.mkdir(parents=True, exist_ok=True)
    steps, copied = [], []
    for path in sorted(folder.iterdir()):
        if path.stem in RECURRING or path.name == MANIFEST:
            continue  # the study's record and history are kept by `collect_study`
        if path.suffix in (".json", ".toml") or path.name == "campaign.log":
            target = DONE / path.name
            if path.name == "campaign.log" and target.exists():  # calls' logs one after another
                target.write_text(target.read_text() + path.read_text())
            else:
                shutil.copyfile(path, target)
            copied.append(str(target.relative_to(ROOT)))
            if path.suffix == ".json" and path.stem in _STEP_NAMES:
                steps.append(path.stem)
                (DONE / f"{path.stem}.failed.json").unlink(missing_ok=True)  # an earlier try's
    return steps, copied


def _commit(folder: Path, message: str) -> None:
    """Commits `folder` whole (files written and removed there), and nothing else."""
    path = str(folder.relative_to(ROOT))
    subprocess.run(["git", "add", "-A", "--", path], cwd=ROOT, check=True)
    subprocess.run(["git", "commit", "-m", message, "--", path], cwd=ROOT, check=True)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--plan", action="store_true", help="print the steps and the budget, exit")
    p.add_argument("--step", action="append", default=[], choices=_STEP_NAMES,
                   help="run this step (repeatable)")
    p.add_argument("--all", action="store_true", help="run every step not yet done")
    p.add_argument("--sizes", default="gpu", choices=tuple(SIZES),
                   help="gpu: the campaign; tiny: its dry run on a CPU")
    p.add_argument("--out", default=None, help="results folder (one JSON per step)")
    p.add_argument("--overwrite", action="store_true",
                   help="run steps already done again (with --collect: replace steps collected "
                        "and a .lease/upload/ that the returned study did not use up)")
    p.add_argument("--collect", default=None, metavar="DIR",
                   help="copy the files a GPU call returned (DIR, or its campaign.tar.gz) into "
                        "benchmarks/results/gpu-campaign/ and commit them (the study's slice: "
                        "merged, its report committed, the next slice packed), then exit")
    p.add_argument("--no-commit", action="store_true", help="with --collect: copy only")
    args = p.parse_args(argv)
    if args.collect:
        try:
            steps = collect(Path(args.collect), commit=not args.no_commit,
                            overwrite=args.overwrite)
        except ValueError as error:
            p.error(f"--collect {args.collect}: {error}")
        print(f"collected {', '.join(steps) or 'no step records'} into {DONE}")
        return 0
    sizes = SIZES[args.sizes]
    steps = steps_for(sizes)
    print(plan_text(steps, done=done_steps(DONE) if sizes.name == "gpu" else None), flush=True)
    check_budget(steps)
    if args.plan:
        return 0
    if args.out is None or not (args.all or args.step):
        p.error("give --out and --step NAME (or --all), or --plan")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()

    def log(message: str) -> None:
        print(f"[campaign {time.perf_counter() - start:6.0f} s] {message}", flush=True)

    ctx = Context(sizes, out, log)
    chosen = steps if args.all else [s for s in steps if s.name in args.step]
    for step in chosen:
        try:
            run_step(step, ctx, overwrite=args.overwrite)
        except StepUnavailable as missing:
            print(f"{step.name}: {missing}", file=sys.stderr, flush=True)
            return 2
    return 0

