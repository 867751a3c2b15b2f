"""One run or sweep over several processes with `jax.distributed`: starting it from the command
line, and the collectives that keep its processes in step.

`vaco-jax sweep` and the training commands take the coordinator, the process count and this
process's id from `--coordinator HOST:PORT --num-processes N --process-id I` or from
`VACO_JAX_COORDINATOR`, `VACO_JAX_NUM_PROCESSES` and `VACO_JAX_PROCESS_ID` (a flag wins over
its variable), or `--distributed auto` (or `VACO_JAX_DISTRIBUTED=auto`), which leaves them to
`jax.distributed.initialize()`'s own detection (SLURM, Cloud TPU, Open MPI; JAX's own
`JAX_COORDINATOR_ADDRESS` ...). `initialize` runs before any other JAX call: importing vaco_jax
and parsing its flags start no JAX backend.

Every process then runs the same program on the same runs, each device of the global mesh
training its share (`vaco_jax.run.driver`). Only process 0 touches the output folder: it locks
it, plans, reads what a resume needs, writes every file and checkpoint; the others receive what
it read through `from_process_0` and `shared_from_process_0`, so no shared file system is
needed and no process decides from a file another one is writing. The processes make the same
collective calls in the same order, else they hang (every decision that ends or skips work is
made identically on all of them: from gathered metrics, from process 0's reading, or from
`agreed_signal`). The collectives used are all-gathers and all-reduces, which wait for a late
process as long as XLA's CPU collective timeout allows (a reduce-scatter would give up after
30 s on CPU). When a process dies, the others fail at their next collective with
`ProcessLost`; the folder holds complete files only, and `--resume` continues it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any, Callable, Mapping, TypeVar

import jax
import numpy as np
from jax.experimental import multihost_utils

from vaco_jax.infra import records
from vaco_jax.infra.io import jsonable

ENV_COORDINATOR = "VACO_JAX_COORDINATOR"
ENV_NUM_PROCESSES = "VACO_JAX_NUM_PROCESSES"
ENV_PROCESS_ID = "VACO_JAX_PROCESS_ID"
ENV_DISTRIBUTED = "VACO_JAX_DISTRIBUTED"
AUTO = "auto"
FLAGS = ("distributed", "coordinator", "num_processes", "process_id")
"""The `dest`s of the flags `add_flags` adds."""

T = TypeVar("T")


class ProcessLost(ConnectionError):
    """Another process of the run stopped or failed: a collective could not complete."""


@dataclasses.dataclass(frozen=True)
class Launch:
    """How this process joins the run: `auto` (JAX's detection) or the three settings."""

    auto: bool = False
    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None


def add_flags(p) -> None:
    """`--distributed auto`, `--coordinator`, `--num-processes` and `--process-id`."""
    p.add_argument("--distributed", choices=(AUTO,), default=None,
                   help=f"one run over several processes, jax.distributed's settings detected "
                        f"(SLURM, Cloud TPU); docs/multi_process.md (default: "
                        f"${ENV_DISTRIBUTED}, else one process or --coordinator's)")
    p.add_argument("--coordinator", metavar="HOST:PORT", default=None,
                   help=f"one run over several processes: process 0's address, the same for "
                        f"all; with --num-processes and --process-id (default: "
                        f"${ENV_COORDINATOR}, else one process)")
    p.add_argument("--num-processes", metavar="N", default=None,
                   help=f"with --coordinator: the number of processes (default: "
                        f"${ENV_NUM_PROCESSES})")
    p.add_argument("--process-id", metavar="I", default=None,
                   help=f"with --coordinator: this process's id, 0..N-1; process 0 writes the "
                        f"results (default: ${ENV_PROCESS_ID})")


def launch_settings(args: Any, environ: Mapping[str, str] = os.environ) -> Launch | None:
    """The settings of the flags of `add_flags` (each falling back to its variable), None for
    a single process; refuses (ValueError) a bad or incomplete combination."""
    def given(flag: str, env: str) -> str | None:
        value = getattr(args, flag, None)
        return value if value is not None else (environ.get(env) or None)

    auto = given("distributed", ENV_DISTRIBUTED)
    explicit = {"--coordinator": given("coordinator", ENV_COORDINATOR),
                "--num-processes": given("num_processes", ENV_NUM_PROCESSES),
                "--process-id": given("process_id", ENV_PROCESS_ID)}
    named = [flag for flag, value in explicit.items() if value is not None]
    if auto is not None:
        if auto != AUTO:
            raise ValueError(f"--distributed must be {AUTO} (${ENV_DISTRIBUTED}), got {auto!r}")
        if named:
            raise ValueError(f"--distributed auto detects the coordinator, process count and "
                             f"process id: leave {', '.join(named)} out")
        return Launch(auto=True)
    if not named:
        return None
    if len(named) < len(explicit):
        missing = [flag for flag in explicit if flag not in named]
        raise ValueError(f"{', '.join(named)} needs {' and '.join(missing)} too: a process joins "
                         f"a run with --coordinator HOST:PORT --num-processes N --process-id I "
                         f"(or ${ENV_COORDINATOR}, ${ENV_NUM_PROCESSES}, ${ENV_PROCESS_ID}), or "
                         f"with --distributed auto")
    coordinator = explicit["--coordinator"]
    match = re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[^\s:]+):(\d+)", coordinator)
    if match is None or not 1 <= int(match[2]) <= 65535:
        raise ValueError(f"--coordinator must be HOST:PORT with PORT in 1..65535 (e.g. "
                         f"node1:5000), got {coordinator!r}")
    count = _integer("--num-processes", explicit["--num-processes"], 1, None)
    index = _integer("--process-id", explicit["--process-id"], 0, count - 1)
    return Launch(coordinator=coordinator, num_processes=count, process_id=index)


