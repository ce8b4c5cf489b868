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
