"""Which hyper-parameters a run reads (`vaco_jax.core.knobs`, `Testbed.knobs`), and the
refusal of a setting of one it ignores: a sweep before anything compiles, a `--hparam` before
anything runs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from folder_snapshots import refused
from vaco_jax import testbeds
from vaco_jax.control.config import ControlConfig
from vaco_jax.core.knobs import Knob, by_name, check_values, read_by, refuse_unread
from vaco_jax.experiment import parse_experiment
from vaco_jax.tokens.config import TokenConfig, TokenHParams

EVERY_CONTROL_RUN = {"learning_rate", "lag", "gamma", "entropy_coef", "value_coef",
                     "max_grad_norm", "value_clip_eps", "init_log_std"}


@pytest.mark.parametrize("algo, own", [
    ("ppo", {"clip_eps", "gae_lambda"}),
    ("ppo_kl", {"gae_lambda", "kl_coef", "kl_target", "kl_coef_min", "kl_coef_max"}),
    ("vaco", {"tv_delta", "vtrace_lambda", "rho_bar", "c_bar", "rho_bar_pg"}),
    ("impala", {"vtrace_lambda", "rho_bar", "c_bar", "rho_bar_pg"}),
    ("decoupled_ppo_ess", {"clip_eps", "is_cap", "gae_lambda", "ess_target"}),
    ("icepop", {"clip_eps", "gae_lambda", "icepop_low", "icepop_high"})])
def test_a_control_run_reads_its_estimator_s_and_loss_s_knobs_and_no_other(algo, own):
    assert testbeds.CONTROL.knobs(ControlConfig(algo=algo)) == EVERY_CONTROL_RUN | own


def test_token_runs_read_their_entry_s_knobs_and_adamw_its_weight_decay():
    assert testbeds.TOKENS.knobs(TokenConfig(algo="m2po")) == {
        "learning_rate", "lag", "temperature", "max_grad_norm", "m2po_tau"}
    assert "weight_decay" in testbeds.TOKENS.knobs(TokenConfig(algo="grpo", optimizer="adamw"))


def test_read_by_sees_each_field_a_function_reads():
    read = read_by(lambda x, hp: x * hp.clip_eps + hp.lag, TokenHParams(),
                   jax.ShapeDtypeStruct((2,), jnp.float32))
    assert read == {"clip_eps", "lag"}
    with pytest.raises(ValueError, match=r"where: algo='ppo' does not read hyper-parameter\(s\) "
                                         r"tv_delta, so its runs would differ in nothing"):
        refuse_unread(["learning_rate", "tv_delta"], frozenset({"learning_rate"}), "ppo", "where")


SWEEP = """\
tasks = ["add"]
algos = ["{algo}"]
seeds = 1
testbed = "tokens"

[lag]
model = "fixed"
levels = [0]

