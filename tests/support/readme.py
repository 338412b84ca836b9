"""The documentation's examples as a test reads them: which pages hold them and in which
order, which blocks run, what each must print, and a comparison that masks what differs
between runs (ids, keys, times, scores).

The pages are README.md, then every page of ``docs/`` in the order ``mkdocs.yml``'s ``nav``
lists them (README.md is the site's home, ``index.md``); they run in that order against one
server, in one shell session, so a page may use what an earlier one recorded. The other pages
the site makes from files outside ``docs/`` (ARCHITECTURE.md, the benchmark write-ups) hold
the commands that produced their figures, not examples, and do not run. Every page of
``docs/`` must be in the nav: one left out would leave its examples untested.

The convention, in each page's own Markdown (GitHub shows only the first word of a fence's
info string, and the site's hook, ``docs/hooks.py``, drops the rest, so the marks stay out of
the rendered page):

- a ```` ```bash ```` block runs, in page order, in one shell session (variables set in one
  block, such as ``KEY``, are there in the next). A ```` ```json ```` block right after it
  (nothing but blank lines between) is what it prints: one JSON value per answer, in order.
  A block that prints something must be followed by one;
- a ```` ```console ```` block is a terminal transcript: each ``$ `` line (with its ``\\``
  continuations) runs in the same session, and the lines after it, up to the next ``$ ``,
  are what it prints (stdout and stderr, as a terminal shows them);
- a ```` ```python ```` block runs as a script; a ```` ```text ```` block right after it is
  what it prints;
- ``no-run`` after the language (```` ```bash no-run ````) marks a block that is not run:
  ``make`` targets, downloads, a synopsis. Blocks in any other language never run.

What a block says is taken literally but for the port and the key: ``localhost:8080`` and
``127.0.0.1:8080`` are the test server's address, and ``msk_dev_...`` / ``msk_...`` the
development key its banner printed (the one a reader copies). In an expected answer, random
ids (UUIDs but version 5), API keys, 12+ digit hex tokens (fingerprints, span ids), times and
floats stand for any value of their kind, while a derived id (a fact's: a version-5 UUID of
its tenant, owner and text) must be the one the service derives; an id, key or hex token must
stand for the same value wherever it recurs, across pages too (the fact the search finds is
the one recorded above it), and a later command that names one (``keys revoke
39ffc235818e``) gets the real value. Paths under the checkout are shown as
``/home/you/memory-service``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

RUNNABLE = ("bash", "console", "python")
OUTPUT_OF = {"bash": "json", "python": "text"}  # the block right after is the expected output
NO_RUN = "no-run"
README_CHECKOUT = "/home/you/memory-service"

FENCE = re.compile(r"^(`{3,})(.*)$")
SITE_CONFIG = "mkdocs.yml"
DOCS = "docs"


def pages(repo: Path) -> list[Path]:
    """The pages whose examples run, in the order they run: README.md, then ``docs/``'s
    pages as the site's nav lists them."""
    config = yaml.safe_load((repo / SITE_CONFIG).read_text(encoding="utf-8"))
    from_repo: dict[str, str] = config.get("extra", {}).get("pages_from_repo", {})
    out: list[Path] = []
    for entry in nav_pages(config["nav"]):
        source = from_repo.get(entry)
        if source == "README.md" or source is None:
            out.append(repo / (source or f"{DOCS}/{entry}"))
    return out


