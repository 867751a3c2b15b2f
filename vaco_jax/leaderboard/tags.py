"""What each committed study is (``experiments/results/studies.toml``), read once for the board
and for the experiments index: its tag and a one-line verdict.

Tags: ``main`` (its lagged cells compare methods, and the claims rest on it), ``ablation``
(it isolates one mechanism or setting), ``calibration`` (it chooses cells or rates on the
baseline alone), ``superseded`` (a later study replaces it), ``example`` (a demonstration of the
commands) and ``analysis`` (a report computed over other studies' runs, which has no experiment
file of its own). The board's front page holds the main and ablation studies and an archive
page the others; the index lists them all.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from vaco_jax.infra import records

TAGS = ("main", "ablation", "calibration", "superseded", "example", "analysis")
FRONT_TAGS = ("main", "ablation")
"""The tags whose studies the board's front page shows; the others are on its archive page."""
VERDICT_CHARS = 200
TAGS_FILE = "experiments/results/studies.toml"


@dataclasses.dataclass(frozen=True)
class StudyTag:
    name: str
    tag: str
    verdict: str

    @property
    def front(self) -> bool:
        return self.tag in FRONT_TAGS


def _entry(name: str, entry: records.Field) -> StudyTag:
    entry.table(("tag", "verdict"))
    tag = entry["tag"].string(40)
    if tag not in TAGS:
        raise entry["tag"].refuse(f"{tag!r} is not one of {', '.join(TAGS)}")
    verdict = " ".join(entry["verdict"].string(VERDICT_CHARS).split())
    if not verdict:
        raise entry["verdict"].refuse("is empty: say in one line what the study found")
    return StudyTag(name=records.plain_name(name, "a study's name"), tag=tag, verdict=verdict)


def read_tags(path: str | Path) -> dict[str, StudyTag]:
    """Study name -> its tag and verdict, from ``path``; ``ValueError`` naming the file and the
    entry that is not a table with a known ``tag`` and a one-line ``verdict``."""
    try:
        top = records.load_toml(path, records.BOARD_TABLE)
        return {name: _entry(name, entry)
                for name, entry in top.entries(max_len=4096)}
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"cannot read the study tags {str(path)!r}: {error}; pass --tags "
                         f"{TAGS_FILE}") from None
