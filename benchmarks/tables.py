"""Markdown tables of a results file (printed by `run.py`, pasted into the README)."""

from __future__ import annotations

from typing import Any


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _percent(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.0f}%"


def _load(m: dict[str, Any]) -> str:
    load = m.get("load") or {}
    busy = load.get("busy_cores")
    return f"{load.get('loadavg_1min', '-')} / {'-' if busy is None else busy}"


def _compile(m: dict[str, Any]) -> str:
    return f"{m['lower_s'] + m['compile_s']:.0f}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def header(results: dict[str, Any]) -> str:
    m, s = results["machine"], results["settings"]
    v = m["versions"]
    b = s["base"]
    return "\n".join([
        f"- device: {m['device_kind']} (`{m['backend']}`, {len(m['devices'])} device(s)); host "
        f"{m['host']['cpu_count']} CPU cores; {m['date']}",
        f"- versions: jax {v['jax']}, jaxlib {v['jaxlib']}, brax {v['brax']}, mujoco "
        f"{v['mujoco']}, mujoco-mjx {v['mujoco-mjx']}, flax {v['flax']}, optax {v['optax']}, "
        f"python {v['python']}",
        f"- command: `{m['command']}`",
        *(f"- then, into the same file: `{a['command']}` ({a['date']})"
          for a in results.get("appended_by", [])),
        f"- settings `{s['name']}`: {b['env']}, {b['num_envs']} envs x {b['rollout_length']} steps "
        f"per update, {b['epochs']} epochs x {b['minibatches']} minibatches, actor "
        f"{tuple(b['actor_hidden'])}, critic {tuple(b['critic_hidden'])}; {s['updates_per_call']}"
        f" updates per timed call, best of {s['repeats']} calls after a warm-up call",
        "- load column: 1-minute load average / cores busy with other processes just before "
        "timing",
    ])


def throughput(results: dict[str, Any]) -> str | None:
    b = results["benchmarks"]
    env = b.get("env")
    sync = (b.get("sync") or {}).get("rows", {})
    ppo = sync.get("ppo")
    rows = []

    def add(name: str, m: dict[str, Any], compile_s: str) -> None:
        rows.append([name, _rate(m["steps_per_s"]), _rate(m.get("steps_per_s_median")),
                     _ratio(m["steps_per_s"] / env["steps_per_s"]) if env else "-",
                     _ratio(m["steps_per_s"] / ppo["steps_per_s"]) if ppo else "-",
                     compile_s, _load(m)])
    if env:
        add("environment alone, random actions (physical limit)", env, _compile(env))
    for algo, m in sync.items():
        add(f"vaco_jax `{algo}` synchronous (lag fixed:0)", m, _compile(m))
    brax = b.get("brax")
    if brax and "steps_per_s" in brax:
        add("Brax PPO trainer, same settings", brax, f"~{brax['compile_s']:.0f}")
    if not rows:
        return None
    table = _table(["measurement", "steps/s (best)", "steps/s (median)", "/ env limit",
                    "/ sync ppo", "compile s", "load"], rows)
    notes = []
    if env and "sync_ppo_over_env_limit" in env:
        notes.append(f"timed in alternating calls: synchronous ppo / environment alone = "
                     f"**{env['sync_ppo_over_env_limit']:.2f}** (median of rounds; the learner "
                     f"adds {100 * (1 / env['sync_ppo_over_env_limit'] - 1):.0f}% to the "
                     f"environment's time)")
    if brax and "ratio_vaco_jax_to_brax" in brax:
        notes.append(f"vaco_jax synchronous ppo ({_rate(brax['vaco_jax_steps_per_s'])} steps/s, "
                     f"timed right before and after Brax) / Brax PPO = "
                     f"**{brax['ratio_vaco_jax_to_brax']:.2f}**")
    if brax and "error" in brax:
        notes.append(f"Brax PPO could not run: {brax['error']}")
    evaluation = (b.get("sync") or {}).get("eval")
    if evaluation:
        notes.append(f"one evaluation (not in the rates above): {min(evaluation['calls_s']):.2f} s "
                     f"(compile {_compile(evaluation)} s)")
    return "\n\n".join([table] + notes)


def asynchrony(results: dict[str, Any]) -> str | None:
    b = results["benchmarks"]
    rows_in = (b.get("async") or {}).get("rows")
    if not rows_in:
        return None
    ppo = ((b.get("sync") or {}).get("rows") or {}).get("ppo")
    rows = [[r["algo"], str(r["buffer_capacity"]), r["acting"], _rate(r["steps_per_s"]),
             r["baseline"], _rate(r["paired_baseline_steps_per_s"]), _percent(r["overhead"]),
             _percent(r.get("overhead_best_calls", r["overhead"])),
             _percent(ppo["steps_per_s"] / r["steps_per_s"] - 1.0) if ppo else "-",
             _compile(r), _load(r)] for r in rows_in]
    table = _table(["algo", "K", "acting", "steps/s (best)", "baseline (timed alternately)",
                    "baseline steps/s", "time vs baseline (median of rounds)",
                    "time vs baseline (best calls)", "time vs sync ppo (own timing)",
                    "compile s", "load"], rows)
    winners = b["async"].get("winners") or []
    lines = [f"- {w['algo']}, K={w['buffer_capacity']}: `{w['winner']}` faster by "
             f"{100 * (w['speedup'] - 1):.0f}%" for w in winners]
    return "\n\n".join([table, "\n".join(lines)]) if lines else table


