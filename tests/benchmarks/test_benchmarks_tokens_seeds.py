"""The token benchmark's vmapped seeds (`benchmarks/tokens.py`, `seeds`) within the device's
memory: XLA's memory analysis checked against the free bytes, counts that do not fit (by that
check, or out of memory at their first call or in the rounds) recorded as such while the others
are timed, and one state per program kept on the device after its warm-up."""

import dataclasses
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `benchmarks/` is a folder of scripts beside the package

from benchmarks import harness, token_programs, tokens  # noqa: E402


def _counter_program() -> harness.Program:
    return harness.Program(fn=jax.jit(lambda x: x + 1.0), args=(jnp.zeros(1000),),
                           advance=lambda args, out: (out,), steps_per_call=1)


def test_warm_up_runs_once_and_lets_the_first_arguments_go():
    program = _counter_program()
    compiled = harness.Compiled(program, warm_up=False)
    assert not compiled.warmed_up and compiled.program.args is program.args
    compiled.warm_up()
    compiled.warm_up()  # once only: the timed calls start from the state the first one reached
    assert compiled.warmed_up and float(compiled.args[0][0]) == 1.0
    assert compiled.program.args == () and program.args[0].shape == (1000,)  # caller's kept
    assert compiled.program.steps_per_call == 1


def test_memory_analysis_counts_what_a_call_allocates_beyond_its_arguments():
    program = _counter_program()
    memory = harness.memory_analysis(program.fn.lower(*program.args).compile())
    assert memory is not None and memory["argument_bytes"] == 4000
    assert memory["call_bytes"] == memory["temp_bytes"] + memory["output_bytes"] \
        - memory["alias_bytes"]
    assert memory["output_bytes"] == 4000
    live = sum(a.nbytes for a in jax.live_arrays())
    assert harness.free_device_bytes(10 ** 9) == 10 ** 9 - live  # a CPU: the live arrays
    assert harness.is_out_of_memory(RuntimeError("RESOURCE_EXHAUSTED: Out of memory while "
                                                 "trying to allocate 83.30GiB"))
    assert not harness.is_out_of_memory(ValueError("shapes differ"))


@pytest.mark.slow
def test_counts_that_do_not_fit_are_recorded_and_the_others_timed(monkeypatch, tmp_path):
    """Seeds 5: out of memory while compiling; 4: over the free bytes by XLA's analysis, never
    run; 3: out of memory at its warm-up call; 2: out of memory in the timed rounds, which are
    then run again without it; 1: timed in full. The other counts' states are let go."""
    settings = tokens.presets("cpu")["tiny"]
    settings = dataclasses.replace(settings, seed_counts=(1, 2, 3, 4, 5), repeats=3)
    per_seed = tokens.update_program(settings.config, 1, 1).steps_per_call
    one_call = {}  # seeds -> bytes one call asks, read from the programs compiled

    real_analysis = harness.memory_analysis

    def analysis(executable):
        memory = real_analysis(executable)
        one_call[len(one_call)] = memory["call_bytes"]
        return memory

    monkeypatch.setattr(harness, "memory_analysis", analysis)
    # Compiled largest first: 4 seeds' analysis is the first; free bytes just below it.
    monkeypatch.setattr(harness, "free_device_bytes", lambda limit=None: one_call[0] - 1)
    real_call, calls = harness.Compiled.call, {2: 0, 3: 0}

    def call(self, carry_on=False):
        seeds = self.program.steps_per_call // per_seed
        if seeds in calls:
            calls[seeds] += 1
            if seeds == 3 or calls[seeds] > 1:  # 3: its warm-up; 2: its first timed call
                raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate")
        return real_call(self, carry_on)

    monkeypatch.setattr(harness.Compiled, "call", call)
    real_compiled_update = tokens.compiled_update

    def compiled_update(config, num_seeds, updates):
        if num_seeds == 5:
            raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate")
        return real_compiled_update(config, num_seeds, updates)

    monkeypatch.setattr(tokens, "compiled_update", compiled_update)
    log = []
    part = tokens.seeds(settings, log.append)
    rows = part["rows"]
    assert list(rows) == ["1", "2", "3", "4", "5"] and part["first_timed"] == 1
    assert rows["1"]["fits"] and rows["1"]["of_first"] == 1.0
    assert len(rows["1"]["calls_s"]) == 3 and rows["1"]["steps_per_s"] > 0
    assert rows["4"]["fits"] is False and rows["4"]["note"].startswith("does not fit (")
    assert "GiB needed" in rows["4"]["note"] and "error" not in rows["4"]
    assert rows["4"]["memory"]["call_bytes"] > rows["4"]["free_bytes"]
    assert "first call" in rows["3"]["note"] and "RESOURCE_EXHAUSTED" in rows["3"]["error"]
    assert "timed rounds" in rows["2"]["note"] and "RESOURCE_EXHAUSTED" in rows["2"]["error"]
    assert "compiling" in rows["5"]["note"] and rows["5"]["memory"] is None
    assert all("steps_per_s" not in rows[n] and not rows[n]["fits"] for n in ("2", "3", "4", "5"))
    assert [m for m in log if m.startswith("timing")] == [
        "timing 2 seed count(s) [1, 2] in 3 rounds", "timing 1 seed count(s) [1] in 3 rounds"]
    assert token_programs._UPDATES == {}  # every program and its state let go
    text = tokens.markdown({"machine": harness.machine(), "settings": settings.to_dict(),
                            "parts": {"seeds": part}})
    assert "does not fit (out of memory at its first call)" in text
    assert "| 4 | does not fit (" in text and "GiB a call asks (XLA)" in text
    assert "| 5 | does not fit (out of memory making its state or compiling) | - | - | - |" in text
    json.dumps(part)  # the record is written as JSON

    # Any other error is not a measurement: it stops the part.
    def broken(self, carry_on=False):
        raise ValueError("not a memory error")

    monkeypatch.setattr(harness.Compiled, "call", broken)
    one = dataclasses.replace(settings, seed_counts=(1,))
    monkeypatch.setattr(harness, "free_device_bytes", lambda limit=None: None)
    with pytest.raises(ValueError, match="not a memory error"):
        tokens.seeds(one, log.append)
    tokens.release_updates()
