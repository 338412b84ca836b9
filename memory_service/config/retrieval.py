"""Retrieval strategy as declarative data: which legs, how deep, how fused, how smoothed.

A leaf of the settings layer (it imports nothing of the service above ``errors``), so
``Settings`` can name a preset or define one in its TOML file, and
``memory_service.longterm.fusion`` applies it the same way in every backend (Graphiti's
``SearchConfig`` + recipes, in our terms).

The model's defaults are the default preset (``hybrid``), the one measured best on LoCoMo
(``benchmarks/RESULTS.md``): z-score fusion with BM25 scaled by query coverage,
session-neighbour smoothing and date terms.
``rrf`` is Reciprocal Rank Fusion with the same smoothing and date terms; ``rrf-plain`` is
plain RRF and ``zscore-plain`` z-score fusion alone, kept for comparison.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from memory_service.domain.errors import InvalidInputError

Leg = Literal["bm25", "dense"]
Mode = Literal["hybrid", "bm25", "dense"]  # hybrid: every leg of the strategy, fused
Fusion = Literal["rrf", "zscore"]

LEGS: tuple[Leg, ...] = get_args(Leg)
MODES: tuple[Mode, ...] = get_args(Mode)
FUSIONS: tuple[Fusion, ...] = get_args(Fusion)

# The Lucene/Qdrant IDF of a term in half of a user's memories, ln(1 + (N/2 + .5)/(N/2 + .5)):
# a BM25 difference smaller than one such word is not evidence (see ``min_spread``).
BM25_MIN_SPREAD = math.log(2.0)


class RetrievalConfig(BaseModel):
    """How hybrid recall is done; the defaults are the ``hybrid`` preset.

    - ``fusion``: ``zscore`` (weighted sum of each leg's standardised scores, see
      ``indexing.fusion``) or ``rrf`` (Reciprocal Rank Fusion with constant ``rrf_k``; larger
      flattens the rank curve).
    - ``weights``: per-leg weight in either fusion (a leg at 0 still reports ranks but adds
      nothing).
    - ``min_spread``: per leg, in its own units, the least spread z-score fusion divides by
      (``indexing.fusion``). BM25's is ``ln 2``, one word that half the memories contain: when
      every memory matches only a word they all share (the user's name), BM25's tiny length-norm
      differences are not stretched into a ranking that outvotes the dense leg. On the bundled
      synthetic set it lifted hybrid R@5 from 90.6 to 94.0 and left LoCoMo unchanged
      (``benchmarks/RESULTS.md``, "Lexical leg: BM25's spread floor"). RRF ignores it.
    - ``lexical_coverage``: in z-score fusion, each BM25 score is multiplied by its memory's
      query coverage (the share of the question's IDF mass it holds, IDF over the fused
      candidates; ``indexing.fusion.query_coverage``) to this power; 0 turns it off, 1 is
      Lucene's classic ``coord`` weighted by IDF. A memory sharing one incidental word with a
      paraphrased question no longer outvotes the dense leg's answer. 0.5: on the bundled
      synthetic set hybrid MRR 80.4 -> 84.8, LoCoMo dev turns and facts better or equal at
      every k; 0.75 and 1 gained more on synthetic and lost LoCoMo R@25
      (``benchmarks/RESULTS.md``, "Lexical leg: query coverage"). RRF ignores it.
    - ``candidate_multiplier`` / ``min_candidates``: how deep each leg goes before fusion:
      ``max(min_candidates, top_k * candidate_multiplier)``.
    - ``neighbour_weight`` / ``neighbour_window``: session-neighbour smoothing after fusion
      (``indexing.neighbours``); 0 turns it off.
    - ``date_terms``: the lexical leg also indexes each memory's ``created_at`` day as words
      (``indexing.lexical``). Qdrant stores BM25 vectors when a fact is recorded, so changing
      it there applies to facts recorded afterwards (re-index for the rest).
    - ``recency_half_life_days`` / ``recency_weight``: an opt-in preference for recent
      memories: ``recency_weight * 0.5 ** (age_days / half_life)`` is added to each fused
      score (z-score units; with ``rrf`` use a weight near 0.01), the age counted at the
      moment asked about (now, or ``as_of``). None (the default): off.
    - ``source_terms``: the lexical leg also indexes each fact's source text (the message it
      came from, ``Fact.source``) beside its own words; the same re-index note applies.
    - ``confidence_weight``: ``confidence_weight * confidence`` (the fact's decayed
      confidence, 0-1, at the moment asked about) is added to each fused score (z-score
      units), so a less sure or older unconfirmed memory ranks lower. 0 (the default): off;
      the ``hybrid-confidence`` preset sets 1 (``benchmarks/RESULTS.md``, "Confidence").

    Single-leg modes (``bm25``, ``dense``) return the leg's own ranking: no fusion, no smoothing.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field("hybrid", min_length=1, max_length=64)
    fusion: Fusion = "zscore"
    weights: dict[Leg, float] = Field(default_factory=lambda: {"bm25": 1.0, "dense": 1.0})
    min_spread: dict[Leg, float] = Field(
        default_factory=lambda: {"bm25": BM25_MIN_SPREAD, "dense": 0.0}
    )
    lexical_coverage: float = Field(0.5, ge=0, le=4)
    rrf_k: float = Field(60.0, gt=0)
    candidate_multiplier: int = Field(4, ge=1, le=100)
    min_candidates: int = Field(50, ge=1, le=10_000)
    neighbour_weight: float = Field(0.5, ge=0)
    neighbour_window: int = Field(2, ge=0, le=50)
    date_terms: bool = True
    recency_half_life_days: float | None = Field(None, gt=0)
    recency_weight: float = Field(1.0, ge=0)
    source_terms: bool = True
    confidence_weight: float = Field(0.0, ge=0, le=100)

    @field_validator("weights")
    @classmethod
    def _weights_not_negative(cls, value: dict[Leg, float]) -> dict[Leg, float]:
        if any(float(w) < 0 for w in value.values()):
            raise ValueError("leg weights must not be negative")
        return {leg: float(value.get(leg, 1.0)) for leg in LEGS}  # a leg left out weighs 1

    @field_validator("min_spread")
    @classmethod
    def _spreads_not_negative(cls, value: dict[Leg, float]) -> dict[Leg, float]:
        if any(not float(s) >= 0 for s in value.values()):
            raise ValueError("minimum spreads must not be negative")
        return {leg: float(value.get(leg, 0.0)) for leg in LEGS}  # a leg left out has none

    def depth(self, top_k: int) -> int:
        """How many candidates each leg returns for a request of ``top_k``."""
        return max(self.min_candidates, top_k * self.candidate_multiplier)

    def with_changes(self, **changes: object) -> RetrievalConfig:
        """A copy with ``changes`` applied and validated (for labs and tests)."""
        return type(self).model_validate({**self.model_dump(), **changes})


