"""Which script a text is written in, coarsely: what an embedding model may or may not read.

A model's cosines depend on the script a question and a memory are written in as well as on
their meaning: all-MiniLM-L6-v2 was trained on English and scores unrelated Chinese sentences
0.6-0.8; multilingual-e5-small scores a memory in the question's own script a few hundredths
higher than one in the other. Recall reads the dense leg per script where an embedder's tuning
says so (``memory_service.config.retrieval.EmbedderTuning``). Two classes are enough for that:
text mostly in Han, kana or Hangul is ``cjk``, anything else ``other``.
"""

from __future__ import annotations

import regex

SCRIPTS: tuple[str, ...] = ("cjk", "other")
_CJK = regex.compile(r"[\p{scx=Han}\p{scx=Hiragana}\p{scx=Katakana}\p{scx=Hangul}]", regex.V1)
_LETTER = regex.compile(r"[\p{L}\p{N}]", regex.V1)


def script_of(text: str) -> str:
    """``cjk`` when at least a third of ``text``'s letters and digits are Han, kana or Hangul
    (a Chinese sentence with a brand name in Latin letters is still Chinese), else ``other``."""
    letters = len(_LETTER.findall(text))
    if letters == 0:
        return "other"
    return "cjk" if 3 * len(_CJK.findall(text)) >= letters else "other"
