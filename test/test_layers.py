"""The import graph of src/teachbot: the layers of .importlinter, no private name across packages, and
function-local imports only where they defer a heavy or optional dependency (with a comment saying which)."""

from __future__ import annotations

import ast
import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from timing import timeout

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "teachbot"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _sources() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _package(path: Path) -> str:
    """teachbot.<first part> of a source file: the unit the layers are made of."""
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:2]) if parts[1] != "__init__" else "teachbot"


def _lint_imports(src_root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src_root)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo", str(ROOT / ".importlinter")], cwd=src_root, env=env,
                          capture_output=True, text=True, timeout=timeout(300))


def test_every_package_is_in_a_layer():
    """A new package or top-level module that no layer names would escape the contract."""
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    named = {name.strip(" ()") for line in config["importlinter:contract:layers"]["layers"].split("\n")
             for name in line.split("|") if name.strip()}
    top = {f"teachbot.{p.stem if p.is_file() else p.name}" for p in SRC.iterdir()
           if (p.is_file() and p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert top - named == set(), f"add these to a layer of .importlinter: {sorted(top - named)}"
    assert named - top == set(), f".importlinter names what src/teachbot lacks: {sorted(named - top)}"


def test_the_contracts_hold_and_catch_an_import_against_them(tmp_path):
    """The tree keeps both contracts; a copy with a lower layer importing a higher one, and with rclpy
    outside nodes/, breaks both, and lint-imports names the imports."""
    assert LINT_IMPORTS.is_file(), "lint-imports is missing; run `make setup`"
    kept = _lint_imports(SRC.parent)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    copy = tmp_path / "src"
    shutil.copytree(SRC, copy / "teachbot", ignore=shutil.ignore_patterns("__pycache__"))
    with (copy / "teachbot" / "language" / "prompts.py").open("a") as f:
        f.write("\nfrom teachbot.nodes import common  # noqa: E402\n")
    with (copy / "teachbot" / "console" / "prompt.py").open("a") as f:
        f.write("\nimport rclpy  # noqa: E402\n")
    broken = _lint_imports(copy)
    assert broken.returncode != 0
    assert "teachbot.language is not allowed to import teachbot.nodes" in broken.stdout, broken.stdout
    assert "teachbot.language.prompts -> teachbot.nodes.common" in broken.stdout, broken.stdout
    assert "teachbot.console.prompt -> rclpy" in broken.stdout, broken.stdout
    assert "Contracts: 0 kept, 2 broken." in broken.stdout, broken.stdout


def test_no_private_name_is_imported_from_another_package():
    found = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.level or not (node.module or "").startswith("teachbot"):
                continue
            if ".".join(node.module.split(".")[:2]) == _package(path):
                continue
            private = [a.name for a in node.names if a.name.startswith("_")] + [p for p in node.module.split(".") if p.startswith("_")]
            if private:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {', '.join(private)} from {node.module}")
    assert found == [], "make these public in the layer where they belong, or don't use them:\n" + "\n".join(found)


class _LocalImports(ast.NodeVisitor):
    def __init__(self) -> None:
        self.depth = 0
        self.found: list[ast.Import | ast.ImportFrom] = []

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = _function  # noqa: N815 - the NodeVisitor protocol

    def _import(self, node: ast.Import | ast.ImportFrom) -> None:
        if self.depth:
            self.found.append(node)

    visit_Import = visit_ImportFrom = _import  # noqa: N815


def test_function_local_imports_say_what_they_defer():
    """An import inside a function must defer something heavy or optional (torch, rclpy, a command's stack),
    with a '# deferred: <what>' comment on its line or the line above; dodging a cycle is not a reason."""
    unexplained = []
    for path in _sources():
        lines = path.read_text().splitlines()
        visitor = _LocalImports()
        visitor.visit(ast.parse("\n".join(lines)))
        for node in visitor.found:
            near = lines[node.lineno - 1: node.end_lineno] + ([lines[node.lineno - 2]] if node.lineno > 1 else [])
            if not any("# deferred:" in line for line in near):
                unexplained.append(f"{path.relative_to(ROOT)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert unexplained == [], "move these to the module's top, or say what they defer:\n" + "\n".join(unexplained)


@pytest.mark.parametrize("line", ["from teachbot.nodes import common", "import rclpy"])
def test_the_local_import_check_finds_an_unexplained_import(tmp_path, line):
    module = tmp_path / "m.py"
    module.write_text(f"def f():\n    {line}\n    return 1\n\n\ndef g():\n    {line}  # deferred: rclpy\n")
    visitor = _LocalImports()
    visitor.visit(ast.parse(module.read_text()))
    lines = module.read_text().splitlines()
    flagged = [n.lineno for n in visitor.found if "# deferred:" not in lines[n.lineno - 1]]
    assert flagged == [2]


def test_the_map_names_files_that_exist():
    """docs/architecture.md names a file or folder of src/teachbot at each step; a move must update it."""
    import re

    text = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`([a-z_/]+(?:\.py|/))`", text))
    assert len(named) > 40
    missing = sorted(n for n in named if not n.startswith(("src/", "test/", "prompts/")) and not (SRC / n).exists())
    assert missing == [], f"docs/architecture.md names what src/teachbot lacks: {missing}"
