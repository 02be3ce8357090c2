"""A synthetic closed-domain task: documents that state facts early and recall them at the end.

In the spirit of Ding et al. (ICML 2024, section 4.6, "closed-domain hallucination"): when
concatenate-then-split cuts a document between its facts and its recalls, the piece that holds
the recalls is trained as a stand-alone sequence whose answers appear nowhere in its context.
The model learns to produce an answer the context does not support, i.e. to invent one. Best-fit
Packing keeps every document shorter than the context whole, so every answer it trains on is
grounded in its context.

A document (one person by default, three facts, filler sentences, then two recalls)::

    Bavo lives in Quellport. Bavo works as a tanner. Bavo keeps a heron. The river smelled of rain.
    The bell was lit early. ... Recall: Bavo keeps a heron. Recall: Bavo lives in Quellport.

Evaluation (`testbed.pretrain.evaluation.fact_recall`) feeds a held-out document up to the
recalled value (``... Recall: Bavo lives in``) and decodes greedily to the next full stop. An
answer is *correct* if it is the stated fact, a *mix-up* if it is another value the context
states, and *invented* (a closed-domain hallucination) if the context does not contain it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import product

import numpy as np

from testbed.pretrain.config import FactRecallCorpusConfig

ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z")
VOWELS = ("a", "e", "i", "o", "u")
CODAS = ("", "n", "l", "r", "s")
CITIES = ("Quellport", "Ostwick", "Dunmere", "Halvard", "Brindle", "Carrow", "Elmsby", "Farrowgate",
          "Greyhaven", "Hollin", "Ivybridge", "Kestrel", "Larkspur", "Moorcliff", "Northam", "Oakridge",
          "Pellham", "Ravenmoor", "Saltmarsh", "Thornbury", "Umberlee", "Westfold", "Yarrow", "Zennor")
JOBS = ("tanner", "baker", "weaver", "miller", "cooper", "potter", "mason", "farrier", "glazier", "chandler",
        "thatcher", "fletcher", "brewer", "carpenter", "fisher", "tailor", "smith", "saddler", "dyer",
        "roofer", "shepherd", "jeweller", "printer", "gardener")
ANIMALS = ("heron", "goat", "falcon", "tortoise", "ferret", "parrot", "badger", "donkey", "hedgehog", "rabbit",
           "otter", "magpie", "lizard", "pony", "goose", "beetle", "owl", "lamb", "toad", "raven", "swan",
           "hamster", "crow", "mule")
# (attribute values, fact sentence); the recall repeats the sentence up to the value.
ATTRIBUTES = (
    (CITIES, "{name} lives in {value}."),
    (JOBS, "{name} works as a {value}."),
    (ANIMALS, "{name} keeps a {value}."),
)
FILLER_SUBJECTS = ("The lantern", "The river", "The market", "The old bridge", "The wind", "The harbour",
                   "The orchard", "The bell", "The road north", "The library", "The sky", "The square")
FILLER_PREDICATES = ("was quiet that morning", "was lit early", "smelled of rain", "grew busy by noon",
                     "looked grey and calm", "stayed cold all week", "was painted again", "rang twice at dusk",
                     "was crowded with carts", "seemed smaller than before", "drew a few visitors",
                     "fell silent after dark")


def person_names() -> tuple[str, ...]:
    """Made-up names of two syllables (consonant, vowel, consonant, vowel, optional coda)."""
    syllables = [onset + vowel for onset, vowel in product(ONSETS, VOWELS)]
    return tuple((first + second + coda).capitalize()
                 for first, second, coda in product(syllables, syllables, CODAS))


NAMES = person_names()


@dataclass(frozen=True)
class Question:
    """One recall of a document: the text up to the recalled value is ``text[:prompt_end]``."""

    prompt_end: int
    answer: str
    stated_values: tuple[str, ...]  # every attribute value the document states before its recalls


@dataclass(frozen=True)
class FactRecallDocument:
    """A generated document and its recalls."""

    text: str
    questions: tuple[Question, ...]


def generate_document(config: FactRecallCorpusConfig, rng: np.random.Generator) -> FactRecallDocument:
    """Facts about ``people_per_document`` people, filler sentences, then ``recalls_per_document`` recalls."""
    people = [NAMES[i] for i in rng.choice(len(NAMES), size=config.people_per_document, replace=False)]
    # Distinct values per attribute across people, so that a mix-up is told apart from recall.
    columns = [[pool[i] for i in rng.choice(len(pool), size=len(people), replace=False)]
               for pool, _ in ATTRIBUTES]
    values = [list(row) for row in zip(*columns)]
    facts = [template.format(name=name, value=value)
             for name, row in zip(people, values) for (_, template), value in zip(ATTRIBUTES, row)]
    n_filler = int(rng.integers(config.min_filler, config.max_filler + 1))
    filler = [f"{FILLER_SUBJECTS[rng.integers(len(FILLER_SUBJECTS))]} "
              f"{FILLER_PREDICATES[rng.integers(len(FILLER_PREDICATES))]}." for _ in range(n_filler)]
    text = " ".join(facts + filler)
    stated = tuple(value for row in values for value in row)
    questions = []
    recalls = min(config.recalls_per_document, len(people) * len(ATTRIBUTES))
    for pair in rng.choice(len(people) * len(ATTRIBUTES), size=recalls, replace=False):
        person, attribute = divmod(int(pair), len(ATTRIBUTES))
        value = values[person][attribute]
        sentence = ATTRIBUTES[attribute][1].format(name=people[person], value=value)
        text += " Recall: " + sentence[: -len(value) - 2]
        questions.append(Question(len(text), value, stated))
        text += f" {value}."
    return FactRecallDocument(text + "\n", tuple(questions))


def generate_documents(config: FactRecallCorpusConfig, rng: np.random.Generator) -> Iterator[FactRecallDocument]:
    """``config.documents`` documents drawn one after another from ``rng``."""
    for _ in range(config.documents):
        yield generate_document(config, rng)


def answer_from_text(generated: str) -> str:
    """The answer in a greedy continuation of ``... Answer:``: the text up to the first full stop."""
    return generated.split(".", 1)[0].split("\n", 1)[0].strip()


def classify_answer(answer: str, question: Question) -> str:
    """``correct``, ``mixup`` (another stated value) or ``invented`` (not in the context)."""
    if answer == question.answer:
        return "correct"
    return "mixup" if answer in question.stated_values else "invented"
