"""The project's own rules, run by the test command: ruff, mypy, import-linter, README/CI."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_ruff_is_clean() -> None:
    result = run_tool("ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_code_is_ruff_formatted() -> None:
    result = run_tool("ruff", "format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean_and_strict_on_shared() -> None:
    result = run_tool("mypy", "shared", "workers", "producers", "beat_schedule.py")
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_rules_hold() -> None:
    lint_imports = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint_imports, "import-linter is part of the dev extra"
    result = subprocess.run([lint_imports], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "broken" not in result.stdout.lower().replace("0 broken", "")


STORE_PACKAGES = {"db", "store", "pipeline", "search"}


def test_the_sql_contract_covers_all_of_shared_but_the_store_packages() -> None:
    """The contract lists shared's other modules one by one (import-linter has no "all but"):
    a module added under shared/ must join the list, or it could speak SQL unnoticed."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if "speak SQL" in c["name"]]
    listed = {m.removeprefix("shared.") for m in contract["source_modules"] if "." in m}
    present = {
        path.stem if path.is_file() else path.name
        for path in (ROOT / "shared").iterdir()
        if (path.suffix == ".py" and path.stem != "__init__")
        or (path.is_dir() and (path / "__init__.py").exists())
    }
    assert present - STORE_PACKAGES - listed == set()
    assert listed <= present
    assert {"workers", "producers"} <= set(contract["source_modules"])


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", section)


def test_readme_has_two_commands_and_ci_runs_the_test_one() -> None:
    commands = _readme_commands()
    assert len(commands) == 2, commands
    ci = (ROOT / ".ci" / "run").read_text()
    assert commands[1] in ci, "the test command in README.md must be what .ci/run runs"


@pytest.mark.parametrize("path", ["pyproject.toml", "README.md", ".ci/run", "beat_schedule.py"])
def test_project_files_exist(path: str) -> None:
    assert (ROOT / path).is_file()


def test_beat_schedule_is_data_only() -> None:
    """beat_schedule.py names tasks by string; it may import schedule types and nothing else."""
    import ast

    tree = ast.parse((ROOT / "beat_schedule.py").read_text())
    allowed = {"celery.schedules", "datetime", "__future__"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = {alias.name for alias in node.names}
            assert names <= allowed, f"beat_schedule.py imports {names - allowed}"
        elif isinstance(node, ast.ImportFrom):
            assert node.module in allowed, f"beat_schedule.py imports from {node.module}"
        assert not isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef), (
            "beat_schedule.py holds data, not logic"
        )


# The scripts; the rest of bench/ (common.py, corpus*.py, pipeline_*.py, …) are their modules.
BENCHES = sorted(
    p.name for p in (ROOT / "bench").glob("*.py") if 'if __name__ == "__main__":' in p.read_text()
)


@pytest.mark.parametrize("script", BENCHES)
def test_every_bench_script_starts_as_the_readme_runs_it(script: str, tmp_path: Path) -> None:
    """`python bench/X.py --help` from a directory outside the repo: imports resolve, help shows."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "--quick" in result.stdout
    assert f"bench/{script}" in (ROOT / "README.md").read_text(), f"README does not list {script}"
