"""`TaskIntent`: what the trusted task asks for, read from its words alone (pure).

`TaskIntent.of(text, vocab)` says whether the task (the task plus the user's turns) asks for
a change (a word of `lists.change_verbs`, or its -ed/-ing form), or only to read, show,
list, check, find. Names (quoted spans, paths, identifiers) hold no request. A change verb
does not count after a negation ("do not delete", "without changing"), as a noun after a
determiner ("my address book", "the last commit"), nor inflected after a question word or
an auxiliary ("what changed", "is it running"), as the head of a compound noun ("pull
request"), nor as a past form after a subject ("I copied this from ..."). `names(stem)`
says whether the task names an object (a file name's stem, a note title, a ticket id):
quoted, as a word or a number.
Errors lean one way: a read-only task misread as a change only costs recall, never a deny.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")
_CLAUSE = re.compile(r"[^\W_]+(?:'[^\W_]+)?|[,;:.!?()\u2014]")
_PUNCT = frozenset(",;:.!?()\u2014")
_NAME = "zzname"  # what a name becomes: a word, neither a verb nor a determiner
# names, not words: quoted spans, and tokens holding a path, URL, placeholder or identifier
# punctuation (old-draft, {site}/booking/, fix-rounding, price.py)
_NAMES = re.compile(
    r"`[^`\n]*`|'[^'\n]*'(?!\w)|\"[^\"\n]*\"|“[^”\n]*”|\S*[\w}][/_.{}@-]+[\w{]\S*|\S*\w/\S*"
)
_QUOTED = re.compile(r"`([^`\n]{1,200})`|'([^'\n]{1,200})'|\"([^\"\n]{1,200})\"|“([^”\n]{1,200})”")
_ALNUM = re.compile(r"[a-z]+|[0-9]+")
_RSQUO = "\u2019"  # a typographic apostrophe (don\u2019t) reads as a plain one
NEGATION_REACH = 3  # a negation cancels a change verb this many words after it
QUESTION_REACH = 4  # ... and a question word or auxiliary an inflected one
MIN_NAME_WORD = 3  # shorter letter runs of a name never make the task name it
# A change verb before one of these is the head of a compound noun ("pull request").
NOUN_HEADS = frozenset({"request", "requests"})
# Words that may open an order before its verb ("please follow", "and then do").
CLAUSE_FILLERS = frozenset(
    {"please", "also", "now", "then", "and", "just", "kindly", "first", "finally", "so", "simply"}
)
CLAUSE_JOINS = frozenset({"and", "then"})  # "read X and do what it says": a new order
# Delegation words that tell what a document says, not an order to do it ("say thanks").
SPEECH = frozenset({"say", "describe"})
# A past form after one of these tells what someone did, it asks for nothing ("I copied").
NARRATORS = frozenset({"i", "we", "they", "he", "she", "i've", "we've", "they've", "i'd"})


@dataclass(frozen=True, slots=True)
class IntentVocab:
    """The policy's vocabularies (`[lists]`), lower-cased once."""

    change_verbs: frozenset[str]
    negations: frozenset[str]
    question_words: frozenset[str]
    determiners: frozenset[str]
    delegation_words: frozenset[str] = frozenset()


def create_vocab(
    change_verbs: list[str],
    negations: list[str],
    question_words: list[str],
    determiners: list[str],
    delegation_words: list[str] | None = None,
) -> IntentVocab:
    return _vocab(tuple(change_verbs), tuple(negations), tuple(question_words),
                  tuple(determiners), tuple(delegation_words or ()))  # fmt: skip


@lru_cache(maxsize=16)
def _vocab(
    change: tuple[str, ...],
    neg: tuple[str, ...],
    ques: tuple[str, ...],
    det: tuple[str, ...],
    dele: tuple[str, ...],
) -> IntentVocab:
    def low(words: tuple[str, ...]) -> frozenset[str]:
        return frozenset(w.lower().replace(_RSQUO, "'") for w in words)

    return IntentVocab(low(change), low(neg), low(ques), low(det), low(dele))


def _inflected(word: str, verbs: frozenset[str]) -> bool:
    """A past or -ing form of a change verb (deleted, closing, stopped); an -s form is not
    counted: in a task it is mostly a plural noun (orders, exports, changes)."""
    if not word.endswith(("ed", "ing")):
        return False
    return any(f in verbs for f in base_forms(word)[1:])


def base_forms(word: str) -> list[str]:
    """`word` and the base forms it may inflect (closes -> close, deleting -> delete,
    copied -> copy, stopped -> stop); the vocabulary decides which of them is a verb."""
    out = [word]
    for suffix, repl in (("ies", "y"), ("ied", "y"), ("es", ""), ("s", ""), ("ed", ""),
                         ("ed", "e"), ("d", ""), ("ing", ""), ("ing", "e")):  # fmt: skip
        if word.endswith(suffix) and len(word) - len(suffix) >= 2:
            out.append(word[: len(word) - len(suffix)] + repl)
    for stem in list(out[1:]):  # stopped -> stopp -> stop, committing -> committ -> commit
        if len(stem) > 3 and stem[-1] == stem[-2]:
            out.append(stem[:-1])
    return out


