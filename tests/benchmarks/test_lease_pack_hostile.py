"""Hostile lease packs: a pack that came back from a GPU call is untrusted input, and nothing it
holds may make `--collect` write outside the study's folder, or fail but in one line.

The property tests forge packs from a real one (a tiny study's first slice): batch names that
climb out through `..`, are absolute, hold a newline or a terminal escape, or are too long, in
the manifest, the archive's member names and the plan it carries; members written twice, links,
members dropped or foreign; byte counts, digests and part names that lie; batch states out of
the plan's range or not integers; huge and non-finite numbers anywhere the manifest holds one.
Each is merged into the study's own folder (which has the batch, not started), merged as the
study's first pack (no folder yet), and unpacked: every command must leave everything outside
its own folder exactly as it was (names, contents, link targets), refuse with nothing but a
ValueError of one printable line, and leave its folder as it was when it refuses.

`HOSTILE_EXAMPLES=200` runs more examples.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_configs import TOY_EXPERIMENT

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `benchmarks/` is a folder of scripts beside the package

from benchmarks.campaign import pack as lease_pack  # noqa: E402
from benchmarks.campaign import records as lease_records  # noqa: E402
from benchmarks.campaign import study as lease_study  # noqa: E402
from benchmarks.campaign.records import Episodes  # noqa: E402

TINY = TOY_EXPERIMENT.replace("tv_delta = [0.1, 0.3]", "tv_delta = 0.2")
PROPERTY = settings(max_examples=int(os.environ.get("HOSTILE_EXAMPLES", 15)), deadline=None,
                    database=None, suppress_health_check=[HealthCheck.too_slow])
VICTIMS = {"outside/keep.txt": "mine", "outside/evil/keep.txt": "mine too", "far.txt": "far"}
# Names a forged batch, member or part may take: leading outside, not plain, or plain but no
# batch of the study's.
HOSTILE_NAMES = ["..", ".", "", "../outside", "../../outside/evil", "../../../far",
                 "/tmp/absolute", "{sbx}/outside", "a/../../outside", "./x", "a//b", "x/",
                 "line\nbreak", "escape\x1b[31m", "nul\0", "x" * 300, "back\\slash",
                 "toy_reach-vaco-e2m2-1", "toy_reach-vaco-e1m2-0", "evil"]
HUGE = [10 ** 30, -(10 ** 30), 2 ** 63, -3, 1e300, float("inf"), float("-inf"), float("nan"),
        1.5, True, None, "2", [], {}]


@dataclasses.dataclass(frozen=True)
class Original:
    """The real pack forged from: its archive's members, its manifest, its one batch."""

    members: tuple[tuple[str, bytes], ...] = dataclasses.field(repr=False)
    manifest: dict[str, Any] = dataclasses.field(repr=False)
    batch: str
    study: Path  # the study's folder, planned but not started


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> Original:
    from vaco_jax.experiment import parse_experiment, run_sweep, start_sweep

    tmp = tmp_path_factory.mktemp("hostile-pack")
    experiment = parse_experiment(TINY, name="tiny")
    plan = start_sweep(experiment, tmp / "sliced")
    run_sweep(plan, tmp / "sliced", progress=False, until_updates=2)
    (batch,) = [b.name for b in plan.batches]
    slice_ = lease_records.Slice((batch,), 2, Episodes.RESTART)
    manifest = lease_pack.pack(tmp / "sliced", [batch], Episodes.RESTART, tmp / "pack",
                               {"slice": slice_.to_json(), "device": "cpu",
                                "rates": {"toy_reach": 1e5}, "wall_s": 1.0})
    parts = b"".join((tmp / "pack" / p["name"]).read_bytes() for p in manifest["parts"])
    with tarfile.open(fileobj=io.BytesIO(parts)) as tar:
        members = tuple((m.name, tar.extractfile(m).read()) for m in tar.getmembers())
    start_sweep(experiment, tmp / "study")
    return Original(members, manifest, batch, tmp / "study")


# ---------------------------------------------------------------- forging


@dataclasses.dataclass
class Forgery:
    """A pack being forged: members (a link's data is its target, as `link:TARGET`), the
    manifest, and edits of the manifest's parts once the archive is made."""

    members: list[tuple[str, bytes]]
    manifest: dict[str, Any]
    part_edits: list[Callable[[dict[str, Any]], None]] = dataclasses.field(default_factory=list)


