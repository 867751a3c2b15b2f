"""Observing a sandbox around a folder under test: every path, content, mode and link target
hashed, so a test can show that a command reached nothing outside the folder; and the one line
a command refused with."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import stat
from pathlib import Path
from typing import Callable, Iterator

from vaco_jax import cli


class Hung(BaseException):
    """An operation blocked (a BaseException, so that no `except Exception` swallows it)."""


@contextlib.contextmanager
def bounded(seconds: float = 20.0) -> Iterator[None]:
    """Fails an operation that blocks (opening a named pipe, reading from one) for `seconds`."""
    def alarm(signum, frame):
        raise Hung(f"the operation blocked for {seconds} s")
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def digest(path: Path) -> str:
    with bounded(5):
        return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(root: Path, skip: Callable[[str], bool] = lambda rel: False) -> dict[str, tuple]:
    """Every path under `root` (relative; `root` itself is ""), links not followed: a file's
    type, mode, modification time, inode, size and digest; a link's target; a folder's mode and
    modification time (a name added or removed there changes it); another file's type and mode."""
    found: dict[str, tuple] = {}

    def visit(path: Path, rel: str) -> None:
        if skip(rel):
            return
        info = os.lstat(path)
        common = (stat.S_IFMT(info.st_mode), stat.S_IMODE(info.st_mode), info.st_mtime_ns)
        if stat.S_ISLNK(info.st_mode):
            found[rel] = ("link", os.readlink(path))
        elif stat.S_ISREG(info.st_mode):
            found[rel] = (*common, info.st_ino, info.st_size, digest(path))
        elif stat.S_ISDIR(info.st_mode):
            found[rel] = common
            for name in sorted(os.listdir(path)):
                visit(path / name, f"{rel}/{name}" if rel else name)
        else:
            found[rel] = common
    visit(root, "")
    return found


def contents(shot: dict[str, tuple], own_locks: set[str]) -> dict[str, tuple]:
    """A snapshot of the folder under test as its contents: folders without their modification
    times (taking and releasing a lock adds and removes a name), and without the lock files
    that were plain files (released, hence removed, by the operation)."""
    return {rel: (value[:2] if value[0] == stat.S_IFDIR else value)
            for rel, value in shot.items() if rel not in own_locks}


def surroundings_of(root: Path, folder: Path) -> dict[str, tuple]:
    rel = folder.relative_to(root).as_posix()
    shot = snapshot(root, skip=lambda r: r == rel or r.startswith(rel + "/"))
    shot[""] = shot[""][:2]
    return shot


def refused(capsys, argv: list[str]) -> str:
    """The one line a command refused with (exit status 2)."""
    code = cli.main(argv)
    captured = capsys.readouterr()
    assert code == 2, f"exit status {code}; stdout {captured.out[-400:]!r}; stderr {captured.err!r}"
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, f"not one line: {captured.err!r}"
    return lines[0]


def finished_sweep(folder: Path, experiment: str) -> Path:
    """`folder/sweep`: the sweep of the experiment text `experiment`, run to its end."""
    (folder / "experiment.toml").write_text(experiment)
    assert cli.main(["sweep", str(folder / "experiment.toml"), "--out", str(folder / "sweep"),
                     "--no-progress"]) == 0
    return folder / "sweep"
