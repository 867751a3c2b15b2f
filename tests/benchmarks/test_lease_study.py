"""The GPU lag study's slices (`benchmarks/campaign/study.py`) on the CPU: a tiny study trained
for a slice, packed, unpacked and continued equals the study run whole when episodes are carried,
and stays within a stated tolerance when they restart; the pack's limits; a returned pack
read as untrusted input (archives that reach outside their folder, members written twice, byte
counts and digests that lie, batches the study's own plan lacks, batch states out of range, a
pack collected twice), each refused in one line with nothing written; the slice planning.
`tests/benchmarks/test_lease_pack_hostile.py` forges packs at random."""

import hashlib
import io
import json
import shutil
import sys
import tarfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine_configs import TOY_EXPERIMENT

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `benchmarks/` is a folder of scripts beside the package

from benchmarks.campaign import pack as lease_pack  # noqa: E402
from benchmarks.campaign import records as lease_records  # noqa: E402
from benchmarks.campaign import study as lease_study  # noqa: E402
from benchmarks.campaign.records import Episodes  # noqa: E402
from benchmarks.campaign.study import BatchInfo, Slice  # noqa: E402

# One group of 4 runs (2 lags x 2 seeds, one batch), 4 updates in 2 evaluation periods.
TINY = TOY_EXPERIMENT.replace("tv_delta = [0.1, 0.3]", "tv_delta = 0.2")


def _sweep(tmp: Path, name: str):
    from vaco_jax.experiment import parse_experiment, start_sweep

    return start_sweep(parse_experiment(TINY, name="tiny"), tmp / name)


