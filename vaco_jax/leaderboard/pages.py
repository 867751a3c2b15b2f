"""The board's pages, as HTML text: the index (per testbed and task, each study's board), a
page per study (its raw scores and files), the claims table and a page per method.

Where each page lies (``*_path``) is decided here, so that every link is written from the
same place it is checked against.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from vaco_jax.leaderboard.board import TaskBoard
from vaco_jax.leaderboard.card import Method, card_target
from vaco_jax.leaderboard.claims import Claims
from vaco_jax.leaderboard.html import Stamp, escape, interval, link, page, table
from vaco_jax.leaderboard.markdown import Target, render, web_only
from vaco_jax.leaderboard.studies import EXPERIMENT_FILE, REPORT_FILE, Skipped, Study
from vaco_jax.report.markdown_text import NOT_NORMALISED, is_scale
from vaco_jax.report.summary_fields import Interval
from vaco_jax.report.summary import Stabilisers

TESTBED_NAMES = {"control": "Control testbed", "tokens": "Token testbed"}


def study_path(study: Study) -> str:
    return f"studies/{study.slug}/index.html"


def board_image(board: TaskBoard) -> str:
    return f"studies/{board.study.slug}/{board.stem}.png"


def method_path(method: Method) -> str:
    return f"methods/{method.slug}.html"


def _study_file(study: Study, name: str) -> str:
    return f"studies/{study.slug}/{name}"


def mechanism_text(record: Stabilisers) -> str:
    """Whether and how much each stabiliser of one (variant, lag) acted: the share of samples
    it touched and of gradient steps at which it acted, or that it never acted."""
    parts = []
    for name, share in sorted(record.present().items()):
        if share.never_acted:
            parts.append(f"{name}: never acted")
            continue
        fraction, acted = share.fraction, share.acted
        parts.append(f"{name}: {'?' if fraction is None else f'{fraction:.1%}'} of samples"
                     + ("" if acted is None else f", acted at {acted:.0%} of steps")
                     + f" ({share.runs_acted} of {share.runs} runs)")
    return "; ".join(parts) or "no stabiliser"


def _mechanisms(study: Study) -> dict[tuple[str, float], str]:
    return {(r.variant, float(r.lag)): mechanism_text(r) for r in study.summary.mechanisms}


def _learning_rates(study: Study, task: str | None = None) -> dict[str, str]:
    return {v.variant: study.learning_rates(v, task) for v in study.summary.run.variants}


def _raw(value: float | Interval | None) -> str:
    """A score in the testbed's units, or its interval, in significant digits."""
    if value is None:
        return "not recorded"
    return interval(value, ".4g") if isinstance(value, Interval) else f"{value:.4g}"


def _board_table(board: TaskBoard) -> str:
    """Every cell of a task's board with the numbers behind it, in the testbed's units too."""
    rates, mechanisms = _learning_rates(board.study, board.task), _mechanisms(board.study)
    rows = []
    for variant in board.order:
        for lag in board.lags:
            score = board.scores.get((variant, lag))
            if score is None:
                continue
            kept = board.kept.get((variant, lag))
            rows.append([escape(variant), f"{lag:g}", escape(rates.get(variant, "")),
                         str(score.runs), _raw(score.raw_initial), _raw(score.raw_final),
                         interval(score.score), interval(score.auc),
                         "-" if kept is None else interval(kept.kept),
                         "-" if kept is None else interval(kept.auc_kept),
                         escape(mechanisms.get((variant, lag), ""))])
    return table(["method", "lag", "learning rate", "runs", "raw initial", "raw final IQM",
                  "normalised score IQM", "normalised AUC IQM", "kept share: final",
                  "kept share: AUC", "stabilisers"], rows, numeric=range(1, 10))


def figure(src: str, alt: str) -> str:
    """An image that opens full size on click (the page shrinks a wide one to its width)."""
    return f'<p><a href="{escape(src)}"><img src="{escape(src)}" alt="{escape(alt)}"></a></p>'


def _study_target(study: Study) -> Target:
    """Where a link of the study's README or report points on its page: a file of the study
    the board carries beside the page (written as `name`, `./name`, with a `#section`), or the
    web; None for anything else."""
    carried = {*study.files, *study.figures}

    def target(href: str) -> str | None:
        name, hash_, section = href.partition("#")
        name = name.removeprefix("./")
        return name + hash_ + section if name in carried else web_only(href)
    return target