def _name(sbx: Path) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(HOSTILE_NAMES), st.text(max_size=12)).map(
        lambda n: n.replace("{sbx}", str(sbx)))


def _rename(draw, forgery: Forgery, batch: str, sbx: Path) -> None:
    """The batch renamed in the manifest, the member names and the plan, or some of them."""
    name = draw(_name(sbx))
    places = draw(st.sets(st.sampled_from(["updates", "members", "plan"]), min_size=1))
    if "updates" in places:
        forgery.manifest["updates"] = {name: v for v in forgery.manifest["updates"].values()}
    forgery.members = [
        (n.replace(batch, name) if "members" in places else n,
         data.replace(batch.encode(), json.dumps(name)[1:-1].encode())
         if "plan" in places and n == "sweep.json" else data)
        for n, data in forgery.members]


def _edit_member(draw, forgery: Forgery, batch: str, sbx: Path) -> None:
    """A member added (a duplicate, a climbing name, a link), dropped or its content replaced
    (a batch's state out of range, a config or arrays that are not the batch's)."""
    names = [n for n, _ in forgery.members]
    how = draw(st.sampled_from(["duplicate", "add", "link", "drop", "state", "content"]))
    junk = draw(st.sampled_from([b"{}", b"[]", b"not json", b"\x00" * 8, b'{"periods": 1}']))
    if how == "duplicate":
        forgery.members.append((draw(st.sampled_from(names)), junk))
    elif how == "add":
        forgery.members.append((draw(_name(sbx)), junk))
    elif how == "link":
        target = draw(st.sampled_from(["../../outside/keep.txt", f"{sbx}/far.txt", "/etc"]))
        forgery.members.append((draw(st.sampled_from([f"runs/{batch}/evil", "evil", *names])),
                                f"link:{target}".encode()))
    elif how == "drop":
        forgery.members.pop(draw(st.integers(0, len(names) - 1)))
    elif how == "state":
        periods = draw(st.one_of(st.sampled_from(["1e400", "-1e400", "NaN", "-3", "1000000",
                                                  "2", "0", '"1"', "true", "null"]),
                                 st.integers(-(10 ** 40), 10 ** 40).map(str)))
        forgery.members = [(n, f'{{"periods": {periods}}}'.encode()
                            if n == f"state/{batch}.json" else d) for n, d in forgery.members]
    else:
        target = draw(st.sampled_from(names))
        forgery.members = [(n, junk if n == target else d) for n, d in forgery.members]


def _edit_manifest(draw, forgery: Forgery, batch: str, sbx: Path) -> None:
    """A number of the manifest made huge, negative, non-finite or not a number; a part's
    byte count, digest or name made to lie."""
    value = draw(st.sampled_from(HUGE))
    where = draw(st.sampled_from(["updates", "until", "rates", "wall_s", "bytes", "sha256",
                                  "name", "parts"]))
    if where == "updates":
        forgery.manifest["updates"] = {batch: value}
    elif where == "until":
        forgery.manifest["slice"] = {**forgery.manifest["slice"], "until_updates": value}
    elif where == "rates":
        forgery.manifest["rates"] = {"toy_reach": value}
    elif where == "wall_s":
        forgery.manifest["wall_s"] = value
    elif where == "parts":
        forgery.manifest["parts"] = value
    else:
        forged = {"bytes": draw(st.sampled_from([value, 0, 1, 16 << 20, "x"])),
                  "sha256": draw(st.sampled_from([value, "0" * 64, "z" * 64, "abc"])),
                  "name": draw(_name(sbx))}[where]
        forgery.part_edits.append(lambda part: part.update({where: forged}))


EDITS = [_rename, _edit_member, _edit_manifest]


@st.composite
def forgeries(draw, original: Original, sbx: Path) -> Forgery:
    forgery = Forgery(list(original.members), json.loads(json.dumps(original.manifest)))
    for edit in draw(st.lists(st.sampled_from(EDITS), min_size=1, max_size=2)):
        edit(draw, forgery, original.batch, sbx)
    return forgery