def _metrics(folder: Path) -> pd.DataFrame:
    (batch,) = sorted((folder / "runs").iterdir())
    return pd.read_parquet(batch / "metrics.parquet").sort_values(["run", "update"])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The study run whole, and run as slice, pack, unpack, continue (episodes carried and
    restarted)."""
    from vaco_jax.experiment import load_sweep, run_sweep

    tmp = tmp_path_factory.mktemp("lease")
    whole = _sweep(tmp, "whole")
    run_sweep(whole, tmp / "whole", progress=False)
    sliced = _sweep(tmp, "sliced")
    run_sweep(sliced, tmp / "sliced", progress=False, until_updates=2)
    names = [b.name for b in sliced.batches]
    out = {}
    for episodes in Episodes:
        packed = tmp / f"pack-{episodes.value}"
        manifest = lease_pack.pack(tmp / "sliced", names, episodes, packed, {"next": None})
        continued = tmp / f"continued-{episodes.value}"
        lease_pack.unpack(packed, continued)
        run_sweep(load_sweep(continued), continued, progress=False)
        out[episodes] = (manifest, continued, packed)
    return {"tmp": tmp, "whole": tmp / "whole", "sliced": tmp / "sliced", **out}


def test_a_slice_stops_at_its_updates(runs):
    from vaco_jax.infra.run_folder import read_status

    (batch,) = (runs["sliced"] / "runs").iterdir()
    assert read_status(batch).updates_done == 2 and not read_status(batch).complete


def test_carried_episodes_continue_bit_identically(runs):
    manifest, continued, _ = runs[Episodes.CARRIED]
    assert manifest["episodes"] == "carried" and set(manifest["updates"].values()) == {2}
    whole, again = _metrics(runs["whole"]), _metrics(continued)
    assert again["update"].max() == 4
    pd.testing.assert_frame_equal(whole.reset_index(drop=True), again.reset_index(drop=True),
                                  check_exact=True)


def test_restarted_episodes_change_the_continuation_within_tolerance(runs):
    """Tolerance: every run's final evaluation return within 30% of the whole run's (measured:
    7 to 25% here, where the restart comes half-way, at update 2 of 4, with 40-step episodes:
    a lease's restart comes after 50 updates or more, with 1,000-step episodes); the updates
    before the restart bit-identical, and the ones after not, or the restart did not happen."""
    _, continued, _ = runs[Episodes.RESTART]
    whole, again = _metrics(runs["whole"]), _metrics(continued)
    before = whole["update"] <= 2
    pd.testing.assert_frame_equal(whole[before].reset_index(drop=True),
                                  again[before].reset_index(drop=True), check_exact=True)
    assert not whole.equals(again)
    final = lambda m: m[m["update"] == 4]["eval_return"].to_numpy()  # noqa: E731
    assert np.all(np.abs(final(whole) - final(again)) <= 0.3 * np.abs(final(whole)))


def test_pack_respects_the_call_limits(runs, monkeypatch):
    manifest, _, packed = runs[Episodes.CARRIED]
    files = sorted(p.name for p in packed.iterdir())
    assert files == sorted([*(p["name"] for p in manifest["parts"]), "lease_study.json"])
    assert len(manifest["parts"]) <= lease_records.MAX_PARTS < 8
    assert all((packed / p["name"]).stat().st_size <= lease_records.PART_LIMIT
               for p in manifest["parts"])
    # A small limit splits the same pack into parts, which unpack joins again.
    monkeypatch.setattr(lease_pack, "PART_LIMIT", 4096)
    split = lease_pack.pack(runs["sliced"], [b.name for b in (runs["sliced"] / "runs").iterdir()],
                             Episodes.CARRIED, runs["tmp"] / "split", {})
    assert len(split["parts"]) > 1 and all(p["bytes"] <= 4096 for p in split["parts"])
    monkeypatch.setattr(lease_pack, "MAX_PARTS", 1)
    with pytest.raises(ValueError, match="over 1 files"):
        lease_pack.pack(runs["sliced"], [b.name for b in (runs["sliced"] / "runs").iterdir()],
                         Episodes.CARRIED, runs["tmp"] / "split2", {})


def test_packed_state_leaves_out_environments_when_episodes_restart(runs):
    from vaco_jax.experiment import load_sweep

    plan = load_sweep(runs["sliced"])
    (batch,) = plan.batches
    folder = runs["sliced"] / "runs" / batch.name
    _, carried = lease_pack.batch_arrays(plan, batch, folder, Episodes.CARRIED)
    _, restart = lease_pack.batch_arrays(plan, batch, folder, Episodes.RESTART)
    dropped = set(carried) - set(restart)
    assert dropped and all(n.startswith("state/episodes/") for n in dropped)
    assert {"state/update", "state/key", "state/params/actor/Dense_0/kernel"} <= set(restart) \
        or any(n.startswith("state/buffer/") for n in restart)
    assert any(n.startswith("state/opt_state/") for n in restart)
    assert any(n.startswith("state/obs_stats/") for n in restart)
    assert int(carried["state/update"][0]) == 2


def test_pack_leaves_out_batches_without_a_checkpoint(runs, tmp_path, capsys):
    """A batch whose call ran out of time before its first period ended, and one never started:
    neither is packed, both are named in the manifest and the log, and the pack unpacks."""
    from vaco_jax.infra.run_folder import CHECKPOINT_DIR

    stopped = tmp_path / "stopped"
    shutil.copytree(runs["sliced"], stopped)
    (batch,) = (stopped / "runs").iterdir()
    shutil.rmtree(batch / CHECKPOINT_DIR)
    manifest = lease_pack.pack(stopped, [batch.name], Episodes.RESTART, tmp_path / "packed", {})
    assert manifest["skipped_no_checkpoint"] == [batch.name] and manifest["updates"] == {}
    assert json.loads((tmp_path / "packed" / "lease_study.json").read_text())[
        "skipped_no_checkpoint"] == [batch.name]
    assert f"no checkpoint yet (they start again from the beginning): {batch.name}" in \
        capsys.readouterr().out
    lease_pack.unpack(tmp_path / "packed", tmp_path / "unpacked")
    assert not (tmp_path / "unpacked" / "runs" / batch.name).exists()
    never = _sweep(tmp_path, "never")
    names = [b.name for b in never.batches]
    assert lease_pack.pack(tmp_path / "never", names, Episodes.RESTART, tmp_path / "packed2",
                           {})["skipped_no_checkpoint"] == names


def test_collect_merges_the_slice_reports_it_and_replaces_only_a_used_upload(
        runs, tmp_path, monkeypatch, capsys):
    """`--collect` of a returned slice: merged, its report naming the device and the steps
    done, the next slice packed; collected again, the upload (which names the next slice, not
    the returned one) is kept unless asked, in one line naming the flag."""
    from benchmarks.campaign import gpu as gpu_campaign

    for name in ("LOCAL", "UPLOAD", "REPORT"):
        monkeypatch.setattr(lease_study, name, tmp_path / name.lower())
    monkeypatch.setattr(lease_study, "STUDY", tmp_path / "tiny.toml")
    lease_study.STUDY.write_text(TINY)
    monkeypatch.setattr(gpu_campaign, "DONE", tmp_path / "done")
    monkeypatch.setattr(gpu_campaign, "ROOT", tmp_path)
    names = [b.name for b in (runs["sliced"] / "runs").iterdir()]
    piece = Slice(tuple(names), 2, Episodes.RESTART)
    returned = tmp_path / "returned"
    lease_pack.pack(runs["sliced"], names, Episodes.RESTART, returned,
                    {"slice": piece.to_json(), "device": "cpu", "rates": {}, "wall_s": 1.0})
    lease_pack.pack(runs["sliced"], names, Episodes.RESTART, lease_study.UPLOAD,
                    {"next": piece.to_json()})  # the upload the call carried
    assert gpu_campaign.collect(returned, commit=False) == []
    report = (lease_study.REPORT / "report.md").read_text()
    assert "1 lease(s) on cpu: 256 to 256 of 512 steps per run so far" in report
    history = json.loads((lease_study.REPORT / "lease_study.json").read_text())
    assert history["leases"][0]["device"] == "cpu"
    assert history["progress"] in report and set(history["steps_per_run"].values()) == {256}
    upload = json.loads((lease_study.UPLOAD / "lease_study.json").read_text())
    assert upload["next"]["until_updates"] == 4 and upload["updates"] == {names[0]: 2}
    with pytest.raises(ValueError, match=r"did not train .*: pass --overwrite to replace it"):
        gpu_campaign.collect(returned, commit=False)
    assert json.loads((lease_study.UPLOAD / "lease_study.json").read_text()) == upload


# ----------------------------------------------------------------------------- untrusted input
# A pack's batch the study lacks: refused by name where it is not even a plain name.
NOT_OURS = r"not a batch of the study: refused|lease_study\.json'?: updates: .* not a plain name"
OTHER = TINY.replace("epochs = 2", "epochs = 1")  # its group, and batch, named otherwise
EVIL = "../../../outside/evil"


def _forged(folder: Path, members, link: str | None = None, **manifest) -> Path:
    """A returned pack in `folder` of the archive members `members` (name, bytes pairs, in
    order: a name may come twice), its manifest listing its part truly unless `manifest`'s
    fields replace them."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        for name, content in members:
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
        if link:
            info = tarfile.TarInfo("runs/evil")
            info.type, info.linkname = tarfile.SYMTYPE, link
            tar.addfile(info)
    folder.mkdir(parents=True)
    part = data.getvalue()
    (folder / "study.tar.gz.00").write_bytes(part)
    (folder / "lease_study.json").write_text(json.dumps({"parts": [
        {"name": "study.tar.gz.00", "bytes": len(part),
         "sha256": hashlib.sha256(part).hexdigest()}], "updates": {}, **manifest}))
    return folder


def _members(packed: Path) -> list[tuple[str, bytes]]:
    """The archive members of the pack in `packed`, in order."""
    parts = sorted(packed.glob("study.tar.gz.*"))
    with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in parts))) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar.getmembers() if m.isfile()]


