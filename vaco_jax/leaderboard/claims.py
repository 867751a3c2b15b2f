"""The claims list (``experiments/results/claims.toml``): each claim a lag benchmark must
settle, where it is made, the one rule its status is judged by (the file's ``rule``), the
studies or checks that count for it under that rule, the studies cited as evidence only, and
what they found, as of a date and a commit."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from vaco_jax.infra import records

STATUSES = ("reproduced", "refuted", "mixed", "untested")
TEXT_FIELDS = ("claim", "source", "status", "numbers", "figure", "scale", "as_of", "commit")
LIST_FIELDS = ("studies", "evidence", "checks")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_COMMIT = re.compile(r"[0-9a-f]{7,40}")


@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim: ``studies`` name result folders that count for it under the rule, ``checks``
    the tests and benchmark results that do (for claims about the instrument itself),
    ``evidence`` folders cited that decide nothing; ``figure`` is a figure of the first study
    of ``studies``, else of ``evidence`` (empty for none); ``as_of`` the date its status was
    judged and ``commit`` that of the newest result it cites."""

    id: int
    claim: str
    source: str
    studies: tuple[str, ...]
    evidence: tuple[str, ...]
    checks: tuple[str, ...]
    status: str
    numbers: str
    figure: str
    scale: str
    as_of: str
    commit: str

    @property
    def figure_study(self) -> str | None:
        """The study whose figure ``figure`` is."""
        return (self.studies or self.evidence or (None,))[0]


@dataclasses.dataclass(frozen=True)
class Claims:
    """The file: the rule every status follows, and the claims by id."""

    rule: str
    claims: tuple[Claim, ...]


def _claim(entry: object) -> Claim:
    if not isinstance(entry, dict):
        raise ValueError("a [[claim]] is not a table")
    text = {key: entry.get(key) for key in TEXT_FIELDS}
    wrong = [key for key, value in text.items() if not isinstance(value, str)]
    if wrong or not isinstance(entry.get("id"), int):
        raise ValueError(f"claim {entry.get('id')!r} needs an integer id and the text fields "
                         f"{', '.join(TEXT_FIELDS)}; missing or not text: {wrong}")
    if text["status"] not in STATUSES:
        raise ValueError(f"claim {entry['id']} has the status {text['status']!r}; allowed: "
                         f"{', '.join(STATUSES)}")
    if not _DATE.fullmatch(text["as_of"]) or not _COMMIT.fullmatch(text["commit"]):
        raise ValueError(f"claim {entry['id']} needs as_of as YYYY-MM-DD and commit as 7 to 40 "
                         f"hexadecimal digits, got {text['as_of']!r} and {text['commit']!r}")
    lists = {key: entry.get(key, []) for key in LIST_FIELDS}
    for key, value in lists.items():
        if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
            raise ValueError(f"claim {entry['id']}'s {key} must be a list of names")
    counting = bool(lists["studies"] or lists["checks"])
    if counting == (text["status"] == "untested"):
        raise ValueError(f"claim {entry['id']} is {text['status']} with "
                         f"{len(lists['studies']) + len(lists['checks'])} studies or checks "
                         f"that count: a claim is untested exactly when none counts")
    return Claim(id=entry["id"], **{k: tuple(v) for k, v in lists.items()}, **text)


def read_claims(path: str | Path) -> Claims:
    """The claims file ``path``; ``ValueError`` naming the file where it cannot be read, its
    rule is missing or a claim is malformed."""
    try:
        table = records.load_toml(path, records.BOARD_TABLE).table()
        rule = table.get("rule")
        if not isinstance(rule, str) or not rule.strip():
            raise ValueError("it states no rule (a top-level `rule` text)")
        claims = sorted((_claim(entry) for entry in table.get("claim", [])), key=lambda c: c.id)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"cannot read the claims {str(path)!r}: {error}; pass --claims "
                         f"experiments/results/claims.toml") from None
    if len({c.id for c in claims}) != len(claims):
        raise ValueError(f"the claims {str(path)!r} repeat an id")
    return Claims(rule=rule.strip(), claims=tuple(claims))