def _reproduce(study: Study) -> str:
    """The commands that run the study again from its experiment file, whole or a group (with
    the group that tunes its rate, where the study tunes)."""
    out = escape(f"runs/{study.slug}")
    tuned = "tune" in study.experiment
    groups = "tune-GROUP,GROUP" if tuned else "GROUP"
    return ("<h2>Reproduce</h2><p>From a checkout at the commit above, with the study's "
            f"{link(EXPERIMENT_FILE, EXPERIMENT_FILE)}:</p>"
            f"<pre><code>vaco-jax sweep {EXPERIMENT_FILE} --out {out}</code></pre>"
            "<p>One cell (a method on a task) is one group of the experiment: the plan lists "
            "the groups, and <code>--groups</code> runs some of them"
            + (" (each after the group that tunes its rate)" if tuned else "") + ":</p>"
            f"<pre><code>vaco-jax sweep {EXPERIMENT_FILE} --out {out} --plan\n"
            f"vaco-jax sweep {EXPERIMENT_FILE} --out {out}-GROUP --groups {groups}"
            "</code></pre>")


def study_page(study: Study, boards: Sequence[TaskBoard], stamp: Stamp) -> str:
    files = [link(name, name) for name in (*study.files, *study.figures)]
    target = _study_target(study)
    sections = "".join(
        f"<h2>{escape(board.task)}</h2>"
        + figure(f"{board.stem}.png", f"board of {board.task}")
        + (f'<p class="warning">Not ranked: {escape(board.unranked)}; its methods are in name '
           f'order.</p>' if board.unranked else "")
        + (f'<p class="warning">No kept share: {escape(board.kept_skipped)}.</p>'
           if board.kept_skipped else "")
        + _board_table(board)
        for board in boards)
    normalisation = "; ".join(f"{escape(task)}: 0 = {n.initial:.4g}, 1 = {n.reference:.4g} "
                              f"({escape(n.source)})" if is_scale(n) else
                              f"{escape(task)}: {NOT_NORMALISED}"
                              for task, n in study.summary.normalisation.items())
    body = (f"<p>{escape(study.title)}</p>"
            + (f"<p>Tagged {escape(study.tag)}: {escape(study.verdict)}</p>"
               if study.tag else "")
            + (f'<p class="warning">Incomplete: {escape(study.incomplete)}.</p>'
               if study.incomplete else "")
            + f"<p>Testbed: {escape(study.testbed)}. Report written from commit "
            f"{escape(study.commit())} on {escape(study.devices())}. Normalisation: "
            f"{normalisation}.</p>"
            + ('<p class="warning">Written from a modified checkout: its commit alone does '
               'not reproduce it.</p>' if study.modified else "")
            + f"<p>Package versions: {escape(study.packages())}.</p>"
            f"<p>The study's files: {', '.join(files)}.</p>{sections}"
            + (f"<h2>README</h2>{render(study.readme, target, shift_headings=2)}"
               if study.readme else "")
            + f"<h2>Report</h2>{render(study.report, target, shift_headings=2)}"
            + _reproduce(study))
    return page(f"Study {study.name}", body, stamp, depth=2)


def _task_sections(boards: Sequence[TaskBoard]) -> str:
    by_task: dict[str, list[TaskBoard]] = {}
    for board in boards:
        by_task.setdefault(board.task, []).append(board)
    return "".join(
        f"<h3>Task {escape(task)}</h3>" + "".join(
            f"<h4>{link(study_path(b.study), b.study.name)}</h4>"
            f"<p>{escape(b.study.title)}</p>"
            + (f'<p class="warning">Incomplete: {escape(b.study.incomplete)}.</p>'
               if b.study.incomplete else "")
            + figure(board_image(b), f"board of {b.study.name} on {task}")
            for b in task_boards)
        for task, task_boards in sorted(by_task.items()))


def _by_testbed(boards: Sequence[TaskBoard]) -> str:
    return "".join(f"<h2>{escape(TESTBED_NAMES.get(t, t))}</h2>"
                   + _task_sections([b for b in boards if b.study.testbed == t])
                   for t in sorted({b.study.testbed for b in boards}))


