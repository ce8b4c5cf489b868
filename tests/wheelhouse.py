"""The wheels a fresh virtualenv needs to build and install ours without a network.

`make test` runs the suite in a network namespace with loopback only, where pip cannot reach
PyPI. So before it enters the namespace, `python -m tests.wheelhouse .venv/wheelhouse` puts
wheels of our build requirements (setuptools) and core dependencies (temporalio, pydantic,
openai, and theirs) in one folder, from PyPI or pip's cache. `tests/e2e/test_wheel.py` builds
and installs our wheel with `pip --no-index --find-links` that folder. A stamp lists what it
holds, so it is filled again only when pyproject.toml's requirements change.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / ".venv" / "wheelhouse"
STAMP = ".requirements"


def requirements() -> list[str]:
    """The build system's requirements, then the project's core dependencies (no extras)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [*pyproject["build-system"]["requires"], *pyproject["project"]["dependencies"]]


def ready(directory: Path) -> bool:
    """Whether `directory` holds wheels for exactly today's requirements."""
    stamp = directory / STAMP
    return stamp.is_file() and stamp.read_text().splitlines() == requirements()


def fill(directory: Path, *pip_options: str) -> None:
    """Download (or build) the wheels into `directory` unless it is ready; stamp it."""
    stamp = directory / STAMP
    if not ready(directory):
        directory.mkdir(parents=True, exist_ok=True)
        pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(directory)]
        subprocess.run([*pip, *pip_options, *requirements()], check=True)
        stamp.write_text("".join(f"{r}\n" for r in requirements()))
    stamp.touch()  # newer than pyproject.toml: make's target is up to date


if __name__ == "__main__":
    fill(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT)