[hparams]
{hparams}
"""


@pytest.mark.parametrize("hparams, algo, refused_name", [
    ("m2po_tau = [0.01, 0.04]", "grpo", "m2po_tau"),
    ("m2po_tau = [0.01, 0.04]", "m2po", None),
    ("weight_decay = [0.0, 0.1]", "grpo", "weight_decay"),
    ("clip_eps = [0.1, 0.2]\n\n[tune]\nhparam = \"tv_delta\"\nvalues = [0.01, 0.02]\n"
     "rule = \"best_sync_final\"\nseeds = [100]", "grpo", "tv_delta"),
    ("m2po_tau = 0.01", "grpo", None)])  # a fixed value of a shared table is no sweep
def test_a_sweep_over_a_knob_its_algorithm_ignores_is_refused_while_parsing(hparams, algo,
                                                                            refused_name):
    text = SWEEP.format(algo=algo, hparams=hparams)
    if refused_name is None:
        assert parse_experiment(text).groups
        return
    with pytest.raises(ValueError, match=f"algo='{algo}' does not read hyper-parameter\\(s\\) "
                                         f"{refused_name}"):
        parse_experiment(text)


@pytest.mark.parametrize("argv, name", [
    (["train", "--env", "toy_reach", "--algo", "ppo", "--hparam", "tv_delta=0.1"], "tv_delta"),
    (["tokens", "--task", "add", "--algo", "grpo", "--hparam", "m2po_tau=0.1"], "m2po_tau")])
def test_a_hparam_flag_its_algorithm_ignores_is_one_line(tmp_path, capsys, argv, name):
    line = refused(capsys, [*argv, "--out", str(tmp_path / "out"), "--no-progress"])
    assert "--hparam: algo=" in line and f"does not read hyper-parameter(s) {name}" in line
    assert not (tmp_path / "out").exists()


def test_a_knob_refuses_a_bad_interval_and_a_default_outside_it():
    with pytest.raises(ValueError, match=r"Knob k: within='0, 1' is not an interval"):
        Knob("k", 0.5, "a knob", "0, 1")
    with pytest.raises(ValueError, match=r"Knob k: its default 0.0 lies outside \(0, inf\)"):
        Knob("k", 0.0, "a knob", "(0, inf)")
    with pytest.raises(ValueError, match="a knob's name must be an identifier"):
        Knob("k-1", 0.0, "a knob")


@pytest.mark.parametrize("within, inside, outside", [
    ("(0, inf)", [1e-9, 1e9], [0.0, -1.0, np.inf]),
    ("[0, 1]", [0.0, 1.0], [-1e-9, 1.0 + 1e-6, np.nan]),
    ("(0, 1]", [1.0], [0.0]),
    ("[1, inf)", [1.0], [0.999])])
def test_a_knob_contains_what_its_interval_says(within, inside, outside):
    knob = Knob("k", inside[0], "a knob", within)
    assert knob.contains(np.asarray(inside))
    assert not any(knob.contains(np.asarray(value)) for value in outside)


def test_one_check_names_the_knob_its_range_and_its_upper_knob():
    low = Knob("low", 0.1, "", "[0, 1]", at_most="high")
    table = by_name([low, Knob("high", 0.5, "", "[0, 1]")])
    check_values(table, {"low": [0.2, 0.4], "high": [0.3, 0.5]})
    with pytest.raises(ValueError, match=r"hyper-parameter low must lie in \[0, 1\], got \[2.0\]"):
        check_values(table, {"low": [2.0], "high": [0.5]})
    with pytest.raises(ValueError, match=r"hyper-parameter high must be finite, got \[nan\]"):
        check_values(table, {"low": [0.1], "high": [np.nan]})
    with pytest.raises(ValueError, match=r"low must be <= high, got low=\[0.4\] and high=\[0.3\]"):
        check_values(table, {"low": [0.4], "high": [0.3]})


def test_two_different_knobs_under_one_name_are_refused_and_a_named_value_is_its_number():
    with pytest.raises(ValueError, match="two different knobs are declared as 'k'"):
        by_name([Knob("k", 1.0, "one"), Knob("k", 2.0, "another")])
    assert by_name([Knob("k", 1.0, "one")] * 2) == {"k": Knob("k", 1.0, "one")}
    tv = TokenHParams.knob_table()["tv_delta"]
    assert tv.value_of("tvpo_lm") == 0.015 and tv.value_of("0.2") == 0.2
    with pytest.raises(ValueError, match="tv_delta needs a number or one of vaco_mujoco"):
        tv.value_of("loose")


def test_hyper_parameters_hold_their_knobs_as_leaves_and_record_every_built_in_one():
    held = TokenHParams.create(knobs=("lag", "m2po_tau"), m2po_tau=0.1)
    assert held.names == ("lag", "m2po_tau") and len(jax.tree.leaves(held)) == 2
    stacked = TokenHParams.stack([held, held.replace(m2po_tau=0.2)])
    np.testing.assert_allclose(jax.vmap(lambda hp: hp.m2po_tau * 2)(stacked), [0.2, 0.4])
    record = stacked.record()
    assert tuple(record)[:len(TokenHParams.recorded)] == TokenHParams.recorded
    np.testing.assert_allclose(record["clip_eps"], [0.2, 0.2])  # not held: its default
    with pytest.raises(ValueError, match=r"unknown hyper-parameter\(s\) \['clip_eps'\]"):
        TokenHParams.create(knobs=("lag",), clip_eps=0.1)
    with pytest.raises(ValueError, match=r"hold no knob\(s\) \['clip_eps'\]"):
        held.replace(clip_eps=0.1)
    assert set(held.only(["lag", "clip_eps"]).names) == {"lag", "clip_eps"}
