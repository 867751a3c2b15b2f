"""Orbax confined to the process that calls it.

Orbax waits at barriers for every process of a `jax.distributed` run unless told otherwise.
vaco_jax's checkpoints and warm starts are each written and read by one process on its own (the
run's process 0, or every process for itself), so their checkpointers name only that process;
in a single process this changes nothing.
"""

from __future__ import annotations

import jax
import orbax.checkpoint as ocp


def this_process_only() -> ocp.options.MultiprocessingOptions:
    """Multiprocessing options under which Orbax involves no other process."""
    index = jax.process_index()
    return ocp.options.MultiprocessingOptions(primary_host=index, active_processes={index})
