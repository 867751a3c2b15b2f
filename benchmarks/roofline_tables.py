"""The roofline's tables (`benchmarks/roofline.py`): its results and predictions as Markdown."""

from __future__ import annotations

from typing import Any


def _si(x: float) -> str:
    for unit, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= size:
            return f"{x / size:,.2f}{unit}"
    return f"{x:,.0f}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f}"


def tables(results: dict[str, Any], pred: dict[str, Any]) -> str:
    """The results' tables, with their predictions `pred` (`roofline.predictions`)."""
    lines = []
    control = results.get("control", {})
    if control:
        lines += ["#### XLA's count per update (one run, paper sizes)", "",
                  "| task | part | GFLOP | GB accessed | FLOP/byte |", "|---|---|---|---|---|"]
        for env, counts in control.items():
            for part, c in counts.get("per_update", {}).items():
                lines.append(f"| {env} | {part} | {c['flops'] / 1e9:,.1f} | "
                             f"{c['bytes'] / 1e9:,.2f} | "
                             f"{c['flops'] / c['bytes'] if c['bytes'] else 0:.2f} |")
        lines += ["", "#### Roofline per update and predicted end-to-end rate", "",
                  "| task | device | acting ms | learning ms (fp32 / matrix peak) | bound | "
                  "physics rate used | physics ms | predicted steps/s | / physics alone |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for row in pred["control"]:
            physics = row["physics"] or [None]
            for p in physics:
                lines.append(
                    f"| {row['env']} | {row['hardware']} | {_ms(row['acting']['fp32']['time_s'])} "
                    f"| {_ms(row['learning']['fp32']['time_s'])} / "
                    f"{_ms(row['learning']['matrix']['time_s'])} | "
                    f"{row['learning']['fp32']['bound']} | "
                    + (f"{_si(p['physics_steps_per_s'])} ({p['device']}) | "
                       f"{_ms(p['physics_s'])} | {_si(p['steps_per_s'])} | "
                       f"{p['of_physics']:.2f} |"
                       if p else "no published rate | - | - | - |"))
    if pred["sweep"]:
        lines += ["", "#### The paper sweep's predicted time (roofline learner, published physics)", "",
                  "| learner roofline on | physics rates of | tasks | 1 GPU | 8 GPUs "
                  "(`--part k/8`) |", "|---|---|---|---|---|"]
        for s in pred["sweep"]:
            lines.append(f"| {s['hardware']} | {s['physics_device']} | {s['reading']} | "
                         f"{s['hours_1_gpu']:,.1f} h | {s['hours_8_gpus']:,.1f} h |")
    if pred["tokens"]:
        per = results["tokens"]["per_update"]
        lines += ["", "#### Token testbed (accelerator preset): XLA's count per update", "",
                  "| part | GFLOP | GB accessed | FLOP/byte |", "|---|---|---|---|"]
        lines += [f"| {part} | {c['flops'] / 1e9:,.2f} | {c['bytes'] / 1e9:,.3f} | "
                  f"{c['flops'] / c['bytes']:.2f} |" for part, c in per.items()]
        lines += ["", "#### Token testbed (accelerator preset), roofline per update", "",
                  "| device | peak | update ms | generation ms | learning ms | bound | "
                  "response tokens/s | MFU at the floor |", "|---|---|---|---|---|---|---|---|"]
        for t in pred["tokens"]:
            lines.append(f"| {t['hardware']} | {t['peak']} | {_ms(t['update_s'])} | "
                         f"{_ms(t['generation_s'])} | {_ms(t['learning_s'])} | {t['bound']} | "
                         f"{_si(t['tokens_per_s'])} | {100 * t['mfu_bound']:.1f}% |")
    return "\n".join(lines)