def write_pack(forgery: Forgery, folder: Path) -> None:
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, data in forgery.members:
            info = tarfile.TarInfo(name)
            if data.startswith(b"link:"):
                info.type, info.linkname = tarfile.SYMTYPE, data[5:].decode()
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    data = archive.getvalue()
    folder.mkdir(parents=True)
    (folder / "study.tar.gz.00").write_bytes(data)
    part = {"name": "study.tar.gz.00", "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest()}
    for edit in forgery.part_edits:
        edit(part)
    manifest = {**forgery.manifest, "parts": [part]} if isinstance(
        forgery.manifest.get("parts"), list) else forgery.manifest
    (folder / "lease_study.json").write_text(json.dumps(manifest))


# ---------------------------------------------------------------- observing


def snapshot(base: Path, skip: str) -> dict[str, tuple]:
    """Every path under `base` but `skip` (a folder, relative) and what it holds: a file's
    digest, a link's target, a folder's kind; links are never followed."""
    shot = {}
    for folder, dirs, files in os.walk(base):
        for name in dirs + files:
            path = Path(folder) / name
            rel = str(path.relative_to(base))
            if rel == skip or rel.startswith(skip + "/"):
                continue
            if path.is_symlink():
                shot[rel] = ("link", os.readlink(path))
            elif path.is_file():
                shot[rel] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
            else:
                shot[rel] = ("dir",)
    return shot


def refusal(command: Callable[[], Any]) -> str | None:
    """The one printable line a command refused with (a ValueError), or None: it succeeded.
    Anything else fails the test."""
    try:
        command()
    except ValueError as error:
        message = str(error)
        assert len(message.splitlines()) == 1 and message.isprintable(), \
            f"{type(error).__name__} not one line of plain characters: {message!r}"
        return message
    return None


def check(base: Path, folder: str, command: Callable[[], Any]) -> None:
    """`command` writes into `base/folder` at most: everything else is as it was, and so is
    its folder when it refuses."""
    around, inside = snapshot(base, folder), snapshot(base / folder, "\0")
    refused = refusal(command)
    assert snapshot(base, folder) == around
    if refused is not None:
        assert snapshot(base / folder, "\0") == inside, refused


@contextlib.contextmanager
def sandbox() -> Iterator[Path]:
    """A fresh base folder holding the victims, per example, removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="hostile-pack-"))
    try:
        for rel, text in VICTIMS.items():
            (base / rel).parent.mkdir(parents=True, exist_ok=True)
            (base / rel).write_text(text)
        yield base
    finally:
        shutil.rmtree(base)


# ---------------------------------------------------------------- the properties


@PROPERTY
@given(data=st.data())
def test_a_hostile_pack_changes_nothing_outside_the_study(original, data):
    with sandbox() as base:
        sbx = base / "sbx"
        write_pack(data.draw(forgeries(original, sbx)), sbx / "returned")
        shutil.copytree(original.study, sbx / "study")
        (sbx / "tiny.toml").write_text(TINY)

        def merge(local: Path) -> None:
            lease_study.merge(lease_records.read_pack(sbx / "returned"), local, sbx / "tiny.toml")

        check(base, "sbx/study", lambda: merge(sbx / "study"))
        check(base, "sbx/first", lambda: merge(sbx / "first"))
        check(base, "sbx/target", lambda: lease_pack.unpack(sbx / "returned", sbx / "target"))


def test_the_pack_forged_from_merges_and_unpacks(original, tmp_path):
    """The forgeries start from a pack that every command takes: a refusal above is the
    forgery's doing."""
    write_pack(Forgery(list(original.members), original.manifest), tmp_path / "returned")
    shutil.copytree(original.study, tmp_path / "study")
    (tmp_path / "tiny.toml").write_text(TINY)
    pack = lease_records.read_pack(tmp_path / "returned")
    assert lease_study.merge(pack, tmp_path / "study", tmp_path / "tiny.toml").updates == {
        original.batch: 2}
    lease_study.merge(pack, tmp_path / "first", tmp_path / "tiny.toml")
    lease_pack.unpack(tmp_path / "returned", tmp_path / "target")
    assert all((tmp_path / f / "runs" / original.batch / "checkpoint" / "1").is_dir()
               for f in ("study", "first", "target"))
