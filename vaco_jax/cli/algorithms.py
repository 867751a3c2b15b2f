"""`vaco-jax algorithms`: every algorithm either testbed can run, the installed plugins'
included, read from the registries without building any."""

from __future__ import annotations

from vaco_jax.control.algorithms import ALGORITHMS as CONTROL
from vaco_jax.tokens.algorithms import ALGORITHMS as TOKENS

HEADER = ("testbed", "algorithm", "registered by", "fidelity card", "default or older variant",
          "what it is")
REGISTRIES = {"control": CONTROL, "tokens": TOKENS}
CARD = "docs/methods"


def add_parser(subparsers) -> None:
    subparsers.add_parser(
        "algorithms", help="list every algorithm of both testbeds: built-in or the plugin that "
                           "registers it, its fidelity-card page, whether it is a method's "
                           "default or an older variant kept for reproduction, what it is")


def rows() -> list[tuple[str, ...]]:
    """One row per registered algorithm under `HEADER`, each testbed's in registration order:
    a plugin's names its entry point and has no card page (the card describes vaco_jax's
    own); an older variant names the method whose default replaced it and the date."""
    made = []
    for testbed, registry in REGISTRIES.items():
        for algo in registry:
            plugin, older = registry.registered_by(algo), registry[algo].superseded
            made.append((testbed, algo, plugin or "vaco_jax",
                         "-" if plugin else f"{CARD}/{testbed}/{algo}.md",
                         "default" if older is None else
                         f"older variant of {older.by} (before {older.until})",
                         registry[algo].description))
    return made


def run_algorithms(args) -> int:
    table = [HEADER, *rows()]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER) - 1)]
    for row in table:
        print("  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), row[-1]]))
    return 0
