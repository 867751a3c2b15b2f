"""`vaco-jax algorithms`: every algorithm of both testbeds, a plugin's included, each built-in
one with the fidelity card's page that describes it, and each older variant kept for
reproduction marked with the method that replaced it."""

from pathlib import Path

from fake_plugins import fake_entry_points, private_registries
from vaco_jax import cli
from vaco_jax.cli import algorithms as algorithms_cli
from vaco_jax.control import algorithms as control
from vaco_jax.core.registry import ENTRY_POINT_GROUP
from vaco_jax.tokens.algorithms import ALGORITHMS as TOKENS

ROOT = Path(__file__).resolve().parents[2]


def test_every_built_in_algorithm_is_listed_with_its_card_page(capsys):
    assert cli.main(["algorithms"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["testbed", "algorithm", "registered"]
    listed = {tuple(line.split()[:2]) for line in lines[1:]}
    assert listed == {("control", a) for a in control.ALGORITHMS} | {("tokens", a)
                                                                      for a in TOKENS}
    for testbed, algo, by, card, _, _ in algorithms_cli.rows():
        assert by == "vaco_jax" and card == f"docs/methods/{testbed}/{algo}.md"
        assert (ROOT / card).is_file(), (testbed, algo)
    status = {(r[0], r[1]): r[4] for r in algorithms_cli.rows()}
    assert status["tokens", "m2po"] == "default"
    assert status["tokens", "m2po_drop"] == "older variant of m2po (before 2026-11-28)"


def test_a_plugins_algorithm_is_listed_naming_its_entry_point(monkeypatch):
    private_registries(monkeypatch)

    def register_plugin():
        control.ALGORITHMS.register(control.Algorithm(
            "plugin_ppo", control.GAE, control.ALGORITHMS["ppo"].policy_loss,
            description="ppo, registered by a plugin"))
    fake_entry_points(monkeypatch, ENTRY_POINT_GROUP, {"register_plugin": register_plugin})
    [row] = [r for r in algorithms_cli.rows() if r[1] == "plugin_ppo"]
    assert row[0] == "control" and "fake_vaco_plugin" in row[2] and row[3] == "-"
    assert row[4] == "default" and row[5] == "ppo, registered by a plugin"
