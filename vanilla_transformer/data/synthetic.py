"""A built-in translation task with real structure, generated on the fly (no download).

English-like source sentences are translated into German with German grammar, so a model has to
learn what makes translation hard, not a word-for-word lookup:

* **reordering**: adjectives precede the noun in both languages, but the verb moves to the end of
  the clause (``the dog sees a cat`` -> ``der hund eine katze sieht``), and ``that``-clauses are
  verb-final too;
* **agreement**: articles and adjective endings follow gender, number and case (nominative subject,
  accusative object: ``der``/``den``, ``ein``/``einen``, ``großer``/``großen``/``großes``), and the
  verb agrees with its subject's number;
* **numbers spelled out**: digits in the source (``37``) become German number words in the target
  (``sieben und dreißig``), units before tens.

The generator is deterministic for a seed, so the same command always trains on the same data.
"""

from __future__ import annotations

import random

# (English singular, English plural, German singular, German plural, gender)
NOUNS = [
    ("dog", "dogs", "hund", "hunde", "m"),
    ("cat", "cats", "katze", "katzen", "f"),
    ("child", "children", "kind", "kinder", "n"),
    ("man", "men", "mann", "männer", "m"),
    ("woman", "women", "frau", "frauen", "f"),
    ("house", "houses", "haus", "häuser", "n"),
    ("car", "cars", "wagen", "wagen", "m"),
    ("bird", "birds", "vogel", "vögel", "m"),
    ("flower", "flowers", "blume", "blumen", "f"),
    ("book", "books", "buch", "bücher", "n"),
    ("teacher", "teachers", "lehrer", "lehrer", "m"),
    ("street", "streets", "straße", "straßen", "f"),
    ("horse", "horses", "pferd", "pferde", "n"),
    ("tree", "trees", "baum", "bäume", "m"),
    ("city", "cities", "stadt", "städte", "f"),
    ("boat", "boats", "boot", "boote", "n"),
]
# (English, German stem)
ADJECTIVES = [
    ("big", "groß"),
    ("small", "klein"),
    ("old", "alt"),
    ("young", "jung"),
    ("red", "rot"),
    ("green", "grün"),
    ("beautiful", "schön"),
    ("fast", "schnell"),
    ("quiet", "still"),
    ("happy", "froh"),
]
# (English 3rd singular, English plural, German 3rd singular, German plural)
VERBS = [
    ("sees", "see", "sieht", "sehen"),
    ("finds", "find", "findet", "finden"),
    ("likes", "like", "mag", "mögen"),
    ("follows", "follow", "folgt", "folgen"),
    ("paints", "paint", "malt", "malen"),
    ("hears", "hear", "hört", "hören"),
    ("carries", "carry", "trägt", "tragen"),
    ("buys", "buy", "kauft", "kaufen"),
]
# (English 3rd singular, English plural, German 3rd singular, German plural): verbs taking a that-clause
SAY_VERBS = [
    ("says", "say", "sagt", "sagen"),
    ("knows", "know", "weiß", "wissen"),
    ("thinks", "think", "denkt", "denken"),
]