def nav_pages(nav: Any) -> list[str]:
    """The page files of a mkdocs nav, in order (``- api.md``, ``- Title: api.md``, sections)."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    return [page for item in nav for page in nav_pages(item)]


@dataclass(frozen=True)
class Block:
    lang: str
    tags: frozenset[str]
    text: str
    line: int  # of the opening fence, 1-based
    follows_block: bool  # only blank lines between this block and the one before

    @property
    def runs(self) -> bool:
        return self.lang in RUNNABLE and NO_RUN not in self.tags


@dataclass(frozen=True)
class Example:
    """A block that runs, and what its page says it prints (None: it shows nothing)."""

    block: Block
    expected: Block | None


def blocks(markdown: str) -> list[Block]:
    """Every fenced block of ``markdown``, in order."""
    out: list[Block] = []
    lines = markdown.split("\n")
    i, last_end = 0, None
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence, info = opening.group(1), opening.group(2).split()
        start = i
        i += 1
        body: list[str] = []
        while i < len(lines) and not lines[i].startswith(fence):
            body.append(lines[i])
            i += 1
        between = lines[last_end + 1 : start] if last_end is not None else ["x"]
        out.append(
            Block(
                lang=info[0] if info else "",
                tags=frozenset(info[1:]),
                text="\n".join(body) + "\n",
                line=start + 1,
                follows_block=all(not line.strip() for line in between),
            )
        )
        last_end = i
        i += 1
    return out


def examples(markdown: str) -> list[Example]:
    found = blocks(markdown)
    out = []
    for n, block in enumerate(found):
        if not block.runs:
            continue
        after = found[n + 1] if n + 1 < len(found) else None
        wanted = OUTPUT_OF.get(block.lang)
        shown = (
            after if after is not None and after.follows_block and after.lang == wanted else None
        )
        out.append(Example(block, shown))
    return out


def commands(transcript: str) -> list[tuple[str, str]]:
    """A console transcript's ``(command, what it prints)`` pairs."""
    out: list[tuple[str, list[str]]] = []
    lines = transcript.rstrip("\n").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ "):
            command = [line[2:]]
            while command[-1].endswith("\\") and i + 1 < len(lines):
                i += 1
                command.append(lines[i])
            out.append(("\n".join(command), []))
        elif out:
            out[-1][1].append(line)
        elif line.strip():
            raise ValueError(f"console block: output before any $ command: {line!r}")
        i += 1
    return [(c, "\n".join(o)) for c, o in out]