def _tree(root: Path) -> dict[str, str]:
    """Every path under `root` with its content's digest (`dir` for a folder)."""
    return {str(p.relative_to(root)): "dir" if p.is_dir() and not p.is_symlink()
            else hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))}


def _merge(returned: Path, local: Path) -> None:
    """`returned` merged into the study `local` whose experiment file is `tiny.toml` beside."""
    lease_study.merge(lease_records.read_pack(returned), local, local.parent / "tiny.toml")


def _one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert len(message.splitlines()) == 1 and message.isprintable(), message
    return message


@pytest.mark.parametrize("members,link", [
    ({"../escaped.txt": b"x"}, None),
    ({"/tmp/absolute.txt": b"x"}, None),
    ({"runs/../../escaped.txt": b"x"}, None),
    ({"experiment.toml": b"x"}, "/etc/passwd"),
])
def test_unpack_refuses_archives_that_reach_outside(tmp_path, members, link):
    returned = _forged(tmp_path / "returned", members.items(), link)
    target = tmp_path / "inside" / "target"
    with pytest.raises(ValueError, match="refused"):
        lease_pack.unpack(returned, target)
    assert not (tmp_path / "escaped.txt").exists() and not target.exists()
    assert not (tmp_path / "inside" / "escaped.txt").exists()


