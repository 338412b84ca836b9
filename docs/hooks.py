"""mkdocs hooks: the site's pages from files kept outside ``docs/``, and links written for a
reader of the repository made to work on the site.

The repository is read on GitHub as much as on the site, so every page links the way GitHub
resolves a link: relative to the file it is written in (``docs/api.md`` links
``../benchmarks/RESULTS.md``; README.md links ``docs/api.md``). README.md, ARCHITECTURE.md and
the benchmark write-ups stay where they are and become pages here (``extra.pages_from_repo`` in
mkdocs.yml names them), and each link is rewritten to the page that holds its target. A link to
a file that is no page is left alone, so ``mkdocs build --strict`` fails on it.

The test that runs the examples (``tests/support/readme.py``) marks blocks in the fence's info
string (```` ```bash no-run ````); the marks are dropped here, as GitHub drops them, so the
highlighter sees a plain language name.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})([^`\s]*)[^`\n]*$")
LINK = re.compile(r"(\]\()([^)\s]+)(\))")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _repo(config: Any) -> Path:
    return Path(config.config_file_path).parent


def _pages_from_repo(config: Any) -> dict[str, str]:
    """Site page -> the repository file it is made from."""
    return dict(config.extra.get("pages_from_repo", {}))


def on_files(files: Any, config: Any) -> Any:
    """Add the pages made from files outside ``docs/``."""
    from mkdocs.structure.files import File

    repo = _repo(config)
    for page, source in _pages_from_repo(config).items():
        text = (repo / source).read_text(encoding="utf-8")
        files.append(File.generated(config, page, content=text))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Links resolved from where the page's text is kept; the fences' marks dropped."""
    site_of = {source: page_uri for page_uri, source in _pages_from_repo(config).items()}
    docs = Path(config.docs_dir).relative_to(_repo(config)).as_posix()
    uri = page.file.src_uri
    source = _pages_from_repo(config).get(uri, f"{docs}/{uri}")
    out: list[str] = []
    fence: str | None = None
    for line in markdown.split("\n"):
        opening = FENCE.match(line)
        if fence is None and opening is not None:
            fence = opening.group(2)
            line = f"{opening.group(1)}{fence}{opening.group(3)}"
        elif fence is not None:
            if line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                fence = None
        else:
            line = LINK.sub(
                lambda m: m.group(1) + _target(m.group(2), source, uri, site_of, docs) + m.group(3),
                line,
            )
        out.append(line)
    return "\n".join(out)


def _target(link: str, source: str, uri: str, site_of: dict[str, str], docs: str) -> str:
    """``link`` as written in the repository file ``source``, as the page ``uri`` must write it."""
    if link.startswith(("#", "/")) or SCHEME.match(link):
        return link
    path, hash_, anchor = link.partition("#")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(source), path))
    if resolved in site_of:
        target = site_of[resolved]
    elif resolved == docs:
        target = "index.md"
    elif resolved.startswith(f"{docs}/"):
        target = resolved[len(docs) + 1 :]
    else:
        return link
    return posixpath.relpath(target, posixpath.dirname(uri) or ".") + hash_ + anchor