def json_values(text: str) -> list[Any]:
    """The JSON values of ``text``, one after another (curl prints no newline between)."""
    decoder = json.JSONDecoder()
    values, i = [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i == len(text):
            return values
        value, i = decoder.raw_decode(text, i)
        values.append(value)


# -- masking ----------------------------------------------------------------------------------

TIME = r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})?"
CLASSES: tuple[tuple[str, str, bool], ...] = (  # name, pattern, bound (same value each time)
    ("time", TIME, False),
    ("uuid", r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", True),
    ("key", r"msk_[A-Za-z0-9_-]{8,}", True),
    ("hex", r"(?<![0-9A-Za-z])[0-9a-f]{12,}(?![0-9A-Za-z])", True),
    ("float", r"(?<![\w.])-?\d+\.\d+(?:e[-+]?\d+)?(?![\w.])", False),
)
MASKED = re.compile("|".join(f"(?P<{name}>{pattern})" for name, pattern, _ in CLASSES))
BOUND = {name for name, _, bound in CLASSES if bound}
PATTERN_OF = {name: pattern for name, pattern, _ in CLASSES}


@dataclass
class Bindings:
    """The pages' ids, keys and hex tokens -> the values this run printed, one to one."""

    seen: dict[str, str] = field(default_factory=dict)
    back: dict[str, str] = field(default_factory=dict)

    def bind(self, shown: str, actual: str) -> str | None:
        """None, or why ``shown`` cannot stand for ``actual``."""
        if self.seen.setdefault(shown, actual) != actual:
            return f"{shown} stood for {self.seen[shown]} before, now for {actual}"
        if self.back.setdefault(actual, shown) != shown:
            return f"{actual} was shown as {self.back[actual]} before, now as {shown}"
        return None

    def substitute(self, command: str) -> str:
        """``command`` with each token of the pages it names replaced by the real value."""
        for shown, actual in sorted(self.seen.items(), key=lambda kv: -len(kv[0])):
            command = re.sub(
                rf"(?<![0-9A-Za-z_-]){re.escape(shown)}(?![0-9A-Za-z_-])", actual, command
            )
        return command


def _pattern(shown: str, literal: str) -> tuple[re.Pattern[str], list[tuple[str, str]]]:
    """A regex for text shaped as ``shown``: masked tokens become groups (unless ``literal``,
    the commands run, names them: then they must be printed as they are), whitespace runs
    match any whitespace run."""
    parts, groups, at = [], [], 0
    for match in MASKED.finditer(shown):
        parts.append(_literal(shown[at : match.start()]))
        token, kind = match.group(0), match.lastgroup or ""
        if token in literal:
            parts.append(_literal(token))
        else:
            parts.append(f"({PATTERN_OF[kind]})")
            groups.append((kind, token))
        at = match.end()
    parts.append(_literal(shown[at:]))
    return re.compile("".join(parts)), groups


def _literal(text: str) -> str:
    return r"\s+".join(re.escape(piece) for piece in re.split(r"\s+", text))


def match_text(shown: str, actual: str, bindings: Bindings, literal: str = "") -> str | None:
    """None when ``actual`` is what ``shown`` shows, masked; else why not."""
    pattern, groups = _pattern(shown.strip(), literal)
    found = pattern.fullmatch(actual.strip())
    if found is None:
        return f"the page shows\n{shown.strip()}\nbut it printed\n{actual.strip()}"
    for (kind, token), value in zip(groups, found.groups(), strict=True):
        if kind == "uuid" and derived(token) and value != token:
            return (
                f"the page shows the derived id {token}, but the service derives {value} (a "
                "fact's id is the same for the same tenant, owner and text in every run)"
            )
        if kind in BOUND and (why := bindings.bind(token, value)) is not None:
            return why
    return None


def derived(token: str) -> bool:
    """Whether ``token`` is a UUID of version 5 (``facts.fact_id``: of the tenant, owner and
    text), which every run derives alike: a page must show the very id, where a random one
    (version 4) stands for any value."""
    return token[14] == "5"


def match_json(shown: Any, actual: Any, bindings: Bindings, where: str = "$") -> str | None:
    """None when ``actual`` is the JSON value the page shows, masked; else where it differs."""
    if isinstance(shown, dict) and isinstance(actual, dict):
        if shown.keys() != actual.keys():
            missing, extra = shown.keys() - actual.keys(), actual.keys() - shown.keys()
            return (
                f"{where}: fields the page shows but not printed {sorted(missing)}, "
                f"printed but not shown {sorted(extra)}"
            )
        for name in shown:
            if (
                why := match_json(shown[name], actual[name], bindings, f"{where}.{name}")
            ) is not None:
                return why
        return None
    if isinstance(shown, list) and isinstance(actual, list):
        if len(shown) != len(actual):
            return f"{where}: the page shows {len(shown)} items, it printed {len(actual)}"
        for n, (a, b) in enumerate(zip(shown, actual, strict=True)):
            if (why := match_json(a, b, bindings, f"{where}[{n}]")) is not None:
                return why
        return None
    if (
        _number(shown)
        and _number(actual)
        and (isinstance(shown, float) or isinstance(actual, float))
    ):
        return None  # a score: any number
    if isinstance(shown, str) and isinstance(actual, str):
        why = match_text(shown, actual, bindings)
        return None if why is None else f"{where}: {why}"
    if shown != actual or type(shown) is not type(actual):
        return f"{where}: the page shows {json.dumps(shown)}, it printed {json.dumps(actual)}"
    return None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def placeholders(text: str, port: int, key: str) -> str:
    """A command as a page writes it, pointed at the test's server and key."""
    text = re.sub(r"(localhost|127\.0\.0\.1):8080\b", rf"\g<1>:{port}", text)
    return text.replace("msk_dev_...", key).replace("msk_...", key)
