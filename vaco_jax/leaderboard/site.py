"""``build_site``: the leaderboard as a static site, written like every vaco_jax output.

Inputs are read and checked first (the studies, the claims, the fidelity card), so that a
refused input writes nothing. The folder is then locked and prepared as any output folder is
(``infra.lock``, ``io.prepare_output_dir``): a folder another process writes is refused, and
one holding anything unless ``overwrite``, which removes only what an earlier board wrote
there. Every file is written atomically and recorded in the folder's manifest; ``studies/``
and ``methods/`` are recorded whole.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import os
import types
from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib.figure import Figure

from vaco_jax.infra import io, manifest, records
from vaco_jax.infra.lock import folder_lock
from vaco_jax.infra.provenance import code_version
from vaco_jax.leaderboard import front as front_tables
from vaco_jax.leaderboard import pages
from vaco_jax.leaderboard.board import TaskBoard, task_boards
from vaco_jax.leaderboard.card import methods, read_card
from vaco_jax.leaderboard.claims import read_claims
from vaco_jax.leaderboard.figures import figure_board
from vaco_jax.leaderboard.front import BOARD_FILE, CELLS_FILE
from vaco_jax.leaderboard.html import STYLE, STYLE_FILE, Stamp
from vaco_jax.leaderboard.studies import Skipped, Study, read_studies, regular_file
from vaco_jax.leaderboard.tags import FRONT_TAGS, StudyTag

FOLDERS = ("studies", "methods")
WRITES = ("index.html", "archive.html", "claims.html", STYLE_FILE, CELLS_FILE, BOARD_FILE,
          *FOLDERS)
"""What a board writes in its folder (``io.prepare_output_dir``'s ``writes``)."""
DPI = 110


@dataclasses.dataclass(frozen=True)
class Built:
    """What ``build_site`` wrote: its pages (paths relative to the folder) and the studies it
    skipped."""

    out: Path
    pages: tuple[str, ...]
    skipped: tuple[Skipped, ...]


def _boards(studies: Sequence[Study]) -> tuple[dict[str, list[TaskBoard]], list[Skipped]]:
    """Each study's boards; a study whose records do not make one is skipped."""
    boards, skipped = {}, []
    for study in studies:
        try:
            boards[study.name] = task_boards(study)
        except (TypeError, ValueError, AttributeError) as error:
            skipped.append(Skipped(study.name, f"{type(error).__name__}: {error}"))
    return boards, skipped


def stamp(studies: Sequence[Study]) -> Stamp:
    """The code this board is built from, today's date, and the studies' devices."""
    code = code_version()
    commit = ("not a git checkout" if code is None else
              code["commit"][:10] + (" (modified)" if code["modified"] else ""))
    devices = collections.Counter(study.devices() for study in studies)
    return Stamp(commit=commit,
                 date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                 devices="; ".join(f"{kind}: {count} stud{'y' if count == 1 else 'ies'}"
                                   for kind, count in sorted(devices.items())) or "no studies")


def _copy(source: Path, target: Path) -> None:
    """Copies a plain file of the results; a link or a folder is never read."""
    if regular_file(source):
        data = records.read_bytes(source, records.STUDY_FILE)
        io.atomic_write(target, lambda temporary: Path(temporary).write_bytes(data))


def _save(figure: Figure, path: Path) -> None:
    io.atomic_write(path, lambda temporary: figure.savefig(temporary, format="png", dpi=DPI))


def _write_study(out: Path, study: Study, boards: Sequence[TaskBoard], page_stamp: Stamp) -> str:
    folder = out / "studies" / study.slug
    for name in (*study.files, *study.figures):
        _copy(study.folder / name, folder / name)
    for board in boards:
        _save(figure_board(board), folder / f"{board.stem}.png")
    io.write_text(out / pages.study_path(study), pages.study_page(study, boards, page_stamp))
    return pages.study_path(study)


def build_site(
    out: str | os.PathLike[str], results: str | os.PathLike[str], claims: str | os.PathLike[str],
    card: str | os.PathLike[str], *, overwrite: bool = False, keep: Sequence[str] = (),
    plugins: Mapping[tuple[str, str], str] = types.MappingProxyType({}),
    tags: Mapping[str, StudyTag] = types.MappingProxyType({}),
) -> Built:
    """Builds the board of every study under ``results`` into ``out``: ``index.html``,
    ``claims.html``, ``studies/NAME/index.html`` (with the study's report, runs table,
    summary, experiment and figures beside it) and ``methods/TESTBED-ALGO.html``, one per
    method of the ``card`` and per algorithm a study ran that it lacks (an installed plugin's
    is named by its entry point in ``plugins``, by (testbed, algorithm)). A study ``tags``
    names (by its top folder) carries its tag and verdict; the front page shows the boards of
    the main and ablation studies and of those no tag names, ``archive.html`` the others."""
    if Path(results).resolve() in (Path(out).resolve(), *Path(out).resolve().parents):
        # The board copies each study's summary.json: the next build would find them as studies.
        raise ValueError(f"the site folder {str(out)!r} lies inside the results folder "
                         f"{str(results)!r}; choose a folder outside it")
    studies, skipped = read_studies(results)
    studies = [_tagged(study, tags) for study in studies]
    boards, unboarded = _boards(studies)
    studies = [study for study in studies if study.name in boards]
    claims_file = read_claims(claims)
    method_list = methods(read_card(card), {(study.testbed, variant.algo) for study in studies
                                            for variant in study.summary.run.variants}, plugins)
    page_stamp = stamp(studies)

    all_skipped = (*skipped, *unboarded)
    io.check_output_dir(out)  # before the lock makes the folder
    with folder_lock(out):  # one writer at a time: another's overwrite would remove our files
        root = io.prepare_output_dir(out, overwrite=overwrite, keep=keep, writes=WRITES,
                                     resumable=False)
        manifest.record(root, {folder: manifest.TREE for folder in FOLDERS})
        io.write_text(root / STYLE_FILE, STYLE)
        written = [_write_study(root, study, boards[study.name], page_stamp)
                   for study in studies]
        all_boards = [board for study in studies for board in boards[study.name]]
        slugs = {method.slug for method in method_list}
        for method in method_list:
            io.write_text(root / pages.method_path(method),
                          pages.method_page(method, studies, all_boards, page_stamp, slugs))
            written.append(pages.method_path(method))
        by_name = {study.name: study for study in studies}
        io.write_text(root / "claims.html", pages.claims_page(claims_file, by_name, page_stamp))
        front = [study for study in studies if study.tag in (None, *FRONT_TAGS)]
        archived = [study for study in studies if study not in front]
        made = front_tables.cells(all_boards)
        io.write_text(root / CELLS_FILE, front_tables.cells_csv(made))
        io.write_text(root / BOARD_FILE, front_tables.board_json(made, page_stamp.text()))
        io.write_text(root / "index.html", pages.index_page(
            [board for study in front for board in boards[study.name]], all_skipped,
            method_list, page_stamp, archived=len(archived),
            front=front_tables.front_tables(made)))
        io.write_text(root / "archive.html", pages.archive_page(
            [board for study in archived for board in boards[study.name]], page_stamp))
    return Built(out=root, pages=("index.html", "archive.html", "claims.html", *written),
                 skipped=tuple(all_skipped))


def _tagged(study: Study, tags: Mapping[str, StudyTag]) -> Study:
    """``study`` with the tag and verdict ``tags`` gives its top folder, if any."""
    entry = tags.get(study.tag_name)
    return study if entry is None else dataclasses.replace(study, tag=entry.tag,
                                                           verdict=entry.verdict)
