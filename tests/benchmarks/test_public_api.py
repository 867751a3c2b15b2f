"""`benchmarks/` uses the package's public API only: every module it imports from `vaco_jax` is
one the API page lists as public (`docs/api.md`, "What is public"), every name is public there
(no leading `_`, in the module's `__all__` where it has one). The GPU campaign's lease tooling
(`benchmarks/campaign/`) is the stated exception."""

import ast
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def public_modules() -> set[str]:
    """The modules of the API page's "What is public" table."""
    text = (ROOT / "docs" / "api.md").read_text()
    section = text[text.index("\n## What is public\n"):]
    return set(re.findall(r"^\| `(vaco_jax[\w.]*)` \|", section, flags=re.M))


def imported(source: str) -> list[tuple[int, str, str | None]]:
    """(line, module, name) of each import from `vaco_jax` in `source`; name None for
    `import module`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] == "vaco_jax":
            found += [(node.lineno, node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, None) for alias in node.names
                      if alias.name.split(".")[0] == "vaco_jax"]
    return found


def refusals(module: str, name: str | None, public: set[str]) -> str | None:
    """Why importing `name` from `module` (or `module` itself) leaves the public API; None
    where it does not."""
    if name is None:
        return None if module in public else f"{module} is not a public module"
    target = importlib.import_module(module)
    # `from package import module`, whether or not something imported the module already.
    if hasattr(target, "__path__") and importlib.util.find_spec(f"{module}.{name}") is not None:
        submodule = f"{module}.{name}"
        return None if submodule in public else f"{submodule} is not a public module"
    if module not in public:
        return f"{module} is not a public module"
    if name.startswith("_"):
        return f"{module}.{name} is private"
    exported = getattr(target, "__all__", None)
    if exported is not None and name not in exported:
        return f"{module}.{name} is not in its __all__"
    return None


def test_the_public_table_names_modules_that_exist():
    public = public_modules()
    assert {"vaco_jax.losses", "vaco_jax.experiment", "vaco_jax.run.driver"} <= public
    for module in public:
        importlib.import_module(module)


def test_the_benchmarks_outside_the_campaign_import_only_the_public_api():
    public = public_modules()
    leaks = []
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        for line, module, name in imported(path.read_text()):
            why = refusals(module, name, public)
            if why:
                leaks.append(f"benchmarks/{path.name}:{line}: {why}")
    assert leaks == []


@pytest.mark.parametrize("source, expected", [
    ("from vaco_jax.experiment.execute import _driver_arguments",
     "vaco_jax.experiment.execute is not a public module"),
    ("from vaco_jax.losses import _helper", "vaco_jax.losses._helper is private"),
    ("from vaco_jax.experiment import execute",
     "vaco_jax.experiment.execute is not a public module"),
    ("from vaco_jax.experiment import Group", None),
    ("import vaco_jax.infra.lock", "vaco_jax.infra.lock is not a public module"),
    ("from vaco_jax.infra import io", None),
])
def test_the_check_refuses_internals(source, expected):
    [(_, module, name)] = imported(source)
    assert refusals(module, name, public_modules()) == expected
