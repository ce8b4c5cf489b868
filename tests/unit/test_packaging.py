"""One installed package, `hitl`: nothing we ship can collide with a user's own packages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT


def test_a_users_own_workflows_package_does_not_shadow_ours(tmp_path: Path) -> None:
    """The usual Temporal layout has its own `workflows/` (and often `activities/`, `worker/`):
    run from such a project, our worker still finds its own code, and theirs stays theirs."""
    for name in ("workflows", "activities", "worker", "examples"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"MINE = 'the user\\'s {name}'\n")
    code = (
        "import hitl.worker.build, hitl.activities.tools, hitl.examples.refund_desk\n"
        "import workflows, activities, worker, examples\n"
        "print(workflows.MINE, activities.MINE, worker.MINE, examples.MINE)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [
        "the",
        "user's",
        "workflows",
        "the",
        "user's",
        "activities",
        "the",
        "user's",
        "worker",
        "the",
        "user's",
        "examples",
    ]
    help_text = subprocess.run(
        [sys.executable, "-m", "hitl.worker", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert help_text.returncode == 0 and "--agents" in help_text.stdout, help_text.stderr


def test_the_repository_folders_are_the_subpackages() -> None:
    """workflows/, activities/, worker/ and examples/ stay at the top of the repository and are
    `hitl.<name>` (symlinks), so there is one copy of each module, under one name."""
    for name in ("workflows", "activities", "worker", "examples"):
        link = ROOT / "hitl" / name
        assert link.is_symlink() and link.resolve() == (ROOT / name).resolve(), name


def test_the_layering_contract_covers_every_client_module() -> None:
    """`make lint` checks that the client API never imports worker, workflow or activity code
    (but through hitl.serving): a new module must be in that contract, or it is unchecked."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [client] = [c for c in config["contracts"] if "client API" in c["name"]]
    on_disk = {f"hitl.{p.stem}" for p in (ROOT / "hitl").glob("*.py") if p.stem != "__init__"}
    packages = {f"hitl.{p.parent.name}" for p in (ROOT / "hitl").glob("*/__init__.py")}
    ours = {"hitl.workflows", "hitl.activities", "hitl.worker", "hitl.examples"}
    entry_points = {"hitl.serving", "hitl.testing"}
    assert set(client["source_modules"]) == (on_disk | packages) - ours - entry_points
