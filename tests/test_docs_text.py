"""The docs read as documents: the README's prose comes in short paragraphs, and every
relative link of the markdown pages (README.md, docs/*.md, bench/*.md) reaches a file and,
with `#anchor`, one of its headings as GitHub names them.
"""

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from spade_jax.config_schema import REPO_ROOT

README = REPO_ROOT / "README.md"
MAX_PARAGRAPH_WORDS = 120  # the longest prose paragraph of the reference READMEs is 134
PAGES = sorted([README, *REPO_ROOT.glob("docs/*.md"), *REPO_ROOT.glob("bench/*.md")])
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.)\s")


def _outside_code(text: str) -> list[str]:
  """The lines outside fenced blocks, a fenced block's lines replaced by blank ones."""
  lines, fenced = [], False
  for line in text.splitlines():
    if line.lstrip().startswith("```"):
      fenced = not fenced
      lines.append("")
    else:
      lines.append("" if fenced else line)
  return lines


def paragraphs(text: str) -> list[str]:
  """The prose paragraphs: runs of lines between blank lines, each list item on its own;
  headings, tables and images are not prose."""
  out, current = [], []
  for line in [*_outside_code(text), ""]:
    if _ITEM.match(line) or not line.strip():
      if current:
        out.append(" ".join(current))
      current = [line.strip()] if line.strip() else []
    else:
      current.append(line.strip())
  return [p for p in out if not p.startswith(("#", "|", "!["))]


def test_readme_paragraphs_are_short():
  long = [f"{len(p.split())} words: {p[:80]}..." for p in paragraphs(README.read_text())
          if len(p.split()) > MAX_PARAGRAPH_WORDS]
  assert not long, f"README.md prose paragraphs over {MAX_PARAGRAPH_WORDS} words:\n" + "\n".join(
      long)


def anchors(text: str) -> Iterator[str]:
  """The `#anchor` of each heading as GitHub makes it: lower case, punctuation other than `-`
  and `_` dropped, spaces as `-`, a repeated one suffixed `-1`, `-2`, ..."""
  seen: dict[str, int] = {}
  for line in _outside_code(text):
    match = re.match(r"#{1,6}\s+(.*)", line)
    if match:
      slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
      seen[slug] = seen.get(slug, -1) + 1
      yield slug if seen[slug] == 0 else f"{slug}-{seen[slug]}"


def links(page: Path) -> list[str]:
  """The page's link targets, code blocks and inline code left out."""
  prose = "\n".join(re.sub(r"`[^`]*`", "", line) for line in _outside_code(page.read_text()))
  return _LINK.findall(prose)


def test_the_anchor_rule_is_githubs():
  text = "# A `make test` run (2026-12-06, 01:04 UTC)\n## x\n```\n# not a heading\n```\n## x\n"
  assert list(anchors(text)) == ["a-make-test-run-2026-12-06-0104-utc", "x", "x-1"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_relative_link_resolves(page):
  bad = []
  for target in links(page):
    if re.match(r"^[a-z]+:", target):
      continue  # https:, mailto:
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    if not dest.exists():
      bad.append(f"{target}: no file {dest}")
    elif anchor and dest.suffix == ".md" and anchor not in set(anchors(dest.read_text())):
      bad.append(f"{target}: no heading #{anchor} in {dest.relative_to(REPO_ROOT)}")
  assert not bad, f"{page.relative_to(REPO_ROOT)}:\n" + "\n".join(bad)