def archive_page(boards: Sequence[TaskBoard], stamp: Stamp) -> str:
    """The boards of the studies tagged calibration, superseded, example or analysis."""
    body = ("<p>The studies that choose cells or rates on the baseline alone (calibrations), "
            "those a later study replaced, the demonstrations of the commands and the analyses "
            "over other studies: none is ranked among the methods on the front page. Each "
            f"study's page says its tag and verdict. {link('index.html', 'Front page')}.</p>"
            + _by_testbed(boards))
    return page("Archive: calibrations, superseded studies, examples", body, stamp, depth=0)


def index_page(boards: Sequence[TaskBoard], skipped: Sequence[Skipped],
               methods: Sequence[Method], stamp: Stamp, archived: int = 0,
               front: str = "") -> str:
    """The front page: ``front``, the tables of the cells where a main study's rule holds
    (``front.front_tables``), then the boards of the main and ablation studies (and of studies
    no tag names); ``archived`` studies are on the archive page."""
    warnings = "".join(f'<li class="warning">{escape(s.name)}: {escape(s.reason)}</li>'
                       for s in skipped)
    def links(older: bool) -> str:
        return ", ".join(link(method_path(m), f"{m.algo} ({m.testbed})") for m in methods
                         if (m.entry is not None and m.entry.superseded_by is not None) == older)
    body = (
        "<p>Each study's board ranks its methods by their lagged score normalised to one "
        "reference for every method (0: the task's initial policies, 1: its reference score), "
        "and beside it shows the share of its own synchronous gain each method keeps, in the "
        "final score and in the area under the learning curve. A method that learns little "
        "without lag keeps a large share of little, so the share alone does not rank. It ranks "
        "only where the study's committed cell rule holds on the task (the baseline learns, "
        "does not saturate, still rises, and lag costs it a clear share); elsewhere the methods "
        "are in name order, marked not ranked. Cells: "
        "IQM over runs with a 95% stratified-bootstrap interval. A study's page holds the raw "
        "scores, the learning rates, whether each stabiliser acted, its report and runs table."
        f' The claims these studies test: {link("claims.html", "claims")}.'
        + (f" {archived} calibrations, superseded studies and examples are on the "
           f"{link('archive.html', 'archive page')}." if archived else "") + "</p>"
        + (f"<p>Studies skipped:</p><ul>{warnings}</ul>" if warnings else "")
        + "<h2>Where the cell holds</h2><p>The cells of each study tagged main on the tasks "
          "where its committed cell rule holds (click a column to sort). Every cell of every "
          f"board: {link('cells.csv', 'cells.csv')}, {link('board.json', 'board.json')}.</p>"
        + front
        + _by_testbed(boards)
        + f'<h2 id="methods">Methods</h2><p>{links(older=False)}</p>'
        + ("<p>Older variants, kept so that the results committed before a fidelity review "
           f"reproduce (each page names the method's default): {older}</p>"
           if (older := links(older=True)) else ""))
    return page("Policy-lag leaderboard", body, stamp, depth=0)


def _study_links(names: Sequence[str], studies: Mapping[str, Study]) -> str:
    """Each study linked with its report; one the results lack named without a link."""
    named = []
    for name in names:
        study = studies.get(name)
        named.append(escape(name) if study is None else
                     f"{link(study_path(study), name)} "
                     f"({link(_study_file(study, REPORT_FILE), 'report')})")
    return "<br>".join(named)


def claims_page(claims: Claims, studies: Mapping[str, Study], stamp: Stamp) -> str:
    """The file's rule, then a row per claim: the studies and checks that count for it, the
    evidence cited, its status, numbers, scale, date and commit, and its figure."""
    rows = []
    for claim in claims.claims:
        counting = "<br>".join(filter(None, [_study_links(claim.studies, studies),
                                             *(escape(c) for c in claim.checks)]))
        first = studies.get(claim.figure_study) if claim.figure_study else None
        figure = (link(_study_file(first, claim.figure), claim.figure)
                  if first is not None and claim.figure in first.figures else "")
        rows.append([str(claim.id), escape(claim.claim), escape(claim.source),
                     counting or "none", _study_links(claim.evidence, studies) or "none",
                     f'<span class="status-{escape(claim.status)}">{escape(claim.status)}</span>',
                     escape(claim.numbers)
                     + (f"<br><em>Scale: {escape(claim.scale)}</em>" if claim.scale else "")
                     + f"<br><em>As of {escape(claim.as_of)}, {escape(claim.commit)}</em>",
                     figure])
    body = ("<p>The claims a lag benchmark must settle, from the founding papers and the "
            "methods' own, and what the committed studies found "
            "(experiments/results/claims.toml), each judged by one rule:</p>"
            f"<blockquote>{escape(claims.rule)}</blockquote>"
            + table(["#", "claim", "source", "counting for it", "evidence only", "status",
                     "numbers", "figure"], rows))
    return page("Claims", body, stamp, depth=0)


