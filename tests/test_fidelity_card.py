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


def test_an_entry_naming_a_shared_deviation_by_label_carries_its_definition(tmp_path):
    """The board's method pages explain the card's "T1." labels with the definition the
    testbed's chapter gives once for many entries (and only the labels the entry names)."""
    from vaco_jax.leaderboard.card import Method, read_card
    from vaco_jax.leaderboard.pages import _card

    card = tmp_path / "card.md"
    card.write_text("## Token testbed\n\nShared:\n\n"
                    "- **T1, std.** population std.\n  - Not changed.\n"
                    "- **T2, no reference KL.** none.\n\n"
                    "### `grpo` (one)\n\n- **Deviations:**\n  - T1.\n  - Other.\n\n"
                    "### `rloo` (two)\n\n- **Deviations:** none.\n")
    entries = read_card(card)
    assert [label for label, _ in entries[("tokens", "grpo")].shared] == ["T1"]
    assert entries[("tokens", "grpo")].shared[0][1] == (
        "- **T1, std.** population std.\n  - Not changed.")
    assert entries[("tokens", "rloo")].shared == ()
    _, html = _card(Method("tokens", "grpo", entries[("tokens", "grpo")], None))
    assert "<strong>T1, std.</strong> population std." in html and "T2" not in html
    # The real card: GRPO's entry names T1 and T2.
    real = read_card(Path(__file__).resolve().parent.parent / "docs" / "fidelity.md")
    assert [label for label, _ in real[("tokens", "grpo")].shared] == ["T1", "T2"]