def breakdown(results: dict[str, Any]) -> str | None:
    out = results["benchmarks"].get("breakdown")
    if not out or "rows" not in out:
        return None
    rows = []
    for r in out["rows"]:
        us = r["us_per_step"]
        lag = ("fixed:0" if r["lag_model"] == "fixed"
               else f"{r['lag_model']}:{r['buffer_capacity'] - 1}")
        rows.append([r["algo"], lag, str(r["buffer_capacity"]), r["acting"],
                     f"{us['environment']:.1f}", f"{us['acting']:.1f}", f"{us['learning']:.1f}",
                     f"{us['total']:.1f}", f"{100 * us['acting'] / us['total']:.0f}%",
                     f"{100 * us['learning'] / us['total']:.0f}%", _load(r["train"])])
    table = _table(["algo", "lag", "K", "acting", "environment us", "acting us", "learning us",
                    "total us", "acting share", "learning share", "load"], rows)
    return ("Microseconds per environment step (all environments together), from three programs "
            "timed in alternating calls: the environment alone (random actions), the rollouts "
            "alone (`ControlTrainer.collect`), and whole updates.\n\n" + table)


def seeds(results: dict[str, Any]) -> str | None:
    out = results["benchmarks"].get("seeds")
    if not out or "rows" not in out:
        return None
    rows = [[str(r["seeds"]), str(out["num_envs_per_seed"]), _rate(r["steps_per_s"]),
             _ratio(r["speedup_vs_one_seed"]),
             _ratio(r.get("speedup_vs_one_seed_best_calls", r["speedup_vs_one_seed"])),
             _compile(r), _load(r)] for r in out["rows"]]
    return _table(["seeds", "envs per seed", "total steps/s", "x one seed (median of rounds)",
                   "x one seed (best calls)", "compile s", "load"], rows)


def memory(results: dict[str, Any]) -> str | None:
    out = results["benchmarks"].get("memory")
    if not out or "rows" not in out:
        return None

    def device_peak(r: dict[str, Any]) -> str:
        stats = r["device_memory_after_chunk"][-1]
        return "-" if not stats else f"{stats.get('peak_bytes_in_use', 0) / 2**20:,.0f}"
    n = out["updates_per_chunk"]
    rows = [[str(r["seeds"]), str(r["buffer_capacity"]), f"{r['peak_rss_mb']:,.0f}",
             f"{r['rss_mb_after_import']:,.0f}", f"{r['rss_mb_after_compile']:,.0f}",
             " / ".join(f"{x:,.0f}" for x in r["rss_mb_after_chunk"]),
             f"{r['growth_mb_last_vs_first_chunk']:+.1f}",
             f"{r['growth_mb_second_half']:+.1f}" if "growth_mb_second_half" in r else "-",
             device_peak(r)] for r in out["rows"]]
    chunks = len(out["rows"][0]["rss_mb_after_chunk"])
    after = ", ".join(f"{(i + 1) * n}" for i in range(chunks))
    return _table(["seeds", "K", "peak RSS MB", "RSS after imports MB", "RSS after compile MB",
                   f"RSS after {after} updates MB", "growth MB",
                   "growth over the second half MB", "device peak MB"], rows)


def compile_times(results: dict[str, Any]) -> str | None:
    out = results["benchmarks"].get("compile")
    if not out or "calls" not in out:
        return None
    rows = [[str(c["seed"]), str(c["hparams"] or "defaults"), f"{c['call_s']:.2f}",
             str(c["backend_compiles"]), f"{c['trace_s'] + c['lower_s']:.1f}",
             f"{c['backend_compile_s']:.1f}"] for c in out["calls"]]
    table = _table(["seed", "hyper-parameters", "call s", "XLA compilations", "trace+lower s",
                    "XLA compile s"], rows)
    return "\n\n".join([f"`train` of {out['config']}:", table,
                        f"jit cache entries after both calls: {out['jit_cache_size']}; "
                        f"recompiled on new hyper-parameters: {out['recompiled_on_new_hparams']}"])


SECTIONS = (("Throughput", throughput), ("Cost of asynchrony", asynchrony),
            ("Where the time goes", breakdown),
            ("Vmapped seeds", seeds), ("Memory", memory), ("Compile time", compile_times))


def markdown(results: dict[str, Any]) -> str:
    parts = [header(results)]
    for title, section in SECTIONS:
        body = section(results)
        if body:
            parts.append(f"### {title}\n\n{body}")
    errors = {k: v["error"] for k, v in results["benchmarks"].items() if "error" in v}
    if errors:
        parts.append("### Failed sub-benchmarks\n\n" + "\n".join(f"- {k}: {v}"
                                                                  for k, v in errors.items()))
    return "\n\n".join(parts) + "\n"
