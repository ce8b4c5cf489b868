"""The package as users get it: the built wheel, complete from any checkout, installed with no
extras in a fresh virtualenv, starting and approving a run against our worker.

The wheel and the virtualenv are built once per session from a copy of the source tree. pip
reads nothing but the wheelhouse (`tests/wheelhouse.py`; `make test` fills it before entering
its network namespace), so this works with no network.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from temporalio.client import Client

from hitl.worker.devserver import DevServer
from tests import wheelhouse as wh
from tests.agents import support_agent
from tests.helpers import ROOT, serving

pytestmark = pytest.mark.timeout(300)

FOLDERS = ("hitl", "workflows", "activities", "worker", "examples")
"""What the build maps into the one package, `hitl` (pyproject.toml: package-dir)."""
EXTRAS_MODULES = ("aioboto3", "cryptography", "jinja2", "mcp", "opentelemetry", "starlette")
WORKER_SIDE = ("hitl.workflows", "hitl.activities", "hitl.worker", "hitl.console", "hitl.examples")


def _pip_env() -> dict[str, str]:
    """The environment without pip settings of this machine (extra indexes, find-links):
    what pip installs comes from the wheelhouse alone."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}


def _run(*cmd: str | Path, cwd: Path | None = None, timeout: float = 240) -> str:
    out = subprocess.run(
        [str(c) for c in cmd],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=_pip_env(),
    )
    assert out.returncode == 0, f"{cmd}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def copy_sources(dest: Path, *, symlinks: bool = True) -> Path:
    """The build's inputs, copied. `symlinks=False` writes each symlink the way git checks it
    out with `core.symlinks=false` (Windows' default): a text file holding the link's target."""
    dest.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, dest / folder, symlinks=True, ignore=ignore)
    if not symlinks:
        for link in [p for p in (dest / "hitl").iterdir() if p.is_symlink()]:
            target = os.readlink(link)
            link.unlink()
            link.write_text(target)
    return dest


def build_wheel(src: Path, out: Path, wheelhouse: Path) -> Path:
    """`pip wheel` of `src`, its build requirements from the wheelhouse only."""
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index"]
    _run(*pip, "--find-links", wheelhouse, "--wheel-dir", out, src)
    [wheel] = out.glob("hitl_temporal-*.whl")
    return wheel


def expected_files() -> set[str]:
    """Every file of the five folders, where the wheel must hold it: hitl/'s own at `hitl/`,
    the others' at `hitl/<folder>/`."""
    files = set()
    for folder in FOLDERS:
        base = ROOT / folder
        prefix = "hitl" if folder == "hitl" else f"hitl/{folder}"
        for path in base.rglob("*"):
            if path.is_file() and not path.is_symlink() and "__pycache__" not in path.parts:
                files.add(f"{prefix}/{path.relative_to(base).as_posix()}")
    return files


@pytest.fixture(scope="session")
def wheelhouse() -> Path:
    """Wheels of setuptools and the core dependencies (filled here if there is a network)."""
    directory = Path(os.environ.get("HITL_WHEELHOUSE", wh.DEFAULT))
    if not wh.ready(directory):
        try:
            wh.fill(directory, "--retries", "0", "--timeout", "10")
        except subprocess.CalledProcessError:
            pytest.fail(
                f"no wheelhouse at {directory} and no network to fill it: run `make test` "
                "(it fills .venv/wheelhouse before entering its network namespace) or "
                "`.venv/bin/python -m tests.wheelhouse`"
            )
    return directory


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> Path:
    """The wheel built from (a copy of) this checkout."""
    tmp = tmp_path_factory.mktemp("wheel")
    return build_wheel(copy_sources(tmp / "src"), tmp / "dist", wheelhouse)