def _integer(flag: str, text: str, low: int, high: int | None) -> int:
    allowed = f"{low}..{high}" if high is not None else f"at least {low}"
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value > high):
        raise ValueError(f"{flag} must be an integer {allowed}, got {text!r}")
    return value


def initialize(launch: Launch | None) -> None:
    """Joins the run `launch` describes (nothing for None); before any other JAX call."""
    if launch is None:
        return
    # JAX's preemption service would take SIGTERM for itself, and the processes would no longer
    # stop after their chunk (`vaco_jax.run.signals`, `agreed_signal`).
    jax.config.update("jax_enable_preemption_service", False)
    if launch.auto:
        jax.distributed.initialize()
    else:
        jax.distributed.initialize(coordinator_address=launch.coordinator,
                                   num_processes=launch.num_processes,
                                   process_id=launch.process_id)


def several() -> bool:
    """Whether this run spans several processes."""
    return jax.process_count() > 1


def is_writer() -> bool:
    """Whether this process writes files: process 0 (the only one of a single-process run)."""
    return jax.process_index() == 0


def _collective(call: Callable[[], T]) -> T:
    """`call()`, a collective, with the failure of a peer reported as `ProcessLost`."""
    try:
        return call()
    except (RuntimeError, ValueError) as error:
        first = (str(error).strip().splitlines() or [""])[0][:300]
        raise ProcessLost(f"another process of this run stopped or failed ({first}); every file "
                          f"written is complete: continue with --resume") from error


def host_copy(x: Any) -> np.ndarray:
    """All of an array as NumPy on every process: a runs-sharded array is gathered across
    processes (a collective)."""
    if several():
        return _collective(lambda: np.asarray(multihost_utils.process_allgather(x, tiled=True)))
    return np.asarray(x)


def shared_from_process_0(tree: Any) -> Any:
    """Process 0's `tree` of NumPy arrays on every process, bit for bit (each leaf travels as
    bytes, so no sum with the others' zeros can turn -0.0 into 0.0); the others pass a tree of
    the same shapes and dtypes."""
    if not several():
        return tree
    leaves, structure = jax.tree.flatten(tree)
    arrays = [np.ascontiguousarray(leaf) for leaf in leaves]
    sent = [a.reshape(-1).view(np.uint8) if is_writer() else np.zeros(a.nbytes, np.uint8)
            for a in arrays]
    received = _collective(lambda: multihost_utils.broadcast_one_to_all(sent))
    # Copies: what JAX hands back is read-only, and a restored run writes into its metrics.
    return jax.tree.unflatten(structure, [np.array(r).view(a.dtype).reshape(a.shape)
                                          for r, a in zip(received, arrays)])


def from_process_0(compute: Callable[[], Any]) -> Any:
    """`compute()` as process 0 computes it, on every process (the others do not call it); an
    error it raises is raised on every process, as its type where that is a refusal, else as
    RuntimeError, with its message. Across processes the value travels as JSON, and process 0
    too continues with the value read back, so that all continue alike; a single process keeps
    it as it is."""
    if not several():
        return compute()
    text, failure = b"", None
    if is_writer():
        try:
            text = json.dumps({"value": compute()}, default=jsonable).encode()
        except Exception as error:  # re-raised below, once the others have it too
            failure = error
            kind = next((k.__name__ for k in REFUSALS if isinstance(error, k)), "RuntimeError")
            text = json.dumps({"error": kind, "message": str(error)}).encode()
    size = int(_collective(lambda: multihost_utils.broadcast_one_to_all(np.int32(len(text)))))
    payload = np.frombuffer(text, np.uint8) if is_writer() else np.zeros(size, np.uint8)
    received = records.parse_json(bytes(shared_from_process_0(payload)), "process 0's message",
                                  records.PROCESS_MESSAGE).value
    if failure is not None:
        raise failure
    if "error" in received:
        raise {k.__name__: k for k in REFUSALS}.get(received["error"], RuntimeError)(
            received["message"])
    return received["value"]


REFUSALS: tuple[type[Exception], ...] = (FileExistsError, FileNotFoundError, OSError, ValueError)
"""The errors `from_process_0` raises on the other processes as the kind they are (the first
listed that fits): those the command line reports as a refusal or a failed write."""


def agreed_signal(signum: int | None) -> int | None:
    """The stop signal any process received (the lowest process id's), None if none did: every
    process stops at the same chunk though a signal reached only some (a collective)."""
    if not several():
        return signum
    signals = _collective(lambda: multihost_utils.process_allgather(np.int32(signum or 0)))
    return next((int(s) for s in np.asarray(signals).reshape(-1) if s), None)
