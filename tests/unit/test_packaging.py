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
    `hitl.<name>`, one copy of each module under one name: the build maps each folder
    (package-dir, which never reads a symlink), and hitl/<name> symlinks show the same folders
    to the tools that read the source tree (mypy, lint-imports, pytest)."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    names = ("workflows", "activities", "worker", "examples")
    assert config["package-dir"] == {"hitl": "hitl", **{f"hitl.{n}": n for n in names}}
    on_disk = {"hitl"}
    for folder in ("hitl", *names):
        for init in (ROOT / folder).rglob("__init__.py"):
            if init.parent.resolve().is_relative_to((ROOT / folder).resolve()):
                parts = init.parent.relative_to(ROOT / folder).parts
                on_disk.add(".".join(("hitl", *([] if folder == "hitl" else [folder]), *parts)))
    assert set(config["packages"]) == on_disk, "pyproject's packages lists every package"
    for name in names:
        link = ROOT / "hitl" / name
        assert link.is_symlink() and link.resolve() == (ROOT / name).resolve(), (
            f"hitl/{name} is not a symlink to {name}/ (a checkout without symlinks): "
            "git config core.symlinks true && git checkout -- hitl"
        )


def test_the_layering_contract_covers_every_client_module() -> None:
    """`make lint` checks that the client API never imports worker, workflow or activity code,
    directly or through other modules, but through hitl.serving's two named imports: a new
    module must be in that contract, or it is unchecked."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contracts = {c["name"]: c for c in config["contracts"]}
    [client] = [c for name, c in contracts.items() if "client API" in name]
    on_disk = {f"hitl.{p.stem}" for p in (ROOT / "hitl").glob("*.py") if p.stem != "__init__"}
    packages = {f"hitl.{p.parent.name}" for p in (ROOT / "hitl").glob("*/__init__.py")}
    ours = {"hitl.workflows", "hitl.activities", "hitl.worker", "hitl.examples"}
    worker_side = {"hitl.testing"}  # a tool's policy tried in-process: worker code itself
    assert set(client["source_modules"]) == (on_disk | packages) - ours - worker_side
    assert set(client["forbidden_modules"]) == ours | worker_side
    assert {i.split(" -> ")[0] for i in client["ignore_imports"]} == {"hitl.serving"}
    for contract in contracts.values():
        assert str(contract.get("allow_indirect_imports", False)).lower() == "false", contract


# The extras' packages, as `pip install hitl-temporal` (no extras) leaves them: not installed.
EXTRAS_MODULES = (
    "aioboto3",
    "cryptography",
    "jinja2",
    "mcp",
    "opentelemetry",
    "python_multipart",
    "starlette",
    "uvicorn",
)
WORKER_SIDE = ("workflows", "activities", "worker", "console", "examples")

_WITHOUT_EXTRAS = f"""
import importlib.abc, sys

class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {EXTRAS_MODULES!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, _NotInstalled())
"""


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter where no extra is installed."""
    import os

    return subprocess.run(
        [sys.executable, "-c", _WITHOUT_EXTRAS + code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, **env},
    )


def test_import_hitl_loads_client_code_only() -> None:
    """A client script pays for the client: `import hitl` (and the CLI's import) loads no
    worker, workflow, activity, console or example module and no extra, so it works with the
    core dependencies alone, and every public name is there."""
    code = f"""
import hitl
loaded = sorted(sys.modules)
for name in hitl.__all__:
    getattr(hitl, name)
import hitl.cli
cli = sorted(sys.modules)
for label, mods in (("hitl", loaded), ("hitl.cli", cli)):
    bad = [m for m in mods if m.split(".")[:2][-1] in {WORKER_SIDE!r} and m.startswith("hitl.")]
    extras = [m for m in mods if m.split(".")[0] in {EXTRAS_MODULES!r}]
    print(label, bad, extras)
"""
    run = _python(code)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["hitl [] []", "hitl.cli [] []"]


def test_a_missing_extra_is_one_line_naming_it(tmp_path: Path) -> None:
    """Each extra is imported only when used; without it, the feature says in one line which
    extra to install (and `import hitl.worker.build` needs none: tracing is the client's
    plugin, which brings its own OpenTelemetry)."""
    code = f"""
import asyncio, os
from hitl.errors import UserError

def case(extra, fn):
    try:
        fn()
    except UserError as exc:
        print(extra, exc.message, sep="\\t")
    else:
        print(extra, "no error", sep="\\t")

import hitl.worker.build  # a worker, tracing or not, imports no extra

def console():
    from hitl.console import ConsoleSettings, start_console
    asyncio.run(start_console(ConsoleSettings(port=0)))

def codec_server():
    from hitl.codec import serve_codec
    serve_codec(None, port=0)

def encryption():
    from hitl.client import data_converter
    os.environ["HITL_ENCRYPTION_KEY"] = "k1:" + "A" * 43 + "="
    try:
        data_converter()
    finally:
        del os.environ["HITL_ENCRYPTION_KEY"]

def keys():
    from hitl.signing import new_key_pair
    new_key_pair()

def mcp():
    from hitl.mcp import MCPServerStdio
    asyncio.run(MCPServerStdio("crm", command="true").list_tools())

def s3():
    from hitl.storage import store_from_url
    store_from_url("s3://bucket/prefix")

def local():
    from hitl.worker import devserver
    sys.executable, os.environ["PATH"] = {str(tmp_path / "python")!r}, {str(tmp_path)!r}
    devserver.temporal_binary()

for extra, fn in [
    ("console", console),
    ("console", codec_server),
    ("encryption", encryption),
    ("encryption", keys),
    ("mcp", mcp),
    ("s3", s3),
    ("local", local),
]:
    case(extra, fn)
"""
    run = _python(code)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 7, run.stdout
    for line in lines:
        extra, message = line.split("\t")
        assert f"pip install 'hitl-temporal[{extra}]'" in message, line
        assert "\n" not in message
