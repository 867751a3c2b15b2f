"""The docs are checked against the code: the layout page (`docs/layout.md`), the Python API
page's public-function tables and its example (`docs/api.md`), and the README's length (a front
door of at most 300 lines, its depth in the docs)."""

import importlib
import inspect
import posixpath
import re
from pathlib import Path

import jax
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PACKAGE = ROOT / "vaco_jax"
PUBLIC_MODULES = ("vaco_jax.estimators", "vaco_jax.losses", "vaco_jax.report",
                  "vaco_jax.report.stats", "vaco_jax.report.collapse")
"""The public library: every name they export is in the API page's tables."""
README_MAX_LINES = 300


def _section(page: str, title: str) -> str:
    text = (DOCS / page).read_text()
    start = text.index(f"\n{title}\n") if not text.startswith(f"{title}\n") else 0
    end = text.find("\n## ", start + len(title) + 2)
    return text[start:end if end >= 0 else len(text)]


def _code_block(section: str, language: str = "") -> str:
    return re.search(rf"```{language}\n(.*?)```", section, re.S).group(1)


def _layout_paths() -> set[str]:
    """The paths the layout tree names: two spaces of indentation per folder level."""
    paths, folders = set(), []
    for line in _code_block(_section("layout.md", "# Layout")).splitlines():
        match = re.match(r"( *)(\S+)", line)
        if not match or not re.fullmatch(r"[\w.]+/?", match.group(2)):
            continue
        depth, name = len(match.group(1)) // 2, match.group(2)
        folders[depth:] = []
        path = "/".join(folders + [name.rstrip("/")])
        if name.endswith("/"):
            folders.append(name.rstrip("/"))
        paths.add(path)
    return paths


def _package_paths() -> set[str]:
    paths = set()
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(ROOT)
        if path.name not in ("__init__.py", "__main__.py"):
            paths.add(relative.as_posix())
        paths.update(parent.as_posix() for parent in relative.parents if parent.name)
    return paths


def test_layout_names_every_module_and_package_and_nothing_else():
    named, present = _layout_paths(), _package_paths()
    assert sorted(present - named) == [], "modules missing from docs/layout.md"
    assert sorted(n for n in named - present if n.startswith("vaco_jax")) == [], \
        "docs/layout.md names modules that do not exist"


def _exported(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [name for name, value in vars(module).items()
            if not name.startswith("_") and (inspect.isfunction(value) or inspect.isclass(value))
            and value.__module__ == module_name]


def test_every_exported_name_of_the_public_library_is_documented():
    tables = _section("api.md", "## Public functions")
    missing = [f"{module}.{name}" for module in PUBLIC_MODULES for name in _exported(module)
               if not re.search(rf"`(\w+\.)?{re.escape(name)}\b", tables)]
    assert missing == []


def test_python_api_example_runs_on_toy_reach():
    example = _code_block(_section("api.md", "# Python API"), "python")
    small = re.sub(r'env="\w+"', 'env="toy_reach"', example)
    small = small.replace("num_envs=64, rollout_length=32, total_steps=100_000",
                          "num_envs=8, rollout_length=8, total_steps=640")
    assert small != example, "the example's task and sizes are no longer where this test looks"
    scope: dict = {}
    exec(compile(small, "docs/api.md", "exec"), scope)
    metrics = scope["metrics"]
    assert metrics["eval_return"].shape[0] == 4  # four runs in one program
    assert np.isfinite(np.asarray(metrics["policy_loss"])).all()
    assert isinstance(scope["state"].update, jax.Array)


def test_the_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines; depth belongs in docs/ (at most {README_MAX_LINES})")


def test_the_benchmarks_readme_is_a_front_door_to_its_notes():
    """`benchmarks/README.md` keeps each benchmark's command and latest figure within the front
    door's length; the dated measurements are notes it lists, each there, and every file a note
    shows or links to exists."""
    folder = ROOT / "benchmarks"
    readme = (folder / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    listed = set(re.findall(r"\(results/notes/([\w.-]+\.md)\)", readme))
    notes = folder / "results" / "notes"
    assert listed == {p.name for p in notes.glob("*.md")}
    for note in notes.glob("*.md"):
        for target in re.findall(r"\]\(([^)#\s]+)\)", note.read_text()):
            assert target.startswith("http") or (note.parent / target).exists(), (note.name,
                                                                                 target)


def _heading_ids(text: str) -> set[str]:
    """The anchors the site gives a page's headings, as Python-Markdown's `toc` makes them
    (mkdocs.yml): the heading's text without its Markdown, lower-cased, every character but
    letters, digits, `_`, `-` and spaces dropped, spaces and hyphens runs joined by `-`; a
    repeated id gets `_1`, `_2`, ... in page order. Fenced code is not a heading."""
    ids: set[str] = set()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", text, re.M):
        plain = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
        slug = re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", plain).strip().lower())
        unique, count = slug, 0
        while unique in ids:
            count += 1
            unique = f"{slug}_{count}"
        ids.add(unique)
    return ids


def test_every_anchor_a_docs_page_links_to_exists():
    """In-page (`(#id)`) and cross-page (`(page.md#id)`) links of the docs point at headings
    the built site has (mkdocs reports a missing anchor only at INFO, so `--strict` passes)."""
    pages = {p.relative_to(DOCS).as_posix(): p.read_text() for p in DOCS.rglob("*.md")}
    ids = {name: _heading_ids(text) for name, text in pages.items()}
    broken = []
    for name, text in pages.items():
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        for target, anchor in re.findall(r"\]\(([\w./-]*)#([^)\s]+)\)", prose):
            page = posixpath.normpath(posixpath.join(posixpath.dirname(name), target)) \
                if target else name
            if page not in ids or anchor not in ids[page]:
                broken.append(f"{name}: ({target}#{anchor})")
    assert broken == []


MAX_MODULE_LINES = 450
"""A room holds one job in a few hundred lines: past this a module is split (the layout page
names each room)."""


def test_no_module_of_the_package_or_the_benchmarks_is_over_its_limit():
    long = {path.relative_to(ROOT).as_posix(): lines
            for folder in (PACKAGE, ROOT / "benchmarks") for path in folder.rglob("*.py")
            if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}