def test_unpack_refuses_altered_parts_and_existing_targets(tmp_path, runs):
    _, _, packed = runs[Episodes.CARRIED]
    copy = tmp_path / "copy"
    copy.mkdir()
    for p in packed.iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    with pytest.raises(ValueError, match="exists"):
        lease_pack.unpack(copy, runs["whole"])
    part = copy / "study.tar.gz.00"
    data = part.read_bytes()
    part.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(ValueError, match="size or digest"):
        lease_pack.unpack(copy, tmp_path / "target")
    manifest = json.loads((copy / "lease_study.json").read_text())
    manifest["parts"][0]["name"] = "../study.tar.gz.00"
    (copy / "lease_study.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="must name"):
        lease_pack.unpack(copy, tmp_path / "target")


def test_merge_refuses_a_manifest_naming_folders_outside_the_study(tmp_path, runs):
    """The returned manifest's `updates` names the batch folders that merging renames: a name
    that is not a batch of the study is refused, and nothing outside the study is touched."""
    _, _, packed = runs[Episodes.CARRIED]
    copy = tmp_path / "copy"
    shutil.copytree(packed, copy)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    manifest = json.loads((copy / "lease_study.json").read_text())
    manifest["updates"] = {"../../outside": 4}
    (copy / "lease_study.json").write_text(json.dumps(manifest))
    local = tmp_path / "study"
    lease_pack.unpack(packed, local)  # the study exists: merging would rename folders in it
    with pytest.raises(ValueError, match=NOT_OURS):
        _merge(copy, local)
    assert (outside / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy", "outside", "study"]


@pytest.fixture
def study(runs, tmp_path):
    """The study's own folder at period 1 (`tmp_path/study`, from the carried pack), the
    study's experiment file, and `tmp_path/outside` holding a file of someone's."""
    (tmp_path / "tiny.toml").write_text(TINY)
    lease_pack.unpack(runs[Episodes.CARRIED][2], tmp_path / "study")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "keep.txt").write_text("mine")
    return tmp_path / "study"


def _restart_pack(runs) -> tuple[list[tuple[str, bytes]], dict]:
    """The members and the manifest of the pack of the slice at period 1, episodes restarted."""
    packed = runs[Episodes.RESTART][2]
    return _members(packed), json.loads((packed / "lease_study.json").read_text())


def _renamed(members, old: str, new: str) -> list[tuple[str, bytes]]:
    return [(n, c.replace(old.encode(), new.encode()) if n == "sweep.json" else c)
            for n, c in members]


def _other_pack(runs, tmp_path: Path) -> Path:
    """A pack of another experiment's batch (the study has no such batch), with that
    experiment's own plan naming it, and the state of the study's batch."""
    from vaco_jax.experiment import parse_experiment, start_sweep

    (other,) = start_sweep(parse_experiment(OTHER, name="tiny"), tmp_path / "other").batches
    members, manifest = _restart_pack(runs)
    (ours,) = manifest["updates"]
    swapped = [(n.replace(ours, other.name), (tmp_path / "other" / n).read_bytes()
                if n in ("experiment.toml", "sweep.json") else c) for n, c in members]
    return _forged(tmp_path / "forged", swapped, updates={other.name: 2})


@pytest.mark.parametrize("forgery", ["evil", "other"])
def test_merge_checks_the_pack_against_the_study_s_own_plan(runs, study, tmp_path, forgery):
    """A pack naming a batch the study's own plan lacks (in its manifest and in the plan it
    carries, which is as untrusted as the rest) is refused in one line, nothing written: the
    study's plan decides, never the pack's."""
    if forgery == "evil":
        members, manifest = _restart_pack(runs)
        (ours,) = manifest["updates"]
        forged = _forged(tmp_path / "forged", _renamed(members, ours, EVIL), updates={EVIL: 2})
    else:
        forged = _other_pack(runs, tmp_path)
    before = _tree(tmp_path)
    with pytest.raises(ValueError, match=NOT_OURS) as refused:
        _merge(forged, study)
    _one_line(refused)
    assert _tree(tmp_path) == before


def test_collect_refuses_a_batch_the_study_lacks_with_one_line(runs, study, tmp_path,
                                                                monkeypatch, capsys):
    """Through the command: a non-zero exit, one line naming the batch, nothing written."""
    from benchmarks.campaign import gpu as gpu_campaign

    monkeypatch.setattr(lease_study, "LOCAL", study)
    for name in ("UPLOAD", "REPORT"):
        monkeypatch.setattr(lease_study, name, tmp_path / name.lower())
    monkeypatch.setattr(gpu_campaign, "DONE", tmp_path / "done")
    forged = _other_pack(runs, tmp_path)
    before = _tree(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        gpu_campaign.main(["--collect", str(forged), "--no-commit"])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert stopped.value.code == 2 and "not a batch of the study" in error
    assert _tree(tmp_path) == before


def test_a_pack_without_a_readable_status_merges_by_its_checkpoint_and_once(
        runs, study, tmp_path):
    """The pack's `status.json` of a batch missing (a call stopped between a checkpoint and its
    status) or damaged: the progress compared is the checkpoint's, so the pack is merged; the
    same pack collected again is refused in one line that says so."""
    whole = lease_pack.pack(runs["whole"], [b.name for b in (runs["whole"] / "runs").iterdir()],
                            Episodes.RESTART, tmp_path / "whole", {})
    (name,) = whole["updates"]
    members = [(n, b"{}" if n == f"runs/{name}/status.json" else c)
               for n, c in _members(tmp_path / "whole")]
    forged = _forged(tmp_path / "forged", members, updates=whole["updates"])
    _merge(forged, study)
    from vaco_jax.run.checkpoint import committed_steps

    assert committed_steps(study / "runs" / name / "checkpoint")[0] == 2
    before = _tree(tmp_path)
    with pytest.raises(ValueError, match="collected before") as refused:
        _merge(forged, study)
    assert name in _one_line(refused) and _tree(tmp_path) == before


@pytest.mark.parametrize("periods", ["1e400", "-3", "1000000", "1.5", "true", "\"1\""])
@pytest.mark.parametrize("first", [True, False], ids=["new study", "study"])
def test_merge_refuses_a_batch_state_out_of_the_plan_s_range(runs, study, tmp_path, periods,
                                                             first):
    """`state/<batch>.json` holds the checkpoint period the batch is rebuilt at: an integer
    within the batch's periods (2 here), or refused in one line, nothing written."""
    members, manifest = _restart_pack(runs)
    (name,) = manifest["updates"]
    members = [(n, b'{"periods": ' + periods.encode() + b"}"
                if n == f"state/{name}.json" else c) for n, c in members]
    forged = _forged(tmp_path / "forged", members, updates=manifest["updates"])
    local = tmp_path / "study" if first else study
    if first:
        shutil.rmtree(local)
    before = _tree(tmp_path)
    with pytest.raises(ValueError, match="periods") as refused:
        _merge(forged, local)
    _one_line(refused)
    assert _tree(tmp_path) == before


def test_unpack_refuses_a_member_written_twice(runs, tmp_path):
    members, manifest = _restart_pack(runs)
    forged = _forged(tmp_path / "forged", [*members, ("sweep.json", b"{}")],
                     updates=manifest["updates"])
    with pytest.raises(ValueError, match="twice") as refused:
        lease_pack.unpack(forged, tmp_path / "target")
    assert "sweep.json" in _one_line(refused) and not (tmp_path / "target").exists()


def test_unpack_compares_the_listed_byte_counts(runs, tmp_path):
    packed = runs[Episodes.RESTART][2]
    copy = tmp_path / "copy"
    shutil.copytree(packed, copy)
    manifest = json.loads((copy / "lease_study.json").read_text())
    manifest["parts"][0]["bytes"] += 1
    (copy / "lease_study.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="size or digest") as refused:
        lease_pack.unpack(copy, tmp_path / "target")
    _one_line(refused)
    assert not (tmp_path / "target").exists()


def test_unpack_writes_the_bytes_it_checked(runs, tmp_path, monkeypatch):
    """A part replaced right after its digest is checked: what is unpacked is what was
    checked, never what the file holds by then."""
    copy = tmp_path / "copy"
    shutil.copytree(runs[Episodes.RESTART][2], copy)
    members, _ = _restart_pack(runs)
    swapped = _forged(tmp_path / "swapped", [*members, ("evil.txt", b"swapped in")])
    part = copy / "study.tar.gz.00"
    checked, real = part.read_bytes(), hashlib.sha256

    def swapping(data=b"", **options):
        if data == checked:  # the part's digest taken: the file is swapped at once
            part.write_bytes((swapped / "study.tar.gz.00").read_bytes())
        return real(data, **options)

    monkeypatch.setattr(hashlib, "sha256", swapping)
    lease_pack.unpack(copy, tmp_path / "target")
    assert not (tmp_path / "target" / "evil.txt").exists()


# ----------------------------------------------------------------------------- planning
def _info(name, task="ant", done=0, runs=8, carried=3_000_000, restart=1_500_000):
    return BatchInfo(name, task, runs, done, 1550, 50, 65_536, carried, restart)


def test_next_slice_takes_the_first_task_furthest_behind_within_budget_and_time():
    batches = [_info("a1", done=50), _info("a2"), _info("a3"), _info("a4"), _info("h1", "humanoid")]
    budget = 2 * 8 * 1_500_000 + 1
    piece = lease_study.next_slice(batches, seconds=300, rates={"ant": 2e6}, budget=budget)
    # 2e6 x 300 s = 600M steps over 16 runs x 3.28M steps a period: 11 periods.
    assert piece == Slice(("a2", "a3"), 11 * 50, Episodes.RESTART)
    roomy = lease_study.next_slice(batches, 300, {"ant": 2e6}, budget=10 ** 9)
    assert roomy.episodes is Episodes.CARRIED and roomy.batches == ("a2", "a3", "a4")
    slow = lease_study.next_slice(batches, 1, {"ant": 1.0}, budget=budget)
    assert slow.until_updates == 50  # at least one period
    done = [_info(f"a{i}", done=1550) for i in range(3)] + [_info("h1", "humanoid", done=100)]
    assert lease_study.next_slice(done, 300, {}, budget).batches == ("h1",)
    assert lease_study.next_slice([_info("a", done=1550)], 300, {}, budget) is None
    with pytest.raises(ValueError, match="batch a1: one batch's state"):
        lease_study.next_slice([_info("a1")], 300, {}, budget=100)


def test_study_experiment_fits_a_batch_in_the_pack_budget():
    from vaco_jax.experiment import load_experiment

    study = load_experiment(lease_study.STUDY)
    assert [g.config.env for g in study.groups][:5] == ["ant"] * 5
    assert {g.config.algo for g in study.groups} == {
        "ppo", "ppo_recompute", "vaco", "vaco_filter_only", "vaco_realign_only"}
    assert {r.lag for r in study.groups[0].runs} == {0, 8, 16} and len(study.groups[0].runs) == 15
    assert study.groups[0].config.total_steps == 100_000_000


def test_plan_orders_each_lease_study_first_then_open_steps_then_peers():
    from benchmarks.campaign import gpu as gpu_campaign

    steps = gpu_campaign.steps_for(gpu_campaign.SIZES["gpu"])
    names = [s.name for s in steps]
    order = ["study", "seeds", "sweep_groups", "tokens_seeds", "tokens_capacity", "sweep_plan",
             "peers"]
    assert [n for n in names if n in order] == order
    text = gpu_campaign.plan_text(steps, done={"setup": 8.0, "seeds": 166.0, "tokens": 287.0})
    calls = [line for line in text.splitlines() if line.startswith("call:")]
    assert calls[0] == "call: bash benchmarks/campaign/gpu_campaign.sh study"
    listed = " ".join(calls).split()
    assert [n for n in listed if n in order] == [n for n in order if n != "seeds"]
    # The study runs at every lease: a record of it never marks it done.
    assert "study" in gpu_campaign.RECURRING and "study" not in gpu_campaign.done_steps(
        gpu_campaign.DONE)
