"""The token benchmark's tables (`benchmarks/tokens.py`): its results JSON as Markdown."""

from __future__ import annotations

from typing import Any

from benchmarks.tables import _compile, _load, _percent, _rate, _ratio, _table
from benchmarks.token_programs import BASELINE

GIB = 2 ** 30


def markdown(results: dict[str, Any]) -> str:
    m, s = results["machine"], results["settings"]
    v, c = m["versions"], s["config"]
    lines = [
        f"- device: {m['device_kind']} (`{m['backend']}`, {len(m['devices'])} device(s)); host "
        f"{m['host']['cpu_count']} CPU cores; {m['date']}",
        f"- versions: jax {v['jax']}, jaxlib {v['jaxlib']}, flax {v['flax']}, optax "
        f"{v['optax']}, python {v['python']}",
        f"- command: `{m['command']}`",
        f"- settings `{s['name']}`: task {c['task']} (size {c['task_size']}), P x G = "
        f"{c['prompts']} x {c['group_size']}, {c['layers']} layers of width {c['width']} "
        f"({c['heads']} heads), K = {c['buffer_capacity']}, {c['epochs']} epoch(s) x "
        f"{c['minibatches']} minibatch(es); {s['batches_per_call']} forward passes or "
        f"generations, or {s['updates_per_call']} updates, per timed call; best of "
        f"{s['repeats']} calls after a warm-up call",
        "- load column: 1-minute load average / cores busy with other processes just before "
        "timing",
    ]
    parts = results["parts"]
    if "throughput" in parts:
        t = parts["throughput"]
        forward = t["forward"]
        table = [["forward pass alone (limit)", _rate(forward["steps_per_s"]), "1.00", "-", "-",
                  "-", "-", _compile(forward), _load(forward)]]
        for row, r in t["rows"].items():
            g, u = r["generate"], r["update"]
            table.append([row, _rate(g["steps_per_s"]), _ratio(g["of_forward"]),
                          _percent(g["time_vs_baseline"]), _rate(u["steps_per_s"]),
                          _ratio(u["of_forward"]), _percent(u["time_vs_baseline"]),
                          f"{_compile(g)} / {_compile(u)}", _load(g)])
        lines += ["", "#### Throughput (response tokens/s)", "",
                  _table(["acting", "generated tok/s (best)", "/ forward",
                          f"time vs {BASELINE}", "trained tok/s (best)", "/ forward",
                          f"time vs {BASELINE}", "compile s (generate / update)", "load"],
                         table),
                  "", "Ratios are medians over rounds of per-round ratios (programs timed in "
                  "alternating calls)."]
        if "mfu" in forward:
            mfu = [["forward pass", _tflops(forward), _mfu(forward)]]
            mfu += [[f"{part}, {row}", _tflops(r[part]), _mfu(r[part])]
                    for row, r in t["rows"].items() for part in ("generate", "update")]
            lines += ["", "#### Model FLOPs utilisation (XLA's count of each program)", "",
                      _table(["program", "TFLOP/s", "MFU"], mfu),
                      "", "`*`: the program keeps a loop (token-by-token decoding), whose body "
                      "XLA counts once: a lower bound."]
    if "capacity" in parts:
        lines += ["", "#### Largest model and batch whose update fits", ""]
        for ladder, r in parts["capacity"].items():
            if ladder == "wall_s":
                continue
            tries = ", ".join(f"{t[r['field']]}: " + (f"{_rate(t['tokens_per_s'])} tok/s"
                                                        if t["fits"] else "fails"
                                                        if t["fits"] is False else "refused")
                              for t in r["tries"])
            lines.append(f"- largest {ladder} ({r['field']}): {r['largest_fitting']} "
                         f"(stopped by {r['stopped_by']}; {tries})")
    if "seeds" in parts:
        rows = parts["seeds"]["rows"]
        table = [[n, _rate(r["steps_per_s"]), _rate(r["steps_per_s_median"]),
                  _ratio(r["of_first"]), _compile(r), _call_gib(r), _load(r)]
                 if r.get("fits", True) else
                 [n, r.get("note", "does not fit"), "-", "-",
                  _compile(r) if "compile_s" in r else "-", _call_gib(r), "-"]
                 for n, r in rows.items()]
        first = parts["seeds"].get("first_timed")
        lines += ["", f"#### Vmapped seeds ({BASELINE}, trained tokens/s of all seeds)", "",
                  _table(["seeds", "tok/s (best)", "tok/s (median)",
                          "x one seed (median of rounds)" if first in (None, 1) else
                          f"x {first} seeds (median of rounds)", "compile s",
                          "GiB a call asks (XLA)", "load"], table)]
    return "\n".join(lines)


def _call_gib(r: dict[str, Any]) -> str:
    """What one call allocates beyond its arguments, by XLA's memory analysis."""
    memory = r.get("memory")
    return "-" if not memory else _gib(memory["call_bytes"])


def _gib(n_bytes: int) -> str:
    gib = n_bytes / GIB
    return f"{gib:.1f}" if abs(gib) >= 0.1 else f"{gib:.2g}"


def _tflops(m: dict[str, Any]) -> str:
    return f"{m['flops_per_s'] / 1e12:.2f}" + ("*" if m.get("loops_counted_once") else "")


def _mfu(m: dict[str, Any]) -> str:
    return "-" if m.get("mfu") is None else f"{100 * m['mfu']:.1f}%" + (
        "*" if m.get("loops_counted_once") else "")
