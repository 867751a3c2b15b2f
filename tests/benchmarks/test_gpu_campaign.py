"""The GPU campaign (`benchmarks/campaign/gpu.py`) and the roofline (`benchmarks/roofline.py`):
the plan's budget, the JAX check, the shortened sweep, the roofline's arithmetic and XLA's loop
counting, and the dry run of every step on the CPU."""

import json
import math
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from engine_configs import TOY

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `benchmarks/` is a folder of scripts beside the package

from benchmarks import roofline  # noqa: E402
from benchmarks.campaign import groups as campaign_groups  # noqa: E402
from benchmarks.campaign import gpu as gpu_campaign  # noqa: E402
from benchmarks.campaign import lease as campaign_lease  # noqa: E402
from benchmarks.campaign import steps as campaign_steps  # noqa: E402


# ----------------------------------------------------------------------------------- the plan
def test_plan_sums_the_steps_and_fits_the_budget():
    steps = gpu_campaign.steps_for(gpu_campaign.SIZES["gpu"])
    assert [s.name for s in steps] == [s.name for s in gpu_campaign.STEPS]
    total = sum(s.expected_s for s in steps)
    text = gpu_campaign.plan_text(steps)
    assert "total" in text and f"{total}" in text and f"{total / 60:.1f} min" in text
    assert total <= gpu_campaign.BUDGET_S <= 55 * 60
    assert all(s.expected_s <= gpu_campaign.CALL_S for s in steps)
    gpu_campaign.check_budget(steps)
    script = (ROOT / "benchmarks" / "campaign" / "gpu_campaign.sh").read_text()
    assert f"CAMPAIGN_LIMIT_S:-{gpu_campaign.CALL_LIMIT_S}}}" in script
    with pytest.raises(ValueError, match="over the budget"):
        gpu_campaign.check_budget(steps, budget_s=total - 1)
    assert f"call: bash benchmarks/campaign/gpu_campaign.sh {steps[0].name}" in text
    long = [gpu_campaign.Step("long", "too long for one call", gpu_campaign.CALL_S + 1,
                              lambda ctx: {})]
    with pytest.raises(ValueError, match="that one call gives its steps"):
        gpu_campaign.check_budget(long)


def test_plan_groups_the_steps_left_into_commands_within_the_call_limit():
    step = lambda name, seconds: gpu_campaign.Step(name, "", seconds, lambda ctx: {})  # noqa: E731
    steps = [step("a", 300), step("b", 260), step("c", 1), step("d", 560), step("e", 10)]
    assert gpu_campaign.calls(steps, limit_s=560) == [["a", "b"], ["c"], ["d"], ["e"]]
    assert gpu_campaign.calls([], limit_s=560) == []
    assert gpu_campaign.calls([step("z", 0), step("a", 300)], limit_s=560) == [["z", "a"]]
    assert gpu_campaign.calls([step("long", 600)], limit_s=560) == [["long"]]
    text = gpu_campaign.plan_text(steps, done={"a": 290.4, "c": 0.6})
    assert "left: 3 step(s), 830 s expected" in text
    assert [line for line in text.splitlines() if line.startswith("call:")] == [
        f"call: bash benchmarks/campaign/gpu_campaign.sh {name}" for name in "bde"]
    assert text.splitlines()[1].split()[:3] == ["a", "300", "290"]


def test_dry_run_runs_one_physics_step_on_the_toy_task():
    names = [s.name for s in gpu_campaign.steps_for(gpu_campaign.SIZES["tiny"])]
    assert "physics_ant" in names and "physics_humanoid" not in names
    assert gpu_campaign.SIZES["tiny"].physics == (("toy_reach", (8, 16)),)


def test_jax_version_check_reads_the_tested_range():
    spec = "jax>=0.10.2,<0.12"
    assert campaign_steps.in_range("0.10.2", spec)
    assert campaign_steps.in_range("0.11.2", spec)
    assert not campaign_steps.in_range("0.12.0", spec)  # a newer image's: warned, not failed
    assert not campaign_steps.in_range("0.9.9", spec)
    check = campaign_steps.jax_check()
    assert check["jax"] == jax.__version__ and check["devices"]
    assert check["in_tested_range"] == (check["warning"] is None)


