"""The README is a map: its links resolve, and every docs page is in the site's navigation.

(`make lint` builds the site with `mkdocs build --strict`, which checks links between pages.)
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_readme_links_resolve_and_it_stays_a_map() -> None:
    text = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if "://" not in link]
    assert local, "the README links to the docs"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert missing == [], f"README links to files that do not exist: {missing}"
    assert len(text.splitlines()) <= 250, "the README is a map; depth goes in docs/"
    for command in ("make demo", "make test"):
        assert command in text


def test_every_docs_page_is_in_the_navigation() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    in_nav = {next(iter(entry.values())) for entry in config["nav"]}
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages == in_nav
    assert config["strict"] is True


def test_every_test_the_docs_name_exists() -> None:
    """The fault catalog (and any page) names tests as `tests/path.py::name`: they must exist."""
    named = set()
    for page in (ROOT / "docs").glob("*.md"):
        named |= set(re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", page.read_text()))
    assert len(named) > 30
    missing = []
    for path, name in sorted(named):
        source = ROOT / path
        if not source.exists() or (
            name and not re.search(rf"^(async )?def {name}\(", source.read_text(), re.M)
        ):
            missing.append(f"{path}::{name}")
    assert missing == [], f"the docs name tests that do not exist: {missing}"


def test_the_maps_name_every_module() -> None:
    """The README's "to change, look in" table and docs/architecture.md draw the same map, and
    it names every module of the package (a new one must be placed on it)."""
    modules = []
    for folder in ("hitl", "workflows", "activities", "worker", "examples"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if path.name in ("__init__.py", "__main__.py") or "seeds" in rel.parts:
                continue
            if rel.parts[0] == "hitl" and rel.parts[1] in (
                "workflows",
                "activities",
                "worker",
                "examples",
            ):
                continue  # the links to the top-level folders
            modules.append(rel.as_posix())
    assert len(modules) > 80
    readme, architecture = (
        (ROOT / "README.md").read_text(),
        (ROOT / "docs/architecture.md").read_text(),
    )

    def table(text: str) -> str:
        start = text.index("| to change | look in |")
        rows = text[start : text.index("\n\n", start)]
        return re.sub(r" \(\[Testing\]\([\w/.]+\)\)", "", rows)  # (links are page-relative)

    assert table(readme) == table(architecture), "the README and docs/architecture.md differ"
    missing = [m for m in modules if f"`{m}`" not in table(readme)]
    assert missing == [], f"modules missing from the map: {missing}"