def _clause_words(text: str) -> list[str]:
    """Words and clause punctuation, in order: a look-back stops at a comma or a full stop."""
    return _CLAUSE.findall(text.lower().replace(_RSQUO, "'"))


def _back(seq: list[str], i: int, n: int) -> list[str]:
    """Up to `n` words before `seq[i]` in its clause."""
    out: list[str] = []
    for w in reversed(seq[max(0, i - n) : i]):
        if w in _PUNCT:
            break
        out.append(w)
    return out


def words_of(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace(_RSQUO, "'"))


@dataclass(frozen=True, slots=True)
class TaskIntent:
    """The task's request, as `unrequested-change` reads it."""

    text: str
    change_words: tuple[str, ...]  # the change verbs the task uses, as written
    words: frozenset[str]  # its words and their base forms
    quoted: frozenset[str]  # its quoted spans, lower-cased

    @property
    def asks_change(self) -> bool:
        return bool(self.change_words)

    def delegates(self, vocab: IntentVocab) -> bool:
        """Does the task hand its steps to a document ("follow setup.md", "do the steps in
        TODO.md")? Then what that document asks is what the user asks."""
        return not self.words.isdisjoint(vocab.delegation_words)

    def hands_over(self, vocab: IntentVocab) -> bool:
        """Does the task order the agent to do what a document says ("Do what the wiki
        page 'X' says", "follow setup.md", "... and do the steps in TODO.md")? A delegation
        verb that opens a clause, as an order (`delegates` also reads "what does it say?")."""
        seq = _clause_words(_NAMES.sub(f" {_NAME} ", self.text))
        for i, w in enumerate(seq):
            forms = set(base_forms(w))
            if forms.isdisjoint(vocab.delegation_words) or not forms.isdisjoint(SPEECH):
                continue
            lead: list[str] = []
            for b in _back(seq, i, len(seq)):
                if b in CLAUSE_JOINS:
                    break
                lead.append(b)
            if all(b in CLAUSE_FILLERS for b in lead):
                return True
        return False

    @classmethod
    def of(cls, text: str, vocab: IntentVocab) -> TaskIntent:
        seq = _clause_words(_NAMES.sub(f" {_NAME} ", text))  # a name holds no request
        found: list[str] = []
        for i, w in enumerate(seq):
            verb = w in vocab.change_verbs or _inflected(w, vocab.change_verbs)
            if w in _PUNCT or not verb:
                continue
            before = _back(seq, i, NEGATION_REACH)
            if any(b in vocab.negations or b.endswith("n't") for b in before):
                continue
            if w in vocab.change_verbs:
                if any(b in vocab.determiners for b in _back(seq, i, 2)):
                    continue  # "my address book", "the last commit": a noun
                if i + 1 < len(seq) and seq[i + 1] in NOUN_HEADS:
                    continue  # "pull request 640", "merge requests": a compound noun
            elif _back(seq, i, 1) and _back(seq, i, 1)[0] in vocab.determiners:
                continue  # "the shared checkout", "the booking page": an adjective
            elif any(b in vocab.question_words for b in _back(seq, i, QUESTION_REACH)):
                continue  # "what changed", "is the worker running": a question, a description
            elif w.endswith("ed") and any(b in NARRATORS for b in _back(seq, i, 2)):
                continue  # "I copied this from ...", "we've updated it": what someone did
            found.append(w)
        all_words = {f for w in words_of(text) for f in base_forms(w)}
        quoted = {"".join(g).strip().lower() for g in _QUOTED.findall(text)}
        return cls(text, tuple(found), frozenset(all_words), frozenset(q for q in quoted if q))

    def names(self, stem: str) -> bool:
        """Does the task name the object called `stem` (a file name without its extension,
        a title, an id)? Exactly (quoted, or as a whole word/number), or by any letter run of
        it of `MIN_NAME_WORD`+ letters ("the old drafts" names draft-old-1): a loose match,
        since a task naming the object must never be read as not naming it."""
        low = stem.lower()
        if not low:
            return True
        if low in self.quoted or low in self.words:
            return True
        if re.search(r"(?<![a-z0-9])" + re.escape(low) + r"(?![a-z0-9])", self.text.lower()):
            return True
        runs = _ALNUM.findall(low)
        return any(
            r in self.words or any(f in self.words for f in base_forms(r))
            for r in runs
            if r.isalpha() and len(r) >= MIN_NAME_WORD
        )