def test_shortened_sweeps_keep_the_paper_sizes_or_shrink_them_all():
    from vaco_jax.experiment import load_experiment, parse_experiment

    paper = load_experiment(campaign_steps.PAPER_SWEEP)
    gpu = parse_experiment(campaign_steps.shortened_sweep(gpu_campaign.SIZES["gpu"]))
    assert [g.name for g in gpu.groups] == [g.name for g in paper.groups]
    first, paper_first = gpu.groups[0].config, paper.groups[0].config
    assert first.num_updates == 30 and first.eval_every == 10
    assert first.replace(total_steps=paper_first.total_steps, eval_every=50) == paper_first
    tiny = parse_experiment(campaign_steps.shortened_sweep(gpu_campaign.SIZES["tiny"]))
    assert {g.config.env for g in tiny.groups} == {"toy_reach"}
    assert tiny.groups[0].config.num_envs == 8 and len(tiny.groups[0].runs) == 2 * 2


# ----------------------------------------------------------------------------------- roofline
def test_roofline_takes_the_larger_of_compute_and_memory_time():
    r = roofline.roofline(flops=2e12, bytes_accessed=1e9, peak_flops=1e12, bandwidth=1e12)
    assert r["compute_s"] == 2.0 and r["memory_s"] == 1e-3 and r["time_s"] == 2.0
    assert r["bound"] == "compute" and r["intensity_flop_per_byte"] == 2000.0
    r = roofline.roofline(flops=67e9, bytes_accessed=33.5e9, peak_flops=67e12, bandwidth=3.35e12)
    assert r["bound"] == "memory" and math.isclose(r["time_s"], 0.01)
    h100 = roofline.on_hardware({"flops": 67e12, "bytes": 0.0}, roofline.HARDWARE["h100"])
    assert math.isclose(h100["fp32"]["time_s"], 1.0)
    assert math.isclose(h100["matrix"]["time_s"], 67 / 494.7)


def test_predicted_rate_adds_the_learner_to_the_physics():
    # 65,536 steps at 819,200 steps/s of physics = 80 ms; 20 ms of learner: 100 ms an update.
    p = roofline.predicted_rate(65_536, 819_200.0, 0.020)
    assert math.isclose(p["physics_s"], 0.080) and math.isclose(p["update_s"], 0.100)
    assert math.isclose(p["steps_per_s"], 655_360.0) and math.isclose(p["of_physics"], 0.8)


def test_sweep_hours_take_the_slowest_part_at_each_tasks_rate():
    parts = [{"ant": 3_600_000, "humanoid": 1_800_000}, {"ant": 7_200_000}]
    rates = {"ant": 1000.0, "humanoid": 500.0}
    assert roofline.sweep_hours(parts, rates) == 2.0  # (1 h + 1 h) and 2 h


def test_paper_sweep_steps_are_split_over_parts_without_loss():
    one, eight = roofline.sweep_steps(parts=1), roofline.sweep_steps(parts=8)
    assert sum(one[0].values()) == 162_529_280_000  # the plan's total (experiments/README.md)
    assert len(eight) == 8 and sum(sum(p.values()) for p in eight) == sum(one[0].values())
    assert set(one[0]) == {"ant", "halfcheetah", "hopper", "humanoid", "walker2d"}


def test_single_trip_config_does_the_same_work_in_one_step():
    config = roofline.paper_config("ant", "vaco")
    flat = roofline.single_trip(config)
    assert config.num_envs == 2048 and config.rollout_length == 32 and config.epochs == 4
    assert flat.num_envs * flat.rollout_length == config.num_envs * config.rollout_length
    assert (flat.rollout_length, flat.epochs, flat.minibatches) == (1, 1, 1)
    assert flat.tv_reference == "behaviour"  # the phase reference is refused at one step
    assert flat.replace(num_envs=2048, rollout_length=32, epochs=4, minibatches=32,
                        tv_reference=config.tv_reference) == config


