"""The distribution owns one top-level import name, ``poolfuzz``; the repository keeps its folders.

``harness/``, ``pools/`` and ``strategies/`` install as ``poolfuzz.harness``, ``poolfuzz.pools`` and
``poolfuzz.strategies`` (``[tool.setuptools]`` in ``pyproject.toml``), so a project with its own
``pools.py`` or ``harness/`` imports both (``tests/test_pytest_plugin.py`` runs one).  The package
list is explicit, as a renamed folder needs; these checks keep it whole.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("harness", "pools", "strategies")


def _setuptools() -> dict[str, object]:
    table: dict[str, object] = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    return table


def test_every_package_folder_is_listed_under_its_poolfuzz_name_and_nothing_else_is() -> None:
    on_disk = {
        "poolfuzz." + ".".join(init.parent.relative_to(REPO).parts)
        for folder in FOLDERS
        for init in (REPO / folder).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    listed = _setuptools()["packages"]
    assert isinstance(listed, list)
    assert sorted(listed) == sorted(on_disk)


def test_each_folder_installs_under_poolfuzz_and_no_other_top_level_name_is_claimed() -> None:
    assert _setuptools()["package-dir"] == {f"poolfuzz.{folder}": folder for folder in FOLDERS}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"poolfuzz": "poolfuzz.harness.cli:main"}
    assert project["entry-points"]["pytest11"] == {"poolfuzz": "poolfuzz.harness.pytest_plugin"}


def test_no_module_imports_our_folders_by_their_repository_names() -> None:
    """``import pools`` inside poolfuzz would import a user's own ``pools.py`` once installed."""
    wrong: list[str] = []
    for folder in (*FOLDERS, "tests"):
        for path in (REPO / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                wrong += [f"{path.relative_to(REPO)}:{node.lineno} {name}" for name in names if name.split(".")[0] in FOLDERS]
    assert wrong == []
