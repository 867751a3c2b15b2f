"""Experiment files as earlier versions of vaco_jax wrote them, read as today's: a renamed
top-level key is still read under its older name, so that an experiment file written before the
rename runs unchanged, and a sweep started before it resumes and merges."""

from __future__ import annotations

from typing import Any, Mapping

from vaco_jax.infra import records

RENAMED_KEYS = {"reference_returns": "reference_scores"}
"""Older name -> today's name of a top-level key."""


def without_older_keys(spec: Mapping[str, Any]) -> list[str]:
    """The top-level keys of a parsed experiment, those under an older name left out."""
    return [key for key in spec if key not in RENAMED_KEYS]


def given_key(spec: Mapping[str, Any], key: str) -> str:
    """The name `spec` gives `key` under, today's or its older one, so that an error names the
    key the file uses; both at once are refused (ValueError)."""
    for older, now in RENAMED_KEYS.items():
        if now == key and older in spec:
            if key in spec:
                raise ValueError(f"[{key}] and [{older}] are one table ([{older}] is its older "
                                 f"name); give only [{key}]")
            return older
    return key


def read_as_now(source: str) -> dict[str, Any]:
    """The parsed TOML of an experiment file, an older key under its name now."""
    parsed = records.parse_toml(source, "", records.EXPERIMENT).table()
    return {RENAMED_KEYS.get(key, key): value for key, value in parsed.items()}
