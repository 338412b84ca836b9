"""When a recall asked with a threshold answers at all, and how fusion reads the dense leg,
through the embedder's measured tuning (``config.retrieval.EmbedderTuning``).

A threshold asks "only what is evidence of being about the question". The plain rule (every
backend's, and the one an unmeasured embedder keeps): a dense cosine reaches it, and a hybrid
recall answers only when the dense leg has such a hit (``store_values.has_evidence``). A
cosine does not mean the same in every language nor for every model, so a tuned embedder's
recall reads it this way, in every backend alike:

1. where the model has no vote for the question's script (``dense_weight_by_script`` 0), its
   cosines are no evidence: the recall answers when some memory holds ``lexical_evidence``
   of the question's lexical IDF mass, and the dense leg adds nothing to the ranking;
2. else a dense hit must reach the threshold, as in the plain rule;
3. and with ``standout``, the best cosine must rise that far above the mean of the dense
   leg's candidates (the best lexical coverage counted towards it).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from functools import lru_cache

from indexing.fusion import query_coverage
from indexing.scripts import script_of
from memory_service.config.retrieval import UNTUNED, EmbedderTuning
from memory_service.longterm.fusion import ByScript, LegHit


@lru_cache(maxsize=16384)
def text_script(text: str) -> str:
    """``script_of``, once per text: the same memories come back query after query."""
    return script_of(text)


class Evidence:
    """One embedder's tuning, applied to one recall's candidates."""

    def __init__(self, tuning: EmbedderTuning) -> None:
        self.tuning = tuning

    def applies(self, threshold: float) -> bool:
        """Whether a recall at ``threshold`` is read through the tuning (a floor asked for,
        an embedder measured)."""
        return threshold > 0 and self.tuning != UNTUNED

    def dense_votes(self, query: str) -> bool:
        """Whether the model's cosines count for a question written like ``query``."""
        return self.tuning.dense_weight(text_script(query)) > 0

    def scripts(self, query: str, text: Callable[[str], str]) -> ByScript | None:
        """How fusion reads the dense leg for ``query``, where the tuning says (``text``: a
        candidate's text by id)."""
        tuning = self.tuning
        if not (tuning.centre_scripts or tuning.dense_weight_by_script or tuning.lexical_within):
            return None
        script = text_script(query)
        return ByScript(
            lambda fid: text_script(text(fid)),
            tuning.centre_scripts,
            tuning.dense_weight(script),
            script if tuning.lexical_within else None,
        )

    def answers(
        self,
        query: str,
        candidates: Sequence[LegHit],
        leg_hits: Mapping[str, Sequence[LegHit]],
        query_terms: Collection[str],
    ) -> bool:
        """Whether a hybrid recall answers: ``leg_hits`` are the hits that passed (lexical
        ones with their ``matched`` terms), ``candidates`` every dense candidate."""
        lexical = leg_hits.get("bm25", ())
        matched = {h.id: h.matched or frozenset() for h in lexical}
        every = {h.id for hits in leg_hits.values() for h in hits} | {h.id for h in candidates}
        covered = query_coverage(query_terms, matched, len(every)) if matched else {}
        best_cover = max(covered.values(), default=0.0)
        if not self.dense_votes(query):
            return best_cover >= self.tuning.lexical_evidence
        if not leg_hits.get("dense"):
            return False
        if self.tuning.standout > 0 and candidates:
            scores = [h.score for h in candidates]
            rise = max(scores) - sum(scores) / len(scores)
            return rise + self.tuning.standout_coverage * best_cover >= self.tuning.standout
        return True
