"""`vaco-jax algorithms`: every algorithm of both testbeds, a plugin's included, each built-in
one with the fidelity card's section that describes it."""

from pathlib import Path

from fake_plugins import fake_entry_points, private_registries
from test_docs import _heading_ids
from vaco_jax import cli
from vaco_jax.cli import algorithms as algorithms_cli
from vaco_jax.control import algorithms as control
from vaco_jax.core.registry import ENTRY_POINT_GROUP
from vaco_jax.tokens.algorithms import ALGORITHMS as TOKENS

CARD = Path(__file__).resolve().parents[2] / "docs" / "fidelity.md"


def test_every_built_in_algorithm_is_listed_with_its_card_section(capsys):
    assert cli.main(["algorithms"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["testbed", "algorithm", "registered"]
    listed = {tuple(line.split()[:2]) for line in lines[1:]}
    assert listed == {("control", a) for a in control.ALGORITHMS} | {("tokens", a)
                                                                      for a in TOKENS}
    anchors = _heading_ids(CARD.read_text())
    for testbed, algo, by, card, _ in algorithms_cli.rows():
        assert by == "vaco_jax" and card.startswith(f"{algorithms_cli.CARD}#")
        assert card.split("#")[1] in anchors, (testbed, algo)
    # A name both testbeds have: the control entry comes first on the card's page.
    rows = {(r[0], r[1]): r[3] for r in algorithms_cli.rows()}
    assert rows["control", "sapo"].endswith("#sapo") and rows["tokens", "sapo"].endswith("#sapo_1")


def test_a_plugins_algorithm_is_listed_naming_its_entry_point(monkeypatch):
    private_registries(monkeypatch)

    def register_plugin():
        control.ALGORITHMS.register(control.Algorithm(
            "plugin_ppo", control.GAE, control.ALGORITHMS["ppo"].policy_loss,
            description="ppo, registered by a plugin"))
    fake_entry_points(monkeypatch, ENTRY_POINT_GROUP, {"register_plugin": register_plugin})
    [row] = [r for r in algorithms_cli.rows() if r[1] == "plugin_ppo"]
    assert row[0] == "control" and "fake_vaco_plugin" in row[2] and row[3] == "-"
    assert row[4] == "ppo, registered by a plugin"