HYBRID = RetrievalConfig()
# Reciprocal Rank Fusion with the default preset's date terms and session neighbours: what a
# user who expects "hybrid search = RRF" should choose, without losing those two gains. RRF's
# scores are flat (1/(60 + rank)), so the default's neighbour weight (0.5, on z-scores) would
# lift a neighbour many ranks further than it does there: 0.1 is its RRF-scale counterpart
# (LoCoMo dev: better than plain RRF at every k on both units; 0.25 and 0.5 lose facts R@5 or
# MRR; ``benchmarks/RESULTS.md``, "Fusion and neighbours").
RRF = RetrievalConfig(name="rrf", fusion="rrf", neighbour_weight=0.1)
RRF_PLAIN = RetrievalConfig(name="rrf-plain", fusion="rrf", neighbour_weight=0.0, date_terms=False)
ZSCORE_PLAIN = RetrievalConfig(
    name="zscore-plain",
    fusion="zscore",
    neighbour_weight=0.0,
    date_terms=False,
    lexical_coverage=0.0,
)

# hybrid preferring recent memories (off in the default preset: measured by
# ``memory-service bench --dataset synthetic-time``, benchmarks/RESULTS.md)
HYBRID_RECENCY = HYBRID.with_changes(
    name="hybrid-recency", recency_half_life_days=30.0, recency_weight=2.0
)

# hybrid weighing each hit's decayed confidence in (off in the default preset: measured by
# ``memory-service bench --dataset synthetic-time`` and LoCoMo, benchmarks/RESULTS.md)
HYBRID_CONFIDENCE = HYBRID.with_changes(name="hybrid-confidence", confidence_weight=1.0)

PRESETS: Mapping[str, RetrievalConfig] = MappingProxyType(
    {p.name: p for p in (HYBRID, RRF, RRF_PLAIN, ZSCORE_PLAIN, HYBRID_RECENCY, HYBRID_CONFIDENCE)}
)


