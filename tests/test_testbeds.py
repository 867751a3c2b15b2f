"""The testbed registry: each config names its testbed, and each testbed's classes agree with
its trainer."""

import dataclasses
import typing

import pytest

from vaco_jax import testbeds


@pytest.mark.parametrize("testbed", testbeds.TESTBEDS.values(), ids=testbeds.TESTBEDS.keys())
def test_a_config_names_its_testbed_and_the_trainer_returns_its_state(testbed):
    config = testbed.config()
    assert testbeds.named(config.testbed) is testbed
    assert typing.get_type_hints(testbed.trainer.init)["return"] is testbed.state


@pytest.mark.parametrize("testbed", testbeds.TESTBEDS.values(), ids=testbeds.TESTBEDS.keys())
def test_the_testbed_name_is_no_config_field(testbed):
    assert "testbed" not in {f.name for f in dataclasses.fields(testbed.config)}
    assert "testbed" not in testbed.config().to_dict()
    with pytest.raises(ValueError, match="unknown .* field"):
        testbed.config.from_dict({"testbed": testbed.name})


def test_an_unknown_testbed_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="testbed='games' is not supported; allowed values: "
                                         "control, tokens"):
        testbeds.named("games")