UNITS = ["", "ein", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun"]
TEENS = [
    "zehn",
    "elf",
    "zwölf",
    "dreizehn",
    "vierzehn",
    "fünfzehn",
    "sechzehn",
    "siebzehn",
    "achtzehn",
    "neunzehn",
]
TENS = ["", "", "zwanzig", "dreißig", "vierzig", "fünfzig", "sechzig", "siebzig", "achtzig", "neunzig"]

DEFINITE = {("nom", "m"): "der", ("nom", "f"): "die", ("nom", "n"): "das"}
DEFINITE |= {("acc", "m"): "den", ("acc", "f"): "die", ("acc", "n"): "das"}
INDEFINITE = {("nom", "m"): "ein", ("nom", "f"): "eine", ("nom", "n"): "ein"}
INDEFINITE |= {("acc", "m"): "einen", ("acc", "f"): "eine", ("acc", "n"): "ein"}


def german_number(n: int) -> str:
    """2..99 as German words, units before tens: 37 -> 'sieben und dreißig'."""
    if not 2 <= n <= 99:
        raise ValueError(f"numbers in the synthetic task lie in 2..99, got {n}")
    if n < 10:
        return "zwei" if n == 2 else UNITS[n]
    if n < 20:
        return TEENS[n - 10]
    tens, units = divmod(n, 10)
    return TENS[tens] if units == 0 else f"{UNITS[units]} und {TENS[tens]}"


def _adjective_ending(article: str, case: str, gender: str, plural: bool) -> str:
    """German adjective declension after no article (plural), a definite or an indefinite article."""
    if plural:
        return "e"  # strong plural after a number: "drei kleine katzen"
    if article == "definite":
        return "en" if (case, gender) == ("acc", "m") else "e"
    if gender == "f":
        return "e"
    if gender == "n":
        return "es"
    return "er" if case == "nom" else "en"


def _noun_phrase(rng: random.Random, case: str) -> tuple[str, str, bool]:
    """One noun phrase in both languages; returns (english, german, plural)."""
    en_sg, en_pl, de_sg, de_pl, gender = rng.choice(NOUNS)
    adjectives = rng.sample(ADJECTIVES, k=rng.choice([0, 0, 1, 1, 2]))
    kind = rng.choice(["definite", "definite", "indefinite", "number"])
    if kind == "number":
        n = rng.randint(2, 99)
        en_words, de_words = [str(n)], [german_number(n)]
        noun_en, noun_de, plural = en_pl, de_pl, True
    else:
        table = DEFINITE if kind == "definite" else INDEFINITE
        en_words, de_words = ["the" if kind == "definite" else "a"], [table[(case, gender)]]
        noun_en, noun_de, plural = en_sg, de_sg, False
    ending = _adjective_ending(kind, case, gender, plural)
    en_words += [en for en, _ in adjectives] + [noun_en]
    de_words += [stem + ending for _, stem in adjectives] + [noun_de]
    if en_words[0] == "a" and en_words[1][0] in "aeiou":
        en_words[0] = "an"
    return " ".join(en_words), " ".join(de_words), plural


def _clause(rng: random.Random) -> tuple[str, str]:
    """Subject, object and verb; the German verb goes to the end and agrees with the subject."""
    subject_en, subject_de, plural = _noun_phrase(rng, "nom")
    object_en, object_de, _ = _noun_phrase(rng, "acc")
    en_sg, en_pl, de_sg, de_pl = rng.choice(VERBS)
    verb_en, verb_de = (en_pl, de_pl) if plural else (en_sg, de_sg)
    return f"{subject_en} {verb_en} {object_en}", f"{subject_de} {object_de} {verb_de}"


def make_pair(rng: random.Random) -> tuple[str, str]:
    """One (English, German) sentence pair."""
    if rng.random() < 0.3:  # "X says that <clause>": the embedded German verb is final
        speaker_en, speaker_de, plural = _noun_phrase(rng, "nom")
        en_sg, en_pl, de_sg, de_pl = rng.choice(SAY_VERBS)
        inner_en, inner_de = _clause(rng)
        verb_en, verb_de = (en_pl, de_pl) if plural else (en_sg, de_sg)
        english = f"{speaker_en} {verb_en} that {inner_en} ."
        german = f"{speaker_de} {verb_de} , dass {inner_de} ."
    else:
        english, german = _clause(rng)
        english, german = english + " .", german + " ."
    return english[0].upper() + english[1:], german[0].upper() + german[1:]


def synthetic_pairs(n: int, seed: int = 0) -> list[dict[str, str]]:
    """``n`` examples in the layout of Hugging Face translation data: {"en": ..., "de": ...}."""
    rng = random.Random(seed)
    return [dict(zip(("en", "de"), make_pair(rng), strict=True)) for _ in range(n)]


__all__ = ["synthetic_pairs", "make_pair", "german_number"]