def preset(name: str, custom: Mapping[str, RetrievalConfig] | None = None) -> RetrievalConfig:
    """The named preset: a built-in one, or one of ``custom`` (the settings file's)."""
    known = {**PRESETS, **(custom or {})}
    try:
        return known[name]
    except KeyError:
        raise InvalidInputError(
            f"unknown retrieval preset {name!r}; known: {', '.join(known)}",
            code="invalid_preset",
        ) from None


def legs_for_mode(mode: str) -> tuple[Leg, ...]:
    """The legs a retrieval mode runs: all of them for ``hybrid``, else the one named."""
    if mode == "hybrid":
        return LEGS
    if mode in LEGS:
        return (mode,)  # type: ignore[return-value]
    raise InvalidInputError(
        f"mode must be one of {', '.join(MODES)}, not {mode!r}", code="invalid_mode"
    )


@dataclass(frozen=True, slots=True)
class EmbedderTuning:
    """How recall reads one embedding model's cosines, measured per model on the bundled
    Chinese and mixed-language set (``memory-service bench --dataset synthetic-zh``,
    ``benchmarks/RESULTS.md``, "Languages"). Two models' cosines do not mean the same, nor
    one model's in two languages; a threshold (``retrieve``'s, the harness's
    ``recall_threshold``) is read through this so that it lets about as few off-topic
    questions through in Chinese as in English. What it changes at a threshold applies only
    when one is asked for (above 0); the ranking settings always apply. Scripts are
    ``indexing.scripts``' (``cjk``, ``other``).

    - ``dense_weight_by_script``: the dense leg's weight for a question written in a script
      (one not listed: 1). all-MiniLM-L6-v2 was not trained on Chinese: its cosines for a
      Chinese question are noise (unrelated Chinese sentences score 0.6-0.8) that outvotes a
      clear lexical match, so it gets no vote there, in the ranking nor as evidence.
    - ``lexical_evidence``: where the dense leg has no vote, a recall at a threshold answers
      when some memory holds this share of the question's lexical IDF mass
      (``indexing.fusion.query_coverage``).
    - ``standout`` / ``standout_coverage``: a recall at a threshold answers only when its best
      cosine stands ``standout`` above the mean cosine of the dense leg's candidates, the best
      lexical coverage counted ``standout_coverage`` times towards it; 0: off.
      multilingual-e5-small puts every text between 0.7 and 0.9, off-topic questions as high
      as real ones: no cosine floor separates them, how far the best memory rises does.
    - ``centre_scripts``: z-score fusion centres the dense leg's cosines per script of the
      memory before standardising them: e5 scores a memory in the question's own script a
      few hundredths higher than one in the other, as much as meaning moves it, so a Chinese
      question ranked the user's unrelated Chinese memories above the English one answering
      it. With one script among the candidates it changes nothing.
    - ``lexical_within``: z-score fusion standardises the lexical leg over the memories
      written in the question's script alone, and it adds nothing to the others: a memory in
      another script cannot share the question's words, so BM25's silence about it is no
      evidence against it (counted as a miss, it pushed every cross-lingual answer below the
      question's own script's unrelated memories). With one script among the candidates it
      changes nothing.
    """

    dense_weight_by_script: tuple[tuple[str, float], ...] = ()
    lexical_evidence: float = 0.5
    standout: float = 0.0
    standout_coverage: float = 0.0
    centre_scripts: bool = False
    lexical_within: bool = False

    def dense_weight(self, script: str) -> float:
        """The dense leg's weight for a question written in ``script``."""
        return dict(self.dense_weight_by_script).get(script, 1.0)


EMBEDDER_TUNING: Mapping[str, EmbedderTuning] = MappingProxyType(
    {
        "bundled:all-MiniLM-L6-v2": EmbedderTuning(
            dense_weight_by_script=(("cjk", 0.0),), lexical_evidence=0.15, centre_scripts=True
        ),
        "bundled:multilingual-e5-small": EmbedderTuning(
            dense_weight_by_script=(("cjk", 2.0),),
            standout=0.0925,
            standout_coverage=0.3,
            centre_scripts=True,
            lexical_within=True,
        ),
    }
)
UNTUNED = EmbedderTuning()  # a model nobody measured: the threshold is the plain cosine


def tuning_for(model: str) -> EmbedderTuning:
    """The measured tuning of the embedder named ``model`` (its ``name``), else none."""
    return EMBEDDER_TUNING.get(model, UNTUNED)
