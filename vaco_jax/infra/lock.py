"""One process at a time per folder: an exclusive lock on every run, sweep and report folder.

The lock is an advisory `flock` on `.vaco_jax.lock` in the folder, taken before anything is
written there and held for the process's life: the kernel releases it however the process ends
(kill -9 included), so a lock file left behind by a dead process is recognised as stale and
taken over. The file holds who took the lock (process, host, command, time), for the message of
a refusal. Locks are reentrant within a process, so a sweep that holds its folder may rewrite
its report there. A folder may come from someone else: the lock file is opened without following
a link and must be a plain file of one name, so that taking the lock writes nothing elsewhere.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import shlex
import socket
import stat
import sys
import threading
from pathlib import Path
from typing import Iterator

from vaco_jax.infra import records

LOCK_FILE = ".vaco_jax.lock"


class FolderInUse(FileExistsError):
    """Another live process holds the folder's lock."""


_held: dict[str, tuple] = {}  # real path -> (file descriptor, lock path, the folder if it made it)
_guard = threading.Lock()  # `_held` is changed by the main thread and read by the signal watcher


def _holder_text(record: dict | None) -> str:
    if not record:
        return "another process"
    pid, host, command, since = (records.shown(record.get(k), 300)
                                 for k in ("pid", "host", "command", "since"))
    return f"process {pid} on host {host!r} (`{command}`, since {since})"


def _read_record(fd: int) -> dict | None:
    """The lock's record, or None where there is none to read (JSON nested too deeply too)."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = os.read(fd, records.LOCK_RECORD.max_bytes)
        record = records.parse_json(data or b"null", "lock record", records.LOCK_RECORD).value
        return record if isinstance(record, dict) else None
    except (OSError, ValueError):
        return None


def _own_record() -> dict:
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    program = "vaco-jax" if program == "__main__.py" else program  # python -m vaco_jax.cli
    return {"pid": os.getpid(), "host": socket.gethostname(),
            "command": shlex.join([program, *sys.argv[1:]])[:300],
            "since": datetime.datetime.now().isoformat(timespec="seconds")}


def _pid_alive(pid: object) -> bool:
    if not isinstance(pid, int):
        return True  # cannot tell: assume it runs
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a fifo must not block the open


def _open_lock_file(folder: Path) -> int:
    """The folder's lock file opened for writing (created if missing), refusing (ValueError) one
    that is not a plain file of one name: a link, a pipe, a folder, a hard link to another file."""
    path = folder / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _OPEN_FLAGS, 0o644)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise ValueError(f"cannot lock {str(folder)!r}: {str(path)!r} is not a plain file "
                             f"(a link, a folder or a pipe), and vaco_jax keeps its lock there; "
                             f"remove it, or choose another folder") from None
        raise ValueError(f"cannot lock {str(folder)!r}: cannot write {str(path)!r} "
                         f"({error.strerror}); make the folder writable, or choose another "
                         f"folder") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        what = "has other names (hard links)" if stat.S_ISREG(info.st_mode) else "is not a file"
        raise ValueError(f"cannot lock {str(folder)!r}: {str(path)!r} {what}, and vaco_jax "
                         f"writes its lock record there; remove it, or choose another folder")
    return fd


def _acquire(folder: Path) -> int:
    """An open descriptor of the folder's lock file, locked by this process."""
    path = folder / LOCK_FILE
    while True:
        fd = _open_lock_file(folder)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder_text(_read_record(fd))
            os.close(fd)
            raise FolderInUse(f"{str(folder)!r} is in use by {holder}; only one vaco-jax process "
                              f"may write a folder: wait for it to end or stop it") from None
        except OSError as error:  # a file system without flock: tell liveness by the record
            if error.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                os.close(fd)
                raise
            _refuse_live_record(folder, fd)
        try:
            same = os.fstat(fd).st_ino == os.lstat(path).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # its holder removed the file on release after we opened it: again
            os.close(fd)
            continue
        stale = _read_record(fd)
        if stale:
            # The kernel's lock is free, so whatever the record names does not hold it: say
            # that it ended only where that can be seen.
            ended = (stale.get("host") == socket.gethostname()
                     and not _pid_alive(stale.get("pid")))
            print(f"warning: taking over the lock of {str(folder)!r} left by "
                  f"{_holder_text(stale)}, "
                  + ("which has ended without releasing it" if ended else
                     "which does not hold it (a stale record)"), file=sys.stderr, flush=True)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(_own_record()) + "\n").encode("utf-8"), 0)
        except OSError as error:  # an immutable or full file system's file
            os.close(fd)
            raise ValueError(f"cannot lock {str(folder)!r}: cannot write "
                             f"{str(path)!r} ({error.strerror}); make it writable, or choose "
                             f"another folder") from None
        return fd


def _refuse_live_record(folder: Path, fd: int) -> None:
    record = _read_record(fd)
    if not record:
        return
    same_host = record.get("host") == socket.gethostname()
    if same_host and not _pid_alive(record.get("pid")):
        return
    os.close(fd)
    where = "" if same_host else (f"; if that process has ended, remove "
                                  f"{str(folder / LOCK_FILE)!r}")
    raise FolderInUse(f"{str(folder)!r} is in use by {_holder_text(record)}; only one vaco-jax "
                      f"process may write a folder: wait for it to end or stop it{where}")


def refuse_if_in_use(folder: str | os.PathLike) -> None:
    """Refuses (`FolderInUse`) a folder another live process holds, without creating, locking
    or writing anything there (a folder that is only read, perhaps read-only)."""
    path = Path(folder) / LOCK_FILE
    if os.path.realpath(folder) in _held:
        return
    try:
        fd = os.open(path, os.O_RDONLY | _OPEN_FLAGS)
    except OSError:
        return  # no lock file (or a link, which no vaco-jax process locks): nobody holds it
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return  # no vaco-jax process locks anything but a file
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise FolderInUse(f"{str(folder)!r} is in use by {_holder_text(_read_record(fd))}; "
                          f"wait for it to end before reading it") from None
    except OSError:
        pass  # a file system without flock: nothing to tell
    finally:
        os.close(fd)


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike) -> Iterator[Path]:
    """Holds the exclusive lock of `folder` (created if missing, and removed again on release
    if this lock created it and it stayed empty); `FolderInUse` if a live process holds it."""
    folder = Path(folder)
    key = os.path.realpath(folder)
    if key in _held:  # held by this process already: an inner block of the same owner
        yield folder
        return
    created = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ValueError(f"cannot create output folder {str(folder)!r} ({error.strerror}); "
                         f"choose another folder") from None
    fd = _acquire(folder)
    with _guard:
        _held[key] = (fd, folder / LOCK_FILE, folder if created else None)
    try:
        yield folder
    finally:
        _release(key)


def _release(key: str) -> None:
    with _guard:
        fd, path, created = _held.pop(key)
        with contextlib.suppress(OSError):
            os.unlink(path)  # before unlocking, so a waiting process re-checks the file it opened
        os.close(fd)
    if created is not None:
        with contextlib.suppress(OSError):
            created.rmdir()  # only if nothing was written


def disown_all() -> None:
    """Blanks the record of every lock this process holds, as it exits at once on a signal: the
    kernel releases the locks with the process, and the next process takes them over silently
    (a blank record tells of no process that ended without releasing its lock)."""
    with _guard:
        for fd, _, _ in _held.values():
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