# --- clauses that order something (not a read, a question, a statement or a negation) ---
# The closed class of words that open a request to read, or a question, in the languages of
# the task sets (en, de, fr, es, it, nl, pt). A clause they open asks for no change; an
# ambiguous word belongs here (misread as a read, a task only keeps today's verdict).
READ_WORDS = frozenset("""
show list get read check find count status display view print see look search fetch tell
describe summarise summarize explain inspect query give review compare preview browse scan
lookup verify watch examine analyse analyze identify locate retrieve report what what's which
open visit navigate go play listen calculate compute estimate total test ping translate
who how when where why whether is are was were does do did has have anything any price
liste lister listez montre montrez affiche affichez lis lisez vérifie vérifiez cherche
cherchez trouve trouvez donne donnez compte dis dites quel quelle quels quelles combien où
pourquoi comment résume résumez est qu'est
zeige zeig zeigt lies prüfe prüf überprüfe finde suche such gib zähle sag sage was welche
welcher welches wie wo warum ist sind fasse gibt
muestra muéstrame lista lee busca comprueba revisa dime dame cuenta cuál cuáles qué cuántos
cuántas dónde está hay resume
mostra mostrami elenca leggi cerca controlla dimmi dammi quale quali quanti quante dove
perché riassumi c'è
toon laat lees zoek controleer welke wat hoe waar zijn
mostre liste leia procure verifique quais qual onde
""".split())
# Words before a clause's verb that say nothing ("please", "can you", "puis", "bitte").
ORDER_FILLERS = CLAUSE_FILLERS | frozenset(
    "can could would will you kindly puis ensuite bitte dann jetzt también luego poi quindi "
    "por favor per favore s'il te plaît vous tu du kannst peux pourrais puedes puoi".split()
)
# A clause opened by a subject or a determiner is a statement ("it was a duplicate", "sie
# ist kaputt", "the build needs it"), not an order.
SUBJECTS = NARRATORS | frozenset(
    "you it it's this that there these those my our your the a an its ich wir es sie er das "
    "der die je nous il elle ils elles c'est ce on le la les yo él ella nosotros el io noi "
    "lui lei ik wij het de een".split()
)
# Negations in the languages of the sets (the policy's English ones are added).
NEGATIONS = frozenset("nicht kein keine keinen nie pas ne jamais nunca non mai niet geen".split())
# a quoted span of more words than a name has is text the user pasted (a customer's message,
# a command), not their order: its clauses order nothing
_QUOTE_SPAN = re.compile(r"«[^»]*»|\u201c[^\u201d]*\u201d|\"[^\"\n]*\"|'[^'\n]*'(?!\w)|`[^`\n]*`")
MAX_NAME_WORDS = 3
_SENTENCE = re.compile(r"(?:[^.!?]|[.!?](?!\s|$))+(?:[.!?]+|$)")
_POLITE = re.compile(r"(?:please\s+)?(?:can|could|would|will)\s+you\b")  # "can you ...?": an order
_CLAUSE_SPLIT = re.compile(
    r"[,;:()\n\u2014]|\s-{1,2}\s|\b(?:and|then|und|dann|et|puis|y|luego|e|poi|en)\b"
)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.findall(text) if s.strip()]


def orders(text: str) -> list[str]:
    """The sentences of `text` (lower-case) that are not questions (a polite "can you ...?"
    is an order)."""
    return [s for s in _sentences(text.lower().replace(_RSQUO, "'"))
            if not s.endswith("?") or _POLITE.match(s)]  # fmt: skip


def acting_clauses(text: str, negations: frozenset[str] = frozenset()) -> list[str]:
    """The clauses of `text` (lower-case) that order something: not in a question, opened
    (after fillers) by a word outside `READ_WORDS`, a subject or a name, and holding no
    negation. A long quoted span is pasted text, not an order (`MAX_NAME_WORDS`).
    "Void invoice INV-1003, it was a duplicate" -> ["void invoice inv-1003"]."""
    neg = NEGATIONS | negations
    out: list[str] = []
    text = _QUOTE_SPAN.sub(
        lambda m: m.group(0) if len(words_of(m.group(0))) <= MAX_NAME_WORDS else " . ",
        text.replace(_RSQUO, "'"),
    )
    for sentence in _sentences(text.lower()):
        if sentence.endswith("?") and not _POLITE.match(sentence):
            continue  # a question asks to be told
        for clause in _CLAUSE_SPLIT.split(sentence.rstrip(".!")):
            words = words_of(clause)
            lead = [w for w in words if w not in ORDER_FILLERS]
            if not lead or not lead[0].isalpha() or lead[0] in READ_WORDS | SUBJECTS:
                continue
            if clause.lstrip().startswith(("'", '"', "`", "\u201c")):
                continue  # opened by a quoted name
            if any(w in neg or w.endswith("n't") for w in words):
                continue
            out.append(clause.strip())
    return out


def clause_head(clause: str) -> list[str]:
    """The first two words of a clause after its fillers (its verb, a particle)."""
    return [w for w in words_of(clause) if w not in ORDER_FILLERS][:2]
