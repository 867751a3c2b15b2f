"""The fidelity card (`docs/methods/`) is checked against the registries: one page per algorithm
of each testbed, each with the card's five labels; an older variant kept for reproduction is
marked as the registry marks it and listed apart from the methods' defaults; the README links
the card."""

import dataclasses
import re
from pathlib import Path

import pytest

from vaco_jax.control import algorithms as control_algorithms
from vaco_jax.core.registry import AlgorithmRegistry, Superseded
from vaco_jax.leaderboard.card import Method, read_card
from vaco_jax.leaderboard.pages import _card
from vaco_jax.tokens import algorithms as token_algorithms

ROOT = Path(__file__).resolve().parents[1]
CARD = ROOT / "docs" / "methods"
REGISTRIES = {"control": control_algorithms.ALGORITHMS, "tokens": token_algorithms.ALGORITHMS}
LABELS = ("**Paper:**", "**Authors' code:**", "**Authors' loss and defaults:**",
          "**vaco_jax default:**", "**Deviations:**")


def _pages(testbed: str) -> dict[str, str]:
    return {page.stem: page.read_text() for page in (CARD / testbed).glob("*.md")
            if page.name != "index.md"}


@pytest.mark.parametrize("testbed", REGISTRIES)
def test_card_has_one_page_per_algorithm_titled_by_its_name(testbed):
    pages = _pages(testbed)
    assert set(pages) == set(REGISTRIES[testbed])
    assert {name for name, text in pages.items()
            if not text.startswith(f"# `{name}` (")} == set()


def test_every_algorithm_page_has_the_five_labels():
    missing = {f"{testbed}/{name}": [label for label in LABELS if label not in text]
               for testbed in REGISTRIES for name, text in _pages(testbed).items()}
    assert {where: labels for where, labels in missing.items() if labels} == {}


def _index_table(heading: str) -> list[tuple[str, ...]]:
    """The `[`name`](testbed/name.md)` links of the index's table under `heading`, each as
    (testbed, name)."""
    text = (CARD / "index.md").read_text()
    section = text[text.index(f"\n## {heading}\n"):]
    section = section[:section.find("\n## ", 4)]
    return re.findall(r"\[`(\w+)`\]\((control|tokens)/\1\.md\)", section)


def test_the_index_lists_the_defaults_by_testbed_and_the_older_variants_apart():
    older = {(testbed, name): registry[name].superseded
             for testbed, registry in REGISTRIES.items() for name in registry
             if registry[name].superseded is not None}
    assert len(older) == 11
    listed_older = {(testbed, name) for name, testbed in _index_table(
        "Older variants, kept for reproduction")}
    assert listed_older == set(older)
    for heading, testbed in (("Control testbed", "control"), ("Token testbed", "tokens")):
        defaults = [name for name, folder in _index_table(heading) if folder == testbed]
        assert defaults == [n for n in REGISTRIES[testbed] if (testbed, n) not in older]
    # Each older variant's page opens with the mark the board reads, naming the registry's
    # default and date.
    card = read_card(CARD)
    for (testbed, name), superseded in older.items():
        assert card[(testbed, name)].superseded_by == superseded.by
        assert f"before {superseded.until}" in _pages(testbed)[name].split("\n\n")[1]
    assert {key for key, entry in card.items() if entry.superseded_by} == set(older)


