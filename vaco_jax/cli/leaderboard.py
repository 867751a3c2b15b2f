"""`vaco-jax leaderboard`: the lag-robustness leaderboard of the committed studies, as a static
site (HTML, CSS and PNG figures; no server, no script)."""

from __future__ import annotations

import sys
from pathlib import Path

from vaco_jax import testbeds
from vaco_jax.cli.common import add_overwrite_flags, check_keep_flags, folder, plain
from vaco_jax.infra import io
from vaco_jax.leaderboard.tags import TAGS_FILE, read_tags


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "leaderboard", help="build the lag-robustness leaderboard of the committed studies as a "
                            "static site: per task each study's board, the claims table and a "
                            "page per method")
    p.add_argument("--out", type=folder, required=True, metavar="DIR", help="folder of the site")
    p.add_argument("--results", default="experiments/results", metavar="DIR",
                   help="folder of the studies (each folder holding a summary.json)")
    p.add_argument("--claims", default="experiments/results/claims.toml", metavar="FILE",
                   help="the claims list")
    p.add_argument("--card", default="docs/methods", metavar="FOLDER",
                   help="the fidelity card's folder: TESTBED/NAME.md per method")
    p.add_argument("--tags", default=None, metavar="FILE",
                   help="what each study is (main, ablation, calibration, superseded, example, "
                        "analysis) and its verdict: the front page shows the main and ablation "
                        "studies and those it does not name, an archive page the others "
                        f"(default: {TAGS_FILE} where it exists)")
    p.add_argument("--index", default=None, metavar="FILE",
                   help="also write the experiments index, every experiment file of FILE's folder "
                        "and every study in one Markdown table "
                        "(experiments/INDEX.md); an existing FILE only with --overwrite")
    add_overwrite_flags(p, "the site in an existing DIR")


def plugin_algorithms() -> dict[tuple[str, str], str]:
    """(testbed, algorithm) -> the entry point that registers it, of every algorithm an
    installed plugin registers: the board names it on the algorithm's page, which has no
    fidelity card entry."""
    return {(name, algo): source for name, testbed in testbeds.TESTBEDS.items()
            for algo in testbed.algorithms() if (source := testbed.registered_by(algo))}


def run_leaderboard(args) -> int:
    # Imported here: the board draws with matplotlib, a second's import that every other
    # command (and each child process of a sweep) would pay.
    from vaco_jax.leaderboard.index import index_markdown
    from vaco_jax.leaderboard.site import build_site
    check_keep_flags(args)
    tags_file = args.tags or (TAGS_FILE if Path(TAGS_FILE).is_file() else None)
    if args.index and tags_file is None:
        raise ValueError(f"--index needs the study tags: pass --tags FILE ({TAGS_FILE})")
    tags = read_tags(tags_file) if tags_file else {}
    if args.index:
        index = Path(args.index)
        if (index.exists() or index.is_symlink()) and not args.overwrite:
            raise FileExistsError(f"the index {str(index)!r} exists; pass --overwrite to write "
                                  f"it again")
    built = build_site(args.out, args.results, args.claims, args.card,
                       overwrite=args.overwrite, keep=args.keep, plugins=plugin_algorithms(),
                       tags=tags)
    if args.index:
        # The index lists the experiment files of its own folder, linked from there.
        io.write_text(args.index, index_markdown(Path(args.index).parent, Path(args.results),
                                                 tags))
        print(f"experiments index: {plain(args.index)}")
    for skipped in built.skipped:
        print(f"vaco-jax leaderboard: warning: skipped the study {plain(skipped.name)}: "
              f"{plain(skipped.reason)}", file=sys.stderr)
    out = plain(built.out)
    print(f"leaderboard: {out}/index.html ({len(built.pages)} pages; claims in "
          f"{out}/claims.html)")
    return 0
