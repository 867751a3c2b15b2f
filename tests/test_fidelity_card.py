"""The fidelity card (`docs/fidelity.md`) is checked against the registries: one section per
algorithm of each testbed, each with the card's five labels, and the README links it."""

import re
from pathlib import Path

from vaco_jax.control import algorithms as control_algorithms
from vaco_jax.tokens import algorithms as token_algorithms

ROOT = Path(__file__).resolve().parents[1]
CARD = ROOT / "docs" / "fidelity.md"
LABELS = ("**Paper:**", "**Authors' code:**", "**Authors' loss and defaults:**",
          "**vaco_jax default:**", "**Deviations:**")
TESTBEDS = ("## Control testbed", "## Token testbed")


def _chapters(text: str) -> dict[str, str]:
    """The card's `## ` chapters by heading line."""
    parts = re.split(r"^(## .+)$", text, flags=re.M)
    return {heading.strip(): body for heading, body in zip(parts[1::2], parts[2::2])}


def _sections(chapter: str) -> dict[str, str]:
    """A chapter's algorithm sections, `### `name``, by name; a repeated name fails."""
    parts = re.split(r"^### `([^`]+)`[^\n]*$", chapter, flags=re.M)
    names = parts[1::2]
    assert len(names) == len(set(names)), f"an algorithm has two sections: {sorted(names)}"
    return dict(zip(names, parts[2::2]))


def _card_sections() -> dict[str, dict[str, str]]:
    text = CARD.read_text()
    assert text.startswith("# Fidelity card\n")
    chapters = _chapters(text)
    assert list(chapters)[:2] == list(TESTBEDS)
    assert "## Considered, not implemented" in chapters
    return {heading: _sections(chapters[heading]) for heading in TESTBEDS}


def test_card_has_one_section_per_control_algorithm():
    sections = _card_sections()["## Control testbed"]
    assert set(sections) == set(control_algorithms.ALGORITHMS)


def test_card_has_one_section_per_token_algorithm():
    sections = _card_sections()["## Token testbed"]
    assert set(sections) == set(token_algorithms.ALGORITHMS)


def test_every_algorithm_section_has_the_five_labels():
    missing = {f"{testbed} / {name}": [label for label in LABELS if label not in body]
               for testbed, sections in _card_sections().items()
               for name, body in sections.items()}
    assert {where: labels for where, labels in missing.items() if labels} == {}


def test_readme_links_the_card():
    assert "(docs/fidelity.md)" in (ROOT / "README.md").read_text()
