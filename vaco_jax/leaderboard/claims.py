"""The claims list (``experiments/results/claims.toml``): each claim a lag benchmark must
settle, where it is made, the studies that test it, and what they found."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from vaco_jax.infra import records

STATUSES = ("reproduced", "refuted", "mixed", "untested")
TEXT_FIELDS = ("claim", "source", "status", "numbers", "figure", "scale")


@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim: ``studies`` name folders of the results (none where it is untested) and
    ``figure`` a figure of the first of them (empty for none)."""

    id: int
    claim: str
    source: str
    studies: tuple[str, ...]
    status: str
    numbers: str
    figure: str
    scale: str


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
    studies = entry.get("studies", [])
    if not isinstance(studies, list) or not all(isinstance(s, str) for s in studies):
        raise ValueError(f"claim {entry['id']}'s studies must be a list of folder names")
    if bool(studies) == (text["status"] == "untested"):
        raise ValueError(f"claim {entry['id']} is {text['status']} with "
                         f"{len(studies)} studies: a claim is untested exactly when none tests it")
    return Claim(id=entry["id"], studies=tuple(studies), **text)


def read_claims(path: str | Path) -> list[Claim]:
    """The claims in ``path``, by id; ``ValueError`` naming the file where it cannot be read or
    a claim is malformed."""
    try:
        entries = records.load_toml(path, records.BOARD_TABLE).table().get("claim", [])
        claims = sorted((_claim(entry) for entry in entries), key=lambda c: c.id)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"cannot read the claims {str(path)!r}: {error}; pass --claims "
                         f"experiments/results/claims.toml") from None
    if len({c.id for c in claims}) != len(claims):
        raise ValueError(f"the claims {str(path)!r} repeat an id")
    return claims