def test_a_registry_refuses_an_older_variant_of_an_unknown_or_older_method():
    ppo = control_algorithms.ALGORITHMS["ppo"]
    registry = AlgorithmRegistry("control", control_algorithms.Algorithm, [ppo],
                                 columns=[m.name for m in ppo.metrics])
    older = dataclasses.replace(ppo, name="ppo_old", superseded=Superseded("ppo", "2026-01-01"))
    registry.register(older)
    for by in ("ppo_unknown", "ppo_old"):
        with pytest.raises(ValueError, match=f"superseded by '{by}'"):
            registry.register(dataclasses.replace(ppo, name="ppo_older",
                                                  superseded=Superseded(by, "2025-01-01")))
    # Not by itself, even in place of itself; not on a date that is none.
    with pytest.raises(ValueError, match="superseded by 'ppo'"):
        registry.register(dataclasses.replace(ppo, superseded=Superseded("ppo", "2025-01-01")),
                          replace=True)
    with pytest.raises(ValueError, match="not a date"):
        registry.register(dataclasses.replace(ppo, name="ppo_older",
                                              superseded=Superseded("ppo", "last week")))
    # A default an older variant names cannot itself become an older variant.
    registry.register(dataclasses.replace(ppo, name="ppo2"))
    with pytest.raises(ValueError, match="is the default that ppo_old name"):
        registry.register(dataclasses.replace(ppo, superseded=Superseded("ppo2", "2026-02-01")),
                          replace=True)
    assert registry["ppo"].superseded is None and registry["ppo_old"].superseded.by == "ppo"


def test_readme_links_the_card():
    assert "(docs/methods/index.md)" in (ROOT / "README.md").read_text()


def test_an_entry_naming_a_shared_deviation_by_label_carries_its_definition(tmp_path):
    """The board's method pages explain the card's "T1." labels with the definition the
    testbed's page gives once for many entries (and only the labels the entry names)."""
    (tmp_path / "tokens").mkdir()
    (tmp_path / "tokens" / "index.md").write_text(
        "# Token testbed\n\nShared:\n\n- **T1, std.** population std.\n  - Not changed.\n"
        "- **T2, no reference KL.** none.\n- **T3, one step.** inert.\n")
    (tmp_path / "tokens" / "grpo.md").write_text(
        "# `grpo` (one)\n\n- **Deviations:**\n  - T1, T3.\n  - Other.\n")
    (tmp_path / "tokens" / "rloo.md").write_text("# `rloo` (two)\n\n- **Deviations:** none.\n")
    entries = read_card(tmp_path)
    assert [label for label, _ in entries[("tokens", "grpo")].shared] == ["T1", "T3"]
    assert entries[("tokens", "grpo")].shared[0][1] == (
        "- **T1, std.** population std.\n  - Not changed.")
    assert entries[("tokens", "rloo")].shared == ()
    _, html = _card(Method("tokens", "grpo", entries[("tokens", "grpo")], None))
    assert "<strong>T1, std.</strong> population std." in html and "T2" not in html
    # The real card: GRPO's page names T1 and T2, PPO's C1 and C2.
    real = read_card(CARD)
    assert [label for label, _ in real[("tokens", "grpo")].shared] == ["T1", "T2"]
    assert [label for label, _ in real[("control", "ppo")].shared] == ["C1", "C2"]


def test_a_card_page_not_named_as_a_registry_name_or_without_a_title_is_refused(tmp_path):
    (tmp_path / "control").mkdir()
    (tmp_path / "control" / "not a name.md").write_text("# x\n")
    with pytest.raises(ValueError, match="not named as a registry name is"):
        read_card(tmp_path)
    (tmp_path / "control" / "not a name.md").unlink()
    (tmp_path / "control" / "ppo.md").write_text("- **Paper:** no title line.\n")
    with pytest.raises(ValueError, match="does not open with its title"):
        read_card(tmp_path)


def test_only_a_page_s_opening_paragraph_marks_it_an_older_variant(tmp_path):
    (tmp_path / "tokens").mkdir()
    mark = ("**Older variant, kept for reproduction:** the method's default is "
            "[`m2po`](m2po.md); this is how vaco_jax ran it before 2026-11-28.")
    (tmp_path / "tokens" / "m2po_drop.md").write_text(f"# `m2po_drop`\n\n{mark}\n\n- x\n")
    (tmp_path / "tokens" / "m2po.md").write_text(f"# `m2po`\n\n- Quoting: {mark}\n\n{mark}\n")
    card = read_card(tmp_path)
    assert card[("tokens", "m2po_drop")].superseded_by == "m2po"
    assert card[("tokens", "m2po")].superseded_by is None
