"""The claims file's reader: the one rule every status follows, and a claim untested exactly
when no study or check counts for it."""

import pytest

from vaco_jax.leaderboard.claims import read_claims

CLAIM = """
[[claim]]
id = 1
claim = "c"
source = "s"
studies = {studies}
checks = {checks}
status = "{status}"
numbers = "n"
figure = ""
scale = ""
as_of = "{as_of}"
commit = "abc1234"
"""


def _write(tmp_path, rule='rule = "one rule"\n', studies="[]", checks="[]", status="untested",
           as_of="2026-12-07"):
    path = tmp_path / "claims.toml"
    path.write_text(rule + CLAIM.format(studies=studies, checks=checks, status=status,
                                        as_of=as_of))
    return path


def test_a_claim_counted_by_a_check_alone_is_judged_and_evidence_decides_nothing(tmp_path):
    claims = read_claims(_write(tmp_path, checks='["tests/x.py::test_y"]', status="reproduced"))
    (claim,) = claims.claims
    assert claims.rule == "one rule" and claim.checks == ("tests/x.py::test_y",)
    assert claim.evidence == () and claim.figure_study is None


@pytest.mark.parametrize("changes, message", [
    ({"rule": ""}, r"it states no rule"),
    ({"status": "reproduced"}, r"claim 1 is reproduced with 0 studies or checks that count"),
    ({"checks": '["tests/x.py"]'}, r"claim 1 is untested with 1 studies or checks that count"),
    ({"as_of": "7 Dec"}, r"claim 1 needs as_of as YYYY-MM-DD"),
    ({"studies": '"toy"'}, r"claim 1's studies must be a list of names"),
])
def test_a_malformed_claims_file_is_refused_naming_what_is_wrong(tmp_path, changes, message):
    with pytest.raises(ValueError, match=message):
        read_claims(_write(tmp_path, **changes))