def test_xla_counts_a_loop_body_once():
    """The limitation the roofline works around: a scan of 10 matrix products counts as one."""
    def scanned(n):
        return jax.jit(lambda x, w: jax.lax.scan(lambda c, _: (jnp.tanh(c @ w), None), x,
                                                 None, length=n)[0])
    x = jax.ShapeDtypeStruct((64, 64), jnp.float32)
    once = roofline.xla_cost(scanned(1), x, x)
    ten = roofline.xla_cost(scanned(10), x, x)
    assert once["flops"] >= 2 * 64 ** 3 and once["while_loops"] == 0
    assert ten["flops"] < 1.01 * once["flops"]  # not 10x (the loop counter adds 2)
    assert ten["while_loops"] == 1 and ten["loop_trip_counts"] == [10]


def test_control_costs_split_the_update_into_environment_acting_and_learning():
    counts = roofline.control_costs(TOY, log=lambda _: None)
    c = counts["programs"]
    assert 0 < c["env"]["flops"] < c["collect"]["flops"] < c["update"]["flops"]
    per = counts["per_update"]
    assert math.isclose(per["learning"]["flops"],
                        TOY.epochs * (c["update"]["flops"] - c["collect"]["flops"]))
    assert math.isclose(per["acting"]["bytes"], c["collect"]["bytes"] - c["env"]["bytes"])
    assert counts["single_trip_config"]["num_envs"] == TOY.num_envs * TOY.rollout_length
    table = roofline.markdown({"control": {"toy_reach": counts}})
    assert "toy_reach | learning" in table and "no published rate" in table


def test_recorded_roofline_renders_its_tables():
    path = ROOT / "benchmarks" / "results" / "roofline" / "roofline.json"
    results = json.loads(path.read_text())
    text = roofline.markdown(results)
    for heading in ("XLA's count per update", "predicted end-to-end rate",
                    "paper sweep's predicted time", "Token testbed"):
        assert heading in text
    assert set(results["control"]) == {"ant", "humanoid"}


# ----------------------------------------------------------------------------------- dry run
# Every step end to end at the `tiny` sizes on the CPU (the toy task; Brax's trainer on
# inverted_pendulum), so that the campaign cannot rot before a GPU runs it. One test a step (with
# the steps it reads, in one folder), so that the pytest workers share the dry run's minutes.
# `peers` needs PureJaxRL's clone: without one it stops at once (its own test, below).
DRY_STEPS = gpu_campaign.steps_for(gpu_campaign.SIZES["tiny"])
NEEDED = {need for s in DRY_STEPS for need in s.needs}


def _check_setup(r):
    assert r["jax_check"]["jax"] == jax.__version__


def _check_physics(r):
    assert [row["num_envs"] for row in r["rows"]] == [8, 16]
    assert all(row["env_steps_per_s"] > 0 and row["sync_ppo_steps_per_s"] > 0
               for row in r["rows"])


def _check_tokens(r):
    throughput = r["parts"]["throughput"]
    assert throughput["forward"]["xla_flops_per_call"] > 0
    assert not throughput["forward"]["loops_counted_once"]


def _check_capacity(r):
    capacity = r["parts"]["capacity"]
    assert capacity["model"]["largest_fitting"] and capacity["batch"]["largest_fitting"]
    # The preset's own size heads both ladders and is compiled and timed once.
    assert capacity["model"]["tries"][0] | {"prompts": 2} == \
        capacity["batch"]["tries"][0] | {"width": 16}


def _check_async(r):
    assert r["result"]["rows"][0]["buffer_capacity"] == 4


def _check_seeds(r):
    assert [row["seeds"] for row in r["result"]["rows"]] == [1, 2]


def _check_brax(r):
    assert r["result"]["steps_per_s"] > 0


