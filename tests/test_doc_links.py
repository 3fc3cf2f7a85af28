"""Every relative link in README.md and docs/ leads to a file that exists (and, with a #fragment, to a heading of
that page); every bench/*.py has its page under docs/benchmarks/, linked from docs/benchmarks.md."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def prose(text: str) -> str:
    """The page without its fenced code blocks, where brackets are code, not links."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return "\n".join(lines)


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the page's headings: lower case, punctuation dropped, spaces to hyphens."""
    names = set()
    for line in prose(page.read_text()).splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            names.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return names


def test_every_relative_link_resolves():
    broken = []
    for page in PAGES:
        for target in LINK.findall(prose(page.read_text())):
            if re.match(r"[a-z]+:", target) or target.startswith("#") and not target[1:]:
                continue  # https:, mailto:
            path, _, fragment = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_every_benchmark_has_its_page_linked_from_the_index():
    index = (ROOT / "docs" / "benchmarks.md").read_text()
    missing = []
    for script in sorted((ROOT / "bench").glob("*.py")):
        if script.stem in ("__init__", "common"):
            continue
        page = ROOT / "docs" / "benchmarks" / f"{script.stem}.md"
        if not page.exists():
            missing.append(f"{page.relative_to(ROOT)} (no page for bench/{script.name})")
        elif f"(benchmarks/{script.stem}.md)" not in index:
            missing.append(f"docs/benchmarks.md does not link benchmarks/{script.stem}.md")
    assert not missing, "\n".join(missing)
