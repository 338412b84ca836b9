"""A seeded Chinese and mixed-language memory benchmark that ships with the project.

Each user (a Chinese name, romanised with pypinyin as "Wang Xiaoming") gets facts about work,
family, food, health, places, hobbies, pets and more, each written in Chinese or in English
(``synthetic_zh_bank``: several shapes per fact, several ways to ask). Every fact is asked in
one language or both, so the questions fall in four categories, question language first:
``zh`` and ``en`` (same language), ``cross-en-zh`` (English question, Chinese fact) and
``cross-zh-en`` (Chinese question, English fact). Questions paraphrase (职业 for a fact that
says 老师), name the user in the question's language (王小明 or Wang Xiaoming, now and then the
other script) or say 他/she. Near misses (the same concept about a colleague or a friend)
and fillers sit beside the facts; a pronoun question is only asked of a concept without a near
miss, where "he" can mean only the user.

Each memory also carries off-topic probes (``Conversation.probes``), Chinese and English
questions about nothing any user holds (weather, markets, trivia, code): asked by the
false-injection sweep at every threshold, per language. The same seed always gives the same
dataset.
"""

from __future__ import annotations

import random
from collections import Counter

from pypinyin import lazy_pinyin

from memory_service.evaluation.dataset import Conversation, Dataset, MemoryItem, Question
from memory_service.evaluation.datasets.synthetic_zh_bank import (
    CONCEPTS,
    FILLERS_EN,
    FILLERS_ZH,
    OFFTOPIC_EN,
    OFFTOPIC_ZH,
    OTHERS,
    PEOPLE,
    PRONOUN,
    RELATIONS_EN,
    RELATIONS_ZH,
    Concept,
)

DEFAULT_USERS = len(PEOPLE)
CATEGORIES: tuple[str, ...] = ("zh", "en", "cross-en-zh", "cross-zh-en")
PROBE_CATEGORIES: tuple[str, ...] = ("off-topic zh", "off-topic en")
CONCEPTS_PER_USER = 13
ZH_FACT_SHARE = 0.55  # of a user's facts written in Chinese
BOTH_LANGUAGES_SHARE = 0.5  # of facts asked in both languages
NEAR_MISS_SHARE = 0.4
PRONOUN_SHARE = 0.35  # of questions (where no near miss) that say 他/she for the name
OTHER_SCRIPT_SHARE = 0.12  # of named questions that write the name in the other script
FILLERS_PER_LANGUAGE = 5
PROBES_PER_LANGUAGE = 4


def romanised(name: str) -> str:
    """A Chinese name as it is written in English: surname first, given name joined
    ("王小明" -> "Wang Xiaoming")."""
    syllables = lazy_pinyin(name)
    given = "".join(syllables[1:])
    return f"{syllables[0].capitalize()} {given.capitalize()}".strip()


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


