"""The GPU campaign's steps that reach beyond one call: the lag study continued lease by lease
(`study`, and `collect_study` back home) and the peers timed beside vaco_jax (`peers`).

`study` continues `experiments/gpu_lag_study.toml` from what the last lease returned (the pack
in `.lease/upload/`, carried) for one call, and packs what the next lease needs into the
call's returned files (`benchmarks/campaign/study.py`). `peers` runs PureJaxRL's continuous PPO
from a clone carried as `.purejaxrl/`, which no installation brings: without it the step stops
at once, with the commands that make it, before any device time is spent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Mapping

from benchmarks.campaign import study as lease_study
from benchmarks.campaign.steps import ROOT, Context, StepUnavailable, suite, with_values
from benchmarks.campaign.records import read_pack
from vaco_jax.infra import records

# The study's call: its training stops here (the engine's own stop after the chunk under way),
# leaving the call's last minute to packing and the call's start to the wheels and unpacking.
STUDY_TRAIN_S = 420
DRY_RUN_TRAIN_S = 120  # the tiny study finishes long before
# Where the study's parts go: straight into the device's output folder when gpu_campaign.sh
# names it (each part one of the call's returned files), not into the campaign's archive.
STUDY_OUT = "CAMPAIGN_STUDY_OUT"
PUREJAXRL = ROOT / ".purejaxrl"
# The commit the parity checks ran (benchmarks/README.md, "Parity with PureJaxRL").
GET_PUREJAXRL = ("git clone https://github.com/luchris429/purejaxrl .purejaxrl && "
                 "git -C .purejaxrl checkout 31756b1")
PUREJAXRL_SCRIPT = Path("purejaxrl") / "ppo_continuous_action.py"


def step_study(ctx: Context) -> dict[str, Any]:
    """The GPU lag study's next slice (`benchmarks/campaign/study.py`): continued from what the
    last lease returned (`.lease/upload/`, carried), trained, packed for the next."""
    from vaco_jax.experiment import parse_experiment

    text = with_values(lease_study.STUDY.read_text(), ctx.sizes.study_overrides,
                       lease_study.STUDY.name)
    out = Path(os.environ.get(STUDY_OUT) or ctx.out / "study")
    gpu = ctx.sizes.name == "gpu"
    # The dry run's tiny study starts afresh: the real study's next slice is not its to train.
    upload = lease_study.UPLOAD if gpu else ctx.out / "no-upload"
    with tempfile.TemporaryDirectory() as work:
        return lease_study.run_slice(parse_experiment(text, name="gpu_lag_study"), upload, out,
                                     Path(work), STUDY_TRAIN_S if gpu else DRY_RUN_TRAIN_S)


def collect_study(returned: Path, overwrite: bool = False,
                  seconds: float = STUDY_TRAIN_S) -> lease_study.History:
    """The study's returned slice merged into its folder (`.lease/gpu_lag_study`), its report
    re-rendered in experiments/results/gpu_lag_study with the leases' devices and the steps
    done, and the next slice packed into `.lease/upload` for the next lease to carry. Refuses,
    before anything is written, to replace an upload that this pack did not use up, unless
    `overwrite`. Returns the study's history (`progress`: its one-line state)."""
    pack = read_pack(returned)
    refusal = lease_study.upload_refusal(lease_study.UPLOAD, pack.manifest)
    if refusal and not overwrite:
        raise ValueError(refusal)
    lease = lease_study.merge(pack, lease_study.LOCAL, lease_study.STUDY).lease
    history = lease_study.write_report(lease_study.LOCAL, lease_study.REPORT, lease=lease)
    piece = lease_study.prepare(lease_study.LOCAL, lease_study.UPLOAD,
                                lease_study.SIZING_SHARE * seconds,
                                lease_study.measured_rates(history.leases))
    trained = lease.trained and lease.trained.to_json()
    print(f"study: slice {trained} from {lease.device} merged; {history.progress}; next: "
          f"{piece.to_json() if piece else 'none, complete'}", flush=True)
    return history


def step_peers(ctx: Context) -> dict[str, Any]:
    """PureJaxRL's continuous PPO (its script, from a clone carried as `.purejaxrl/`) and
    Brax's trainer timed beside vaco_jax's synchronous ppo in one call, at the settings of
    `run.py`'s preset on `ant` (the dry run: Brax's task, as PureJaxRL has no toy), as ratios.
    Brax's side is the `brax` suite, which times vaco_jax around it."""
    if not (PUREJAXRL / PUREJAXRL_SCRIPT).is_file():
        raise StepUnavailable(f"no PureJaxRL clone in {PUREJAXRL}: here, {GET_PUREJAXRL}; then "
                              f"carry .purejaxrl with the call (benchmarks/README.md)")
    brax = suite("brax")(ctx)["result"]
    config = purejaxrl_config(brax["settings"], ctx.sizes.brax_env or "ant")
    out = ctx.out / "peers_purejaxrl.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.purejaxrl", "--script",
                           "continuous", "--checkout", str(PUREJAXRL), "--seeds", "1",
                           "--config", json.dumps(config), "--out", str(out)], cwd=ROOT)
    pure = (records.load_json(out, records.BENCHMARK_RESULT).value
            if done.returncode == 0 and out.exists() else None)
    result = {"brax": brax, **peer_ratios(brax, pure), "purejaxrl_config": config}
    if pure is None:  # Brax's side is kept: it was timed in this call all the same
        result["purejaxrl"] = f"failed ({done.returncode})"
    return result


def purejaxrl_config(settings: Mapping[str, Any], env: str) -> dict[str, Any]:
    """PureJaxRL's settings for Brax's keyword arguments (as vaco_jax's settings map to them),
    8 updates long."""
    config = {"ENV_NAME": env, "NUM_ENVS": settings["num_envs"],
              "NUM_STEPS": settings["unroll_length"],
              "UPDATE_EPOCHS": settings["num_updates_per_batch"],
              "NUM_MINIBATCHES": settings["num_minibatches"]}
    return config | {"TOTAL_TIMESTEPS": 8 * config["NUM_ENVS"] * config["NUM_STEPS"]}


def peer_ratios(brax: Mapping[str, Any], pure: Mapping[str, Any] | None) -> dict[str, Any]:
    """vaco_jax's rate (timed around Brax's in the `brax` suite) over each peer's."""
    ours = brax["vaco_jax_steps_per_s"]
    ratios = {"vaco_jax_steps_per_s": ours, "brax_steps_per_s": brax.get("steps_per_s"),
              "vaco_jax_over_brax": brax["ratio_vaco_jax_to_brax"]}
    if pure is None:
        return ratios
    return ratios | {"purejaxrl_steps_per_s": pure["steps_per_s"],
                     "purejaxrl_compile_s": pure["compile_s"],
                     "vaco_jax_over_purejaxrl": ours / pure["steps_per_s"],
                     "note": "PureJaxRL's rate includes its first update after compilation"}