def _check_tokens_seeds(r):
    assert list(r["parts"]["seeds"]["rows"])[0] == "1"


def _check_sweep_groups(r):
    assert r["steps_per_s"] > 0


def _check_peers(r):
    assert r["vaco_jax_over_purejaxrl"] > 0 and r["vaco_jax_over_brax"] > 0


def _check_study_groups(r):
    # Nothing committed in the dry run: both toy cells are missing, the first one runs.
    assert r["cells_run"] == ["toy_reach-ppo-e1m2"] and r["cells_left"] == 1


DRY_CHECKS = {"setup": _check_setup, "study_groups": _check_study_groups,
              "physics_ant": _check_physics, "async_k16": _check_async,
              "seeds": _check_seeds, "brax": _check_brax, "tokens": _check_tokens,
              "tokens_seeds": _check_tokens_seeds, "tokens_capacity": _check_capacity,
              "sweep_groups": _check_sweep_groups, "peers": _check_peers}
"""What each step's record must hold; `study` is checked by tests/benchmarks/test_lease_study.py and
`sweep_plan` beside the `sweep_groups` it reads."""


def test_every_campaign_step_has_its_dry_run_check():
    assert set(DRY_CHECKS) | {"study", "sweep_plan"} == {s.name for s in DRY_STEPS}


STAND_IN_SCRIPT = """
import jax.numpy as jnp


def make_train(config):
    updates = config["TOTAL_TIMESTEPS"] // (config["NUM_ENVS"] * config["NUM_STEPS"])
    shape = (updates, config["NUM_STEPS"], config["NUM_ENVS"])

    def train(rng):
        returns = jnp.broadcast_to(jnp.arange(updates, dtype=jnp.float32)[:, None, None], shape)
        return {"runner_state": rng, "metrics": {"returned_episode": jnp.ones(shape, bool),
                                                 "returned_episode_returns": returns}}
    return train
"""


BRAX_RECORD = {"result": {
    "settings": {"num_envs": 8, "unroll_length": 4, "num_updates_per_batch": 1,
                 "num_minibatches": 2},
    "steps_per_s": 1000.0, "vaco_jax_steps_per_s": 800.0, "ratio_vaco_jax_to_brax": 0.8}}
"""What the `brax` suite returns, as the peers step reads it."""


def stand_in_purejaxrl(checkout: Path) -> Path:
    """A folder laid out as PureJaxRL's clone whose continuous script has the script's interface
    (`make_train(config) -> train(rng)` with its metrics) and trains nothing."""
    scripts = checkout / "purejaxrl"
    scripts.mkdir(parents=True)
    (scripts / "ppo_continuous_action.py").write_text(STAND_IN_SCRIPT)
    (scripts / "wrappers.py").write_text(
        "class BraxGymnaxWrapper:\n"
        "    def __init__(self, env_name, backend='positional'):\n"
        "        self.env_name, self.backend = env_name, backend\n")
    return checkout


@pytest.mark.slow
@pytest.mark.parametrize("step", [s for s in DRY_STEPS if s.name not in NEEDED],
                         ids=lambda s: s.name)
