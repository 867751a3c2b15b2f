"""`vaco-jax` in child processes, for tests that kill, stop or race whole processes, or run
one run as several processes."""

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vaco_jax.infra.faults import FAULT_ENV

ROOT = Path(__file__).resolve().parents[1]


def vaco_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "vaco_jax.cli", *args]


def vaco_env(cache: Path, fault: str | None = None) -> dict[str, str]:
    """The environment of a child: this checkout first on the path, the compilation cache
    `cache` shared (so only the first child compiles), and the fault `SIGNAL@POINT:STEP` to
    inject, if any."""
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env.update(JAX_COMPILATION_CACHE_DIR=str(cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    if fault is not None:
        env[FAULT_ENV] = fault
    return env


def free_port() -> int:
    """A TCP port free on this machine now (bound to port 0, then released)."""
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def with_devices(env: dict[str, str], count: int) -> dict[str, str]:
    """`env` with `count` CPU devices forced, the other XLA flags kept."""
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "host_platform_device_count" not in f]
    return {**env, "XLA_FLAGS": " ".join([*flags, f"--xla_force_host_platform_device_count={count}"])}


def vaco_processes(args: list[str], count: int, cache: Path, devices_each: int = 1,
                   faults: dict[int, str] | None = None,
                   timeout: float = 300) -> list[subprocess.CompletedProcess]:
    """`vaco-jax ARGS` as `count` processes of one run on this machine (a coordinator on a free
    port), each with `devices_each` CPU devices and process I with the fault `faults[I]`; all
    are killed when one exceeds `timeout` seconds, so a hang fails instead of waiting. Their
    output goes to files, not pipes: a full pipe would stall a process its peers wait for."""
    coordinator = f"localhost:{free_port()}"
    with contextlib.ExitStack() as files:
        outputs = [(files.enter_context(tempfile.TemporaryFile("w+")),
                    files.enter_context(tempfile.TemporaryFile("w+"))) for _ in range(count)]
        children = [subprocess.Popen(
            vaco_command(*args, "--coordinator", coordinator, "--num-processes", str(count),
                         "--process-id", str(index)),
            env=with_devices(vaco_env(cache, (faults or {}).get(index)), devices_each),
            stdout=stdout, stderr=stderr, text=True)
            for index, (stdout, stderr) in enumerate(outputs)]
        deadline = time.monotonic() + timeout
        try:
            for child in children:
                child.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.wait()
        done = []
        for child, (stdout, stderr) in zip(children, outputs):
            stdout.seek(0)
            stderr.seek(0)
            done.append(subprocess.CompletedProcess(child.args, child.returncode, stdout.read(),
                                                    stderr.read()))
        return done