@pytest.fixture(scope="session")
def wheel_python(tmp_path_factory: pytest.TempPathFactory, wheel: Path, wheelhouse: Path) -> Path:
    """The python of a fresh virtualenv (no system site-packages) with the wheel, no extras."""
    venv = tmp_path_factory.mktemp("wheel-venv") / "venv"
    _run(sys.executable, "-m", "venv", venv)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    pip = [python, "-m", "pip", "install", "--quiet", "--no-index"]
    _run(*pip, "--find-links", wheelhouse, wheel)
    return python


def test_the_wheel_holds_every_module_the_license_and_the_types(wheel: Path) -> None:
    """Every file of hitl/, workflows/, activities/, worker/ and examples/ is in the wheel under
    `hitl/` (console templates and static files too), with `py.typed` and the license; nothing
    lands outside `hitl/`, so no top-level `workflows` shadows a user's own."""
    names = zipfile.ZipFile(wheel).namelist()
    dist_info = wheel.name.split("-py3")[0] + ".dist-info"
    assert {n for n in names if not n.startswith(f"{dist_info}/")} == expected_files()
    assert {
        "hitl/py.typed",
        "hitl/workflows/agent_run.py",
        "hitl/console/templates/inbox.html",
    } <= set(names)
    assert f"{dist_info}/licenses/LICENSE" in names
    metadata = zipfile.ZipFile(wheel).read(f"{dist_info}/METADATA").decode()
    assert "License-Expression: MIT" in metadata.splitlines()


def test_a_checkout_without_symlinks_builds_the_same_wheel(
    tmp_path: Path, wheel: Path, wheelhouse: Path
) -> None:
    """With `git config core.symlinks false` (Windows' default, and `pip install git+...`
    there) hitl/workflows and the others are 12-byte text files: the build maps the folders
    themselves, so the wheel is the same, file for file."""
    src = copy_sources(tmp_path / "src", symlinks=False)
    assert (src / "hitl" / "workflows").read_text() == "../workflows"
    plain = build_wheel(src, tmp_path / "dist", wheelhouse)
    assert zipfile.ZipFile(plain).namelist() == zipfile.ZipFile(wheel).namelist()


CLIENT = f"""
import asyncio, importlib.util, sys

import hitl
from hitl import Agent, Runner


async def main(address: str, task_queue: str) -> None:
    client = await hitl.connect(address=address)
    # The agent runs on the worker, which knows it by name; the client needs only the name.
    agent = Agent(name="Support agent", instructions="Handle tickets.")
    result = await Runner.run(
        agent, "cancel order 7", client=client, task_queue=task_queue, serve=False
    )
    print("paused:", [item.name for item in result.interruptions])
    state = result.to_state()
    for item in result.interruptions:
        state.approve(item)
    result = await Runner.run(agent, state, client=client, task_queue=task_queue, serve=False)
    print("final:", result.final_output)


asyncio.run(main(sys.argv[1], sys.argv[2]))
print("from:", hitl.__file__)
print("worker side:", sorted(m for m in sys.modules if m.startswith({WORKER_SIDE!r})))
print("extras:", [m for m in {EXTRAS_MODULES!r} if importlib.util.find_spec(m) is not None])
"""


async def test_the_installed_wheel_starts_and_approves_a_run(
    wheel_python: Path, dev_server: DevServer, dev_client: Client, tmp_path: Path
) -> None:
    """A client script in a fresh virtualenv with the wheel and no extras: it starts a run by
    agent name on our worker, sees it pause, approves, reads the result, and never loads
    worker, workflow, activity, console or example code."""
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    async with serving(dev_client, support_agent) as tq:
        proc = await asyncio.create_subprocess_exec(
            str(wheel_python),
            str(script),
            dev_server.address,
            tq,
            cwd=tmp_path,  # not the checkout: `hitl` must come from the wheel
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        )
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-3000:]
    lines = out.decode().splitlines()
    assert lines[0] == "paused: ['cancel_order']"
    assert lines[1] == "final: cancel_order: Cancelled order 7"
    assert lines[2].startswith("from: ") and str(wheel_python.parent.parent) in lines[2]
    assert lines[3:] == ["worker side: []", "extras: []"]