def test_dry_run_writes_each_steps_json(step, tmp_path, monkeypatch):
    # The peers step runs PureJaxRL's script from a clone, which a machine without network
    # lacks: the dry run checks the step's plumbing with a stand-in of the script's interface,
    # beside a record of the `brax` suite (whose dry run is its own case) instead of timing
    # Brax's trainer a second time.
    monkeypatch.setattr(campaign_lease, "PUREJAXRL", stand_in_purejaxrl(tmp_path / "purejaxrl"))
    suite = campaign_lease.suite
    monkeypatch.setattr(campaign_lease, "suite",
                        lambda name: (lambda ctx: BRAX_RECORD) if name == "brax" else suite(name))
    chain = [*step.needs, step.name]
    run = [a for name in chain for a in ("--step", name)]
    assert gpu_campaign.main([*run, "--sizes", "tiny", "--out", str(tmp_path)]) == 0
    records = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in chain}
    for name, record in records.items():
        assert record["step"] == name and record["sizes"] == "tiny" and "error" not in record
        assert record["wall_s"] >= 0 and "result" in record
    r = {name: record["result"] for name, record in records.items()}
    for name in chain:
        DRY_CHECKS.get(name, lambda _: None)(r[name])
    if step.name == "sweep_plan":
        assert r["sweep_plan"]["steps_per_s"] == r["sweep_groups"]["steps_per_s"]
        assert any("estimated time" in line for line in r["sweep_plan"]["plan"])
    # Resumable: a second pass skips every step whose JSON exists.
    before = {p.name: p.stat().st_mtime for p in tmp_path.glob("*.json")}
    assert gpu_campaign.main([*run, "--sizes", "tiny", "--out", str(tmp_path)]) == 0
    assert {p.name: p.stat().st_mtime for p in tmp_path.glob("*.json")} == before