def _method_variants(method: Method, study: Study) -> list[str]:
    """The variants of ``study`` that ran ``method`` (none where its testbed is another)."""
    if study.testbed != method.testbed:
        return []
    return [v.variant for v in study.summary.run.variants if v.algo == method.algo]


def _method_rows(method: Method, studies: Sequence[Study]) -> list[list[str]]:
    rows = []
    for study in studies:
        rates, mechanisms = _learning_rates(study), _mechanisms(study)
        for name in _method_variants(method, study):
            acted = "<br>".join(f"lag {lag:g}: {escape(mechanisms.get((name, lag), ''))}"
                                for lag in study.lags if (name, lag) in mechanisms)
            rows.append([link("../" + study_path(study), study.name), escape(name),
                         escape(rates[name]), acted])
    return rows


def _card(method: Method, pages: Collection[str] = ()) -> tuple[str, str]:
    """The sentence that introduces the method's card entry and the entry as HTML, its links to
    the methods of ``pages`` (their slugs) made links to their pages; for a method without
    one, the sentence that says so and where the method comes from."""
    if method.entry is not None:
        target = card_target(method, pages)
        labels = "".join(render(text, target) for _, text in method.entry.shared)
        if labels:
            labels = ("<p>The deviations it names by label, as the card defines them for many "
                      f"entries:</p>{labels}")
        return (f"From the fidelity card (docs/methods/{method.testbed}/{method.algo}.md):",
                render(method.entry.markdown, target) + labels)
    source = (f"it is registered by the plugin's {method.plugin}" if method.plugin else
              "no plugin installed where this board was built registers it")
    return (f"It has no fidelity card entry: docs/methods/ describes vaco_jax's own "
            f"algorithms, and {source}."), ""


def _method_results(method: Method, boards: Sequence[TaskBoard]) -> list[list[str]]:
    """The method's cells on every board of its testbed, a row per study, task, variant and
    lag: its normalised final score and the share of its synchronous gain it kept, both IQM
    [95% CI] as the board shows them, and whether that board ranks its methods."""
    rows = []
    for board in boards:
        ranked = "ranked" if board.unranked is None else "not ranked (cell rule)"
        for variant in sorted(set(_method_variants(method, board.study)) & set(board.order)):
            for lag in board.lags:
                cell, kept = board.scores.get((variant, lag)), board.kept.get((variant, lag))
                if cell is None:
                    continue
                rows.append([link("../" + study_path(board.study), board.study.name),
                             escape(board.task), escape(variant), f"{lag:g}",
                             interval(cell.score), "-" if kept is None else interval(kept.kept),
                             ranked])
    return rows


def method_page(method: Method, studies: Sequence[Study], boards: Sequence[TaskBoard],
                stamp: Stamp, pages: Collection[str] = ()) -> str:
    """A method's page: its card entry (linking the methods of ``pages``, by slug), its results
    on every board and where it ran (learning rate, stabilisers), or that no committed study
    ran it."""
    rows, results = _method_rows(method, studies), _method_results(method, boards)
    sentence, card = _card(method, pages)
    body = (f"<p>{escape(TESTBED_NAMES.get(method.testbed, method.testbed))}, registry name "
            f"<code>{escape(method.algo)}</code>. {escape(sentence)}</p>{card}")
    if not rows:
        return page(f"{method.algo} ({method.testbed})",
                    body + "<h2>Results</h2><p>Not run in any committed study.</p>", stamp,
                    depth=1)
    body += ("<h2>Results</h2><p>Normalised final score (0: the task's initial policies, 1: its "
             "reference) and the share of its own synchronous gain kept, IQM [95% CI], per "
             "study, task and lag; a board ranks its methods only where its study's committed "
             "cell rule holds.</p>"
             + table(["study", "task", "variant", "lag", "normalised score", "kept share",
                      "board"], results, numeric=(3, 4, 5))
             + "<h2>Where it ran</h2>"
             + table(["study", "variant", "learning rate", "stabilisers: did they act"], rows))
    return page(f"{method.algo} ({method.testbed})", body, stamp, depth=1)
