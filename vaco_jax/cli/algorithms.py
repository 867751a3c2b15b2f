"""`vaco-jax algorithms`: every algorithm either testbed can run, the installed plugins'
included, read from the registries without building any."""

from __future__ import annotations

from vaco_jax.control.algorithms import ALGORITHMS as CONTROL
from vaco_jax.tokens.algorithms import ALGORITHMS as TOKENS

HEADER = ("testbed", "algorithm", "registered by", "fidelity card", "what it is")
REGISTRIES = {"control": CONTROL, "tokens": TOKENS}
CARD = "docs/fidelity.md"


def add_parser(subparsers) -> None:
    subparsers.add_parser(
        "algorithms", help="list every algorithm of both testbeds: built-in or the plugin that "
                           "registers it, its fidelity-card section, what it is")


def card_anchor(testbed: str, algo: str) -> str:
    """A built-in algorithm's section of the fidelity card: the card holds the control
    testbed's entries before the token testbed's, each headed by its name, so a token entry
    whose name the control chapter also heads takes the site's second anchor, `NAME_1`."""
    second = testbed == "tokens" and algo in CONTROL and CONTROL.registered_by(algo) is None
    return f"{CARD}#{algo.lower()}{'_1' if second else ''}"


def rows() -> list[tuple[str, ...]]:
    """One row per registered algorithm under `HEADER`, each testbed's in registration order:
    a plugin's names its entry point and has no card section (the card describes vaco_jax's
    own)."""
    made = []
    for testbed, registry in REGISTRIES.items():
        for algo in registry:
            plugin = registry.registered_by(algo)
            made.append((testbed, algo, plugin or "vaco_jax",
                         "-" if plugin else card_anchor(testbed, algo),
                         registry[algo].description))
    return made


def run_algorithms(args) -> int:
    table = [HEADER, *rows()]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER) - 1)]
    for row in table:
        print("  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), row[-1]]))
    return 0