class _UserBuilder:
    """One user's items, questions and probes, refs numbered in order."""

    def __init__(self, index: int, rng: random.Random) -> None:
        self.rng = rng
        self.zh, self.gender = PEOPLE[index % len(PEOPLE)]
        self.en = romanised(self.zh)
        self.user = f"synthetic-zh-{index + 1:04d}"
        self.items: list[MemoryItem] = []
        self.questions: list[Question] = []
        self.probes: list[Question] = []

    def add(self, text: str, kind: str) -> str:
        ref = f"{self.user}:f{len(self.items) + 1}"
        self.items.append(MemoryItem(text, (ref,), kind=kind))
        return ref

    def fact(self, concept: Concept, lang: str, fields: dict[str, str]) -> str:
        template = self.rng.choice(concept.fact_zh if lang == "zh" else concept.fact_en)
        name = self.zh if lang == "zh" else self.en
        return _sentence(template.format(n=name, ns=f"{name}'s", **fields))

    def question(self, concept: Concept, lang: str, may_say_pronoun: bool) -> str:
        template = self.rng.choice(concept.ask_zh if lang == "zh" else concept.ask_en)
        if may_say_pronoun and self.rng.random() < PRONOUN_SHARE:
            if lang == "zh":
                return template.format(n=PRONOUN["zh"][self.gender])
            subject, possessive = PRONOUN["en"][self.gender], PRONOUN["en_pos"][self.gender]
            return _sentence(template.format(n=subject, ns=possessive))
        other = self.rng.random() < OTHER_SCRIPT_SHARE
        if lang == "zh":
            return template.format(n=self.en + " " if other else self.zh)
        name = self.zh if other else self.en
        return _sentence(template.format(n=name, ns=f"{name}'s"))

    def ask(self, text: str, ref: str, category: str) -> None:
        qid = f"{self.user}:q{len(self.questions) + 1}"
        self.questions.append(Question(qid, text, frozenset({ref}), category))

    def near_miss(self, concept: Concept, value_index: int) -> None:
        """The concept about someone the user knows, with another value, in either language."""
        others = [i for i in range(len(concept.values)) if i != value_index]
        zh_fields, en_fields = concept.values[self.rng.choice(others)]
        person = self.rng.choice(OTHERS)
        relation = self.rng.randrange(len(RELATIONS_ZH))
        if self.rng.random() < ZH_FACT_SHARE:
            subject = f"{self.zh}的{RELATIONS_ZH[relation]}{person}"
            template = self.rng.choice(concept.fact_zh)
            self.add(template.format(n=subject, **zh_fields), concept.kind)
        else:
            subject = f"{self.en}'s {RELATIONS_EN[relation]} {romanised(person)}"
            template = self.rng.choice(concept.fact_en)
            text = template.format(n=subject, ns=f"{subject}'s", **en_fields)
            self.add(_sentence(text), concept.kind)


def _category(question_lang: str, fact_lang: str) -> str:
    if question_lang == fact_lang:
        return question_lang
    return f"cross-{question_lang}-{fact_lang}"


def _concepts(b: _UserBuilder) -> None:
    for concept in b.rng.sample(CONCEPTS, CONCEPTS_PER_USER):
        value_index = b.rng.randrange(len(concept.values))
        zh_fields, en_fields = concept.values[value_index]
        fact_lang = "zh" if b.rng.random() < ZH_FACT_SHARE else "en"
        near_miss = b.rng.random() < NEAR_MISS_SHARE
        if near_miss:
            b.near_miss(concept, value_index)
        fields = zh_fields if fact_lang == "zh" else en_fields
        ref = b.add(b.fact(concept, fact_lang, fields), concept.kind)
        first = b.rng.choice(("zh", "en"))
        langs = [first]
        if b.rng.random() < BOTH_LANGUAGES_SHARE:
            langs.append("en" if first == "zh" else "zh")
        for lang in langs:
            b.ask(b.question(concept, lang, not near_miss), ref, _category(lang, fact_lang))


def _fillers(b: _UserBuilder) -> None:
    for bank in (FILLERS_ZH, FILLERS_EN):
        name = b.zh if bank is FILLERS_ZH else b.en
        for template in b.rng.sample(bank, FILLERS_PER_LANGUAGE):
            b.add(template.format(n=name), "event")


def _probes(b: _UserBuilder) -> None:
    for bank, category in zip((OFFTOPIC_ZH, OFFTOPIC_EN), PROBE_CATEGORIES, strict=True):
        for text in b.rng.sample(bank, PROBES_PER_LANGUAGE):
            qid = f"{b.user}:p{len(b.probes) + 1}"
            b.probes.append(Question(qid, text, frozenset(), category))


def _user(index: int, seed: int) -> Conversation:
    rng = random.Random(f"memory-bench-zh:{seed}:{index}")
    b = _UserBuilder(index, rng)
    _concepts(b)
    _fillers(b)
    _probes(b)
    rng.shuffle(b.items)  # the order memories were told in carries no hint
    return Conversation(b.user, b.items, b.questions, probes=b.probes)


def generate(users: int = DEFAULT_USERS, *, seed: int = 7) -> Dataset:
    """``users`` synthetic users (names repeat past ``len(PEOPLE)``); each is one memory.
    Deterministic for a given seed."""
    conversations = [_user(i, seed) for i in range(users)]
    return Dataset("synthetic-zh", "facts", conversations, CATEGORIES, Counter(), Counter())