def test_peers_without_a_clone_stops_at_once_with_one_line_saying_how_to_get_it(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(campaign_lease, "PUREJAXRL", tmp_path / ".purejaxrl")
    out = tmp_path / "out"
    assert gpu_campaign.main(["--step", "peers", "--sizes", "tiny", "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("peers: no PureJaxRL clone") and campaign_lease.GET_PUREJAXRL in line
    assert "carry .purejaxrl" in line and not list(out.iterdir())  # nothing ran, no record


def test_peers_take_brax_s_settings_and_give_ratios_to_vaco_jax():
    settings = {"num_envs": 8, "unroll_length": 4, "num_updates_per_batch": 1,
                "num_minibatches": 2}
    assert campaign_lease.purejaxrl_config(settings, "inverted_pendulum") == {
        "ENV_NAME": "inverted_pendulum", "NUM_ENVS": 8, "NUM_STEPS": 4, "UPDATE_EPOCHS": 1,
        "NUM_MINIBATCHES": 2, "TOTAL_TIMESTEPS": 8 * 8 * 4}
    brax = {"vaco_jax_steps_per_s": 300.0, "steps_per_s": 200.0, "ratio_vaco_jax_to_brax": 1.5}
    assert campaign_lease.peer_ratios(brax, None) == {
        "vaco_jax_steps_per_s": 300.0, "brax_steps_per_s": 200.0, "vaco_jax_over_brax": 1.5}
    ratios = campaign_lease.peer_ratios(brax, {"steps_per_s": 600.0, "compile_s": 9.0})
    assert ratios["vaco_jax_over_purejaxrl"] == 0.5 and ratios["purejaxrl_compile_s"] == 9.0


def test_tokens_seeds_gives_the_allocator_more_of_the_device_unless_told(tmp_path, monkeypatch):
    import subprocess

    seen = []

    def run(command, cwd, check, env):
        seen.append(env)
        Path(command[command.index("--out") + 1]).write_text('{"parts": {"seeds": {}}}')
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(gpu_campaign.subprocess, "run", run)
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
    steps = {s.name: s for s in gpu_campaign.STEPS}
    ctx = gpu_campaign.Context(gpu_campaign.SIZES["tiny"], tmp_path, print)
    assert steps["tokens_seeds"].run(ctx) == {"file": "tokens_seeds.tokens.json",
                                              "parts": {"seeds": {}}}
    assert seen[-1]["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.9"
    steps["tokens"].run(ctx)  # the other steps keep JAX's default (75%)
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" not in seen[-1]
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.8")  # a value set wins
    steps["tokens_seeds"].run(ctx)
    assert seen[-1]["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.8"


def test_readme_lists_every_step_with_its_expected_seconds():
    import re

    readme = (ROOT / "benchmarks" / "README.md").read_text()
    listed = {name: int(seconds) for name, seconds in
              re.findall(r"^\| `(\w+)` \|.*\| (\d+) \|$", readme, re.MULTILINE)}
    assert listed == {s.name: s.expected_s for s in gpu_campaign.STEPS}
    for step in gpu_campaign.STEPS:  # the commands at the top run every step
        assert re.search(rf"gpu_campaign\.sh [\w ]*\b{step.name}\b", readme), step.name
    # The first screen is a lease's commands: the clone that `peers` needs, and what each call
    # carries (at most 8 paths).
    first = readme.split("\n## ", 2)[1].split("```", 2)[1]
    assert campaign_lease.GET_PUREJAXRL in first
    for call in re.findall(r"^# on the GPU.*$", first, re.MULTILINE):
        assert "carrying" in call
    assert re.search(r"carrying \.wheels and \.purejaxrl.*\n.*gpu_campaign\.sh [\w ]*\bpeers\b",
                     first)


def test_collect_copies_step_records_and_the_log(tmp_path, monkeypatch):
    returned = tmp_path / "returned"
    returned.mkdir()
    (returned / "setup.json").write_text('{"step": "setup", "sizes": "gpu"}')
    (returned / "physics_ant_4096.run.json").write_text("{}")
    (returned / "campaign.log").write_text("first call\n")
    (returned / "core").write_text("not collected")
    done = tmp_path / "done"
    monkeypatch.setattr(gpu_campaign, "DONE", done)
    monkeypatch.setattr(gpu_campaign, "ROOT", tmp_path)
    assert gpu_campaign.collect(returned, commit=False) == ["setup"]
    (returned / "setup.json").unlink()
    (returned / "campaign.log").write_text("second call\n")
    assert gpu_campaign.collect(returned, commit=False) == []
    assert sorted(p.name for p in done.iterdir()) == [
        "campaign.log", "physics_ant_4096.run.json", "setup.json"]
    assert (done / "campaign.log").read_text() == "first call\nsecond call\n"


def test_collect_unpacks_the_call_s_archive_and_refuses_dry_runs_and_overwrites(
        tmp_path, monkeypatch):
    import tarfile

    done = tmp_path / "done"
    monkeypatch.setattr(gpu_campaign, "DONE", done)
    monkeypatch.setattr(gpu_campaign, "ROOT", tmp_path)

    def returned(name: str, record: dict) -> Path:
        folder = tmp_path / name
        (folder / "packed").mkdir(parents=True)
        (folder / "packed" / "brax.json").write_text(json.dumps(record))
        with tarfile.open(folder / "campaign.tar.gz", "w:gz") as tar:
            tar.add(folder / "packed", arcname=".")
        return folder

    first = returned("first", {"step": "brax", "sizes": "gpu", "wall_s": 120.3})
    assert gpu_campaign.collect(first, commit=False) == ["brax"]
    assert gpu_campaign.done_steps(done) == {"brax": 120.3}
    again = returned("again", {"step": "brax", "sizes": "gpu", "wall_s": 99.0})
    with pytest.raises(ValueError, match="exists: pass --overwrite"):
        gpu_campaign.collect(again / "campaign.tar.gz", commit=False)
    assert gpu_campaign.done_steps(done) == {"brax": 120.3}
    assert gpu_campaign.collect(again, commit=False, overwrite=True) == ["brax"]
    assert gpu_campaign.done_steps(done) == {"brax": 99.0}
    dry = returned("dry", {"step": "brax", "sizes": "tiny", "wall_s": 3.0})
    with pytest.raises(ValueError, match="sizes 'tiny'"):
        gpu_campaign.collect(dry, commit=False, overwrite=True)
    (dry / "packed" / "brax.json").unlink()  # a dry run's suite results alone
    (dry / "packed" / "brax.run.json").write_text('{"settings": {"name": "tiny"}}')
    with pytest.raises(ValueError, match="sizes 'tiny'"):
        gpu_campaign.collect(dry / "packed", commit=False)
    (dry / "packed" / "brax.run.json").unlink()
    (dry / "packed" / "tokens.failed.json").write_text('{"step": "tokens", "sizes": "tiny"}')
    with pytest.raises(ValueError, match="sizes 'tiny'"):
        gpu_campaign.collect(dry / "packed", commit=False)
    assert gpu_campaign.done_steps(done) == {"brax": 99.0}
    (first / "brax.json").write_text("{}")  # loose results beside the archive
    with pytest.raises(ValueError, match="loose results"):
        gpu_campaign.collect(first, commit=False, overwrite=True)
    (tmp_path / "broken.tar.gz").write_text("not an archive")
    with pytest.raises(ValueError, match="not a readable archive"):
        gpu_campaign.collect(tmp_path / "broken.tar.gz", commit=False)
    with pytest.raises(ValueError, match="does not exist"):
        gpu_campaign.collect(tmp_path / "missing", commit=False)


def test_collect_clears_the_failed_record_of_a_step_it_collects(tmp_path, monkeypatch):
    done = tmp_path / "done"
    done.mkdir()
    (done / "tokens.failed.json").write_text('{"step": "tokens", "sizes": "gpu"}')
    (done / "setup.json").write_text('{"step": "setup", "sizes": "gpu"}')  # no wall time
    monkeypatch.setattr(gpu_campaign, "DONE", done)
    monkeypatch.setattr(gpu_campaign, "ROOT", tmp_path)
    returned = tmp_path / "returned"
    returned.mkdir()
    (returned / "tokens.json").write_text('{"step": "tokens", "sizes": "gpu", "wall_s": 280.0}')
    assert gpu_campaign.collect(returned, commit=False) == ["tokens"]
    assert sorted(p.name for p in done.iterdir()) == ["setup.json", "tokens.json"]
    assert gpu_campaign.done_steps(done) == {"tokens": 280.0}


def _returned_part(returned: Path, name: str) -> Path:
    part = returned / campaign_groups.STUDY / name
    (part / "runs" / "batch-0").mkdir(parents=True)
    (part / "summary.json").write_text("{}")
    (part / "runs" / "batch-0" / "metrics.csv").write_text("update\n0\n")
    return part


def test_collect_puts_the_missing_groups_parts_beside_their_study(tmp_path, monkeypatch):
    done, local = tmp_path / "done", tmp_path / ".lease" / campaign_groups.STUDY
    monkeypatch.setattr(gpu_campaign, "DONE", done)
    monkeypatch.setattr(gpu_campaign, "ROOT", tmp_path)
    monkeypatch.setattr(campaign_groups, "LOCAL", local)
    monkeypatch.setattr(campaign_groups, "RESULTS", tmp_path / "results")
    returned = tmp_path / "returned"
    _returned_part(returned, "part-003-reacher-spo-e4m4")
    (returned / "study_groups.json").write_text('{"step": "study_groups", "sizes": "gpu"}')
    assert gpu_campaign.collect(returned, commit=False) == []  # recurring: never marked done
    assert (local / "part-003-reacher-spo-e4m4" / "runs" / "batch-0" / "metrics.csv").is_file()
    assert not (done / "study_groups.json").exists()
    # The same part again: refused unless asked, before anything is written.
    (returned / "setup.json").write_text('{"step": "setup", "sizes": "gpu"}')
    with pytest.raises(ValueError, match="holds \\['part-003-reacher-spo-e4m4'\\] already"):
        gpu_campaign.collect(returned, commit=False)
    assert not (done / "setup.json").exists()
    assert gpu_campaign.collect(returned, commit=False, overwrite=True) == ["setup"]


@pytest.mark.parametrize("hostile", ["named", "linked", "link_inside", "file"])
def test_collect_refuses_a_returned_part_the_step_did_not_write(hostile, tmp_path, monkeypatch):
    done, local = tmp_path / "done", tmp_path / ".lease" / campaign_groups.STUDY
    monkeypatch.setattr(gpu_campaign, "DONE", done)
    monkeypatch.setattr(gpu_campaign, "ROOT", tmp_path)
    monkeypatch.setattr(campaign_groups, "LOCAL", local)
    returned = tmp_path / "returned"
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "secret.txt").write_text("not to be copied")
    folder = returned / campaign_groups.STUDY
    if hostile == "named":
        _returned_part(returned, "runs")
    elif hostile == "linked":
        folder.mkdir(parents=True)
        (folder / "part-000-x").symlink_to(outside, target_is_directory=True)
    elif hostile == "link_inside":
        part = _returned_part(returned, "part-000-x")
        (part / "runs" / "secret.txt").symlink_to(outside / "secret.txt")
    else:
        folder.mkdir(parents=True)
        (folder / "part-000-x").write_text("a file")
    (returned / "setup.json").write_text('{"step": "setup", "sizes": "gpu"}')
    with pytest.raises(ValueError, match="not part folders the study_groups step writes"):
        gpu_campaign.collect(returned, commit=False)
    assert not local.exists() and not done.exists()


def test_study_groups_runs_the_cells_a_study_s_parts_file_names_missing(tmp_path):
    from vaco_jax.experiment import parse_experiment

    experiment = parse_experiment(campaign_groups.DRY_RUN, name="toy")
    parts = tmp_path / "parts.json"
    parts.write_text(json.dumps({"experiment": "toy", "complete": False, "parts": [],
                                 "missing_groups": ["tune-toy_reach-vaco-e1m2",
                                                    "toy_reach-vaco-e1m2"]}))
    assert campaign_groups.missing_cells(experiment, parts) == [
        ("tune-toy_reach-vaco-e1m2", "toy_reach-vaco-e1m2")]
    assert campaign_groups.missing_cells(experiment, None) == [
        ("tune-toy_reach-ppo-e1m2", "toy_reach-ppo-e1m2"),
        ("tune-toy_reach-vaco-e1m2", "toy_reach-vaco-e1m2")]


def test_study_groups_without_the_parts_file_stops_at_once_saying_what_to_carry(
        tmp_path, monkeypatch):
    monkeypatch.setattr(campaign_groups, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(campaign_groups, "CARRIED", tmp_path / "carried.json")
    ctx = gpu_campaign.Context(gpu_campaign.SIZES["gpu"], tmp_path, print)
    with pytest.raises(campaign_steps.StepUnavailable, match="carry .lease"):
        campaign_groups.step_study_groups(ctx)


def test_campaign_script_stops_a_step_at_the_call_s_limit_and_packs_what_came_before(tmp_path):
    """`gpu_campaign.sh` with a stand-in interpreter: a quick step, then one that outlasts the
    call's limit and is interrupted; the archive holds the first step's record and the log."""
    import subprocess
    import tarfile
    import textwrap
    import time

    stand_in = tmp_path / "python"
    stand_in.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import json, sys, time
        args = sys.argv[1:]
        if "--step" in args:
            step, out = args[args.index("--step") + 1], args[args.index("--out") + 1]
            print("[stand-in] running", step, flush=True)
            if step == "slow":
                time.sleep(60)
            with open(f"{{out}}/{{step}}.json", "w") as f:
                json.dump({{"step": step, "sizes": "gpu", "wall_s": 0.0}}, f)
        """))
    stand_in.chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": str(stand_in), "OUT": str(out),
           "CAMPAIGN_LIMIT_S": "4", "CAMPAIGN_MIN_STEP_S": "1"}
    began = time.monotonic()
    script = ROOT / "benchmarks" / "campaign" / "gpu_campaign.sh"
    done = subprocess.run(["bash", str(script), "quick", "slow", "never"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert time.monotonic() - began < 30
    assert done.returncode == 4, done.stdout + done.stderr
    with tarfile.open(out / "campaign.tar.gz") as tar:
        names = sorted(n.lstrip("./") for n in tar.getnames() if n not in (".", "./"))
        log = tar.extractfile("./campaign.log").read().decode()
    assert names == ["campaign.log", "quick.json"]
    assert "running slow" in log and "running never" not in log
