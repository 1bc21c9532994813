"""The Lucene-identical tokenizer: exact parity with the benchmark's own analyzer output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from r2med_core.retrieval import tokenize as tokenize_module
from r2med_core.retrieval.tokenize import (
    ENGLISH_STOP_WORDS,
    TokenIds,
    clear_cache,
    lucene_tokenize,
    tokenize_many,
    tokenize_to_ids,
)

FIXTURES = Path(__file__).parent / "fixtures" / "bm25-official"
EDGE_CASES: dict[str, list[str]] = json.loads((FIXTURES / "edge_cases.json").read_text(encoding="utf-8"))


def _read_jsonl(name: str) -> list[dict]:
    with open(FIXTURES / name, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@pytest.fixture(scope="module")
def reference() -> list[tuple[str, str, list[str]]]:
    """(label, text, Lucene's tokens) for all 2,000 documents and 60 queries."""
    texts = {("doc", r["id"]): r["text"] for r in _read_jsonl("corpus.jsonl")}
    texts.update({("query", r["id"]): r["text"] for r in _read_jsonl("query.jsonl")})
    rows = []
    for r in _read_jsonl("reference_tokens.jsonl"):
        key = ("doc", r["id"]) if "id" in r else ("query", r["query_id"])
        rows.append((f"{key[0]} {key[1]}", texts[key], r["tokens"]))
    return rows


def test_reference_tokens_identical_for_every_text(reference: list[tuple[str, str, list[str]]]) -> None:
    assert len(reference) == 2060
    mismatches = [(label, want, lucene_tokenize(text)) for label, text, want in reference]
    mismatches = [m for m in mismatches if m[1] != m[2]]
    assert mismatches == [], f"{len(mismatches)} texts differ, first: {mismatches[:1]}"


def test_tokenize_many_matches_single_calls_and_reference(reference: list[tuple[str, str, list[str]]]) -> None:
    clear_cache()  # cold and warm caches must agree
    seen: list[float] = []
    got = tokenize_many([text for _, text, _ in reference], progress=lambda f, _m: seen.append(f))
    assert got == [want for _, _, want in reference]
    assert seen[-1] == 1.0 and all(0.0 <= f <= 1.0 for f in seen)
    assert seen == sorted(seen)


@pytest.mark.parametrize("text", list(EDGE_CASES))
def test_edge_case(text: str) -> None:
    assert lucene_tokenize(text) == EDGE_CASES[text]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Curly and full-width apostrophes are possessives too; "'s" alone is not stripped mid-word.
        ("the patient’s chart", ["patient", "chart"]),
        ("NURSE＇S notes", ["nurs", "note"]),
        ("it’s", []),
        # Java lowercases per character: no Greek final sigma, dotted capital I -> plain i.
        ("ΣΟΦΟΣ", ["σοφοσ"]),
        ("İSTANBUL", ["istanbul"]),
        # ':' joins letters, ';' and ',' join digits, '.' and "'" join both, '_' joins anything.
        ("key:value 2;3 a;b 1,5 x.y 7'8 snake_case_9", ["key:valu", "2;3", "b", "1,5", "x.y", "7'8", "snake_case_9"]),
        # A letter/digit mix joins directly but not across '.': "b12" / "a" "1".
        ("b12 a.1 1.b", ["b12", "1", "1", "b"]),
        # A narrow no-break space is ExtendNumLet in UAX#29: "1 000" stays one number.
        ("1\u202f000 mg", ["1\u202f000", "mg"]),
        # Combining marks stay on their letter; zero-width space separates.
        ("cafe\u0301 x\u200by", ["cafe\u0301", "x", "y"]),
        # Emoji sequences are single tokens; a lone regional indicator is dropped.
        ("👍🏻 👨\u200d👩\u200d👧 🇫🇷 🇫", ["👍🏻", "👨\u200d👩\u200d👧", "🇫🇷"]),
        # Thai runs stay whole, Hiragana and Han split per character, Katakana runs stay whole.
        ("ภาษาไทย ひらがな 漢字 カタカナ", ["ภาษาไทย", "ひ", "ら", "が", "な", "漢", "字", "カタカナ"]),
        ("", []),
        ("  \n\t ", []),
    ],
)
def test_uax29_and_filters(text: str, expected: list[str]) -> None:
    assert lucene_tokenize(text) == expected


def test_stop_words_are_lucenes_33() -> None:
    assert len(ENGLISH_STOP_WORDS) == 33
    assert lucene_tokenize(" ".join(sorted(ENGLISH_STOP_WORDS))) == []
    # Not stop words for Lucene (they are for NLTK/sklearn lists).
    assert lucene_tokenize("he she we you") == ["he", "she", "we", "you"]


def test_long_tokens_are_chopped_at_255_like_lucene() -> None:
    """Lucene >= 4.10 splits an over-long token into 255-unit pieces (it used to drop it)."""
    assert lucene_tokenize("x" * 300 + " ok") == ["x" * 255, "x" * 45, "ok"]
    assert lucene_tokenize("x" * 255) == ["x" * 255]
    # Counted in UTF-16 units: 200 astral letters are 400 units.
    astral = "\U0001d41a" * 200  # MATHEMATICAL BOLD SMALL A
    assert [len(t) for t in lucene_tokenize(astral)] == [127, 73]


def test_pathological_inputs_stay_linear() -> None:
    start = time.perf_counter()
    assert lucene_tokenize("_" * 50_000) == []
    assert lucene_tokenize("\u200d" * 50_000) == []
    pieces = lucene_tokenize("a." * 50_000)  # one 99,999-char token: 255-char pieces, each '.' between skipped
    assert len(pieces) == 391 and set(pieces[:-1]) == {"a." * 127 + "a"}
    assert time.perf_counter() - start < 5.0


def test_tokenize_to_ids_agrees_with_terms(reference: list[tuple[str, str, list[str]]]) -> None:
    tokens = tokenize_to_ids([text for _, text, _ in reference[:300]], workers=1)
    assert len(tokens) == 300
    assert [tokens.tokens(i) for i in range(300)] == [want for _, _, want in reference[:300]]
    assert tokens.lengths.tolist() == [len(want) for _, _, want in reference[:300]]
    # Ids are numbered in order of first occurrence, as a single pass over the corpus would.
    first_seen = list(dict.fromkeys(term for _, _, want in reference[:300] for term in want))
    assert tokens.terms == first_seen
    assert tokens.ids.dtype == np.int32 and tokens.offsets.dtype == np.int64


def test_parallel_tokenization_is_identical_to_one_process(reference: list[tuple[str, str, list[str]]]) -> None:
    """Chunks tokenized by two worker processes merge into exactly the single-process ids."""
    texts = [text for _, text, _ in reference]
    one = tokenize_to_ids(texts, workers=1)
    seen: list[float] = []
    two = tokenize_to_ids(texts, workers=2, progress=lambda f, _m: seen.append(f))
    assert two.terms == one.terms
    np.testing.assert_array_equal(two.offsets, one.offsets)
    np.testing.assert_array_equal(two.ids, one.ids)
    assert [two.tokens(i) for i in range(len(two))] == [want for _, _, want in reference]
    assert seen[-1] == 1.0 and seen == sorted(seen) and len(seen) > 3  # one report per chunk


def test_ids_stay_first_seen_across_pieces_and_dropped_memos(
    monkeypatch: pytest.MonkeyPatch, reference: list[tuple[str, str, list[str]]]
) -> None:
    """A big corpus goes in pieces, and the chunk memos are dropped when they grow: neither may change
    an id, a token or the first-occurrence order of the vocabulary."""
    monkeypatch.setattr(tokenize_module, "_MAX_CHUNK", 7)
    monkeypatch.setattr(tokenize_module, "_CACHE_LIMIT", 50)
    clear_cache()
    tokens = tokenize_to_ids([text for _, text, _ in reference], workers=1)
    assert [tokens.tokens(i) for i in range(len(tokens))] == [want for _, _, want in reference]
    assert tokens.terms == list(dict.fromkeys(term for _, _, want in reference for term in want))


class _DiesInAWorker(list):
    """A chunk of texts that kills the worker process unpickling it (as a crashed worker would)."""

    def __reduce__(self) -> tuple:
        return (os._exit, (1,))


class _Texts(Sequence):
    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i: int | slice) -> str | list[str]:
        return _DiesInAWorker(self.texts[i]) if isinstance(i, slice) else self.texts[i]


def test_dead_worker_processes_fall_back_to_this_process(reference: list[tuple[str, str, list[str]]]) -> None:
    texts = [text for _, text, _ in reference[:200]]
    with pytest.warns(RuntimeWarning, match="tokenizer worker processes failed"):
        tokens = tokenize_to_ids(_Texts(texts), workers=2)
    assert [tokens.tokens(i) for i in range(len(texts))] == [want for _, _, want in reference[:200]]


def _machine(monkeypatch: pytest.MonkeyPatch, cores: int, load: float) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(cores)), raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load), raising=False)


@pytest.mark.parametrize("load", [0.0, 1.5])
def test_by_default_one_process_tokenizes_whatever_the_load_or_size(
    monkeypatch: pytest.MonkeyPatch, reference: list[tuple[str, str, list[str]]], load: float
) -> None:
    """The policy is deterministic: no worker processes unless asked, on an idle 8-core machine too
    (a load average sampled at start made back-to-back runs differ by half their time)."""
    texts = [text for _, text, _ in reference] * 200
    _machine(monkeypatch, cores=8, load=load)
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail("started a worker process"))
    clear_cache()
    default = tokenize_to_ids(texts)
    assert len(default) == len(texts) and default.terms == tokenize_to_ids(texts[: len(reference)], workers=1).terms


def test_small_corpora_stay_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, cores=8, load=0.0)
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail("started a worker process"))
    tokens = tokenize_to_ids(["Cats' cats", "the cat"] * 50)
    assert tokens.terms == ["cat"] and len(tokens) == 100


def test_worker_processes_import_only_the_tokenizer() -> None:
    """A worker must not pay for the app's imports (pandas, scipy, torch) before its first chunk."""
    probe = (
        "import sys, runpy; sys.argv = ['worker']; "
        "runpy.run_module('r2med_core.retrieval._tokenize_worker', run_name='not_main'); "
        "print(sorted(m for m in ('pandas', 'scipy', 'torch', 'sentence_transformers', 'streamlit', "
        "'r2med_core.systems', 'r2med_core.evaluation') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_tokenize_to_ids_edge_cases() -> None:
    for workers in (1, 2):
        empty = tokenize_to_ids([], workers=workers)
        assert len(empty) == 0 and empty.terms == [] and empty.ids.size == 0
        # Texts without tokens keep their (empty) place, so offsets still line up with documents.
        tokens = tokenize_to_ids(["", "the of", "Cats' cats", "  ", "cat"], workers=workers)
        assert [tokens.tokens(i) for i in range(5)] == [[], [], ["cat", "cat"], [], ["cat"]]
        assert tokens.terms == ["cat"]


def test_token_ids_from_lists_round_trips() -> None:
    tokens = TokenIds.from_lists([[0, 1, 1], [], [2]], ["a", "b", "c"])
    assert tokens.offsets.tolist() == [0, 3, 3, 4]
    assert [tokens.tokens(i) for i in range(3)] == [["a", "b", "b"], [], ["c"]]


# --- the Porter stemmer copy ----------------------------------------------------------------

DEMO = Path(__file__).resolve().parents[1] / "r2med_core" / "demo"
# Every suffix a Porter rule looks at, so random stems run through every step and condition.
PORTER_SUFFIXES = (
    "s sses ies ss eed ed ing ated ating ized izing bled bling y ly ily bly ably ibly ally entli "
    "eli ousli ational tional enci anci izer bli abli alli logi logy ization ation ator alism "
    "iveness fulness ousness aliti iviti biliti icate ative alize iciti ical ful ness al ance ence "
    "er ic able ible ant ement ment ent ion sion tion ou ism ate iti ous ive ize e ll ee yy"
).split()


def _words_to_stem() -> set[str]:
    """Lower-cased raw tokens of the demo corpus and the fixtures, plus synthetic words."""
    pattern = tokenize_module._token_pattern()
    paths = [*DEMO.rglob("*.jsonl"), *FIXTURES.glob("*.jsonl")]
    texts = [text for path in paths for text in path.read_text(encoding="utf-8").splitlines()]
    words = {tokenize_module._lower(raw) for text in texts for raw in pattern.findall(text)}
    rng = np.random.default_rng(0)
    letters = np.array(list("abcdeefghiijklmnoopqrsstuuvwxyyz"))
    for _ in range(40_000):
        stem = "".join(rng.choice(letters, size=int(rng.integers(1, 9))))
        words.add(stem + (PORTER_SUFFIXES[int(rng.integers(len(PORTER_SUFFIXES)))] if rng.random() < 0.8 else ""))
    return words


def test_stems_come_from_nltk_itself_not_a_copy() -> None:
    """Words PyStemmer cannot be trusted with go to NLTK's own class, in Lucene's (MARTIN) mode."""
    from nltk.stem.porter import PorterStemmer as NltkPorter

    stemmer = tokenize_module._stemmer()
    assert type(stemmer) is NltkPorter and stemmer.mode == NltkPorter.MARTIN_EXTENSIONS
    assert not (Path(tokenize_module.__file__).parent / "_vendor").exists()
    assert tokenize_module._stem("possibly") == "possibl" and tokenize_module._stem("as") == "as"


def _words_where_the_stemmers_part() -> set[str]:
    """Words built to reach Martin Porter's departures from Snowball's Porter, and their neighbours.

    Doubled letters of every kind (and digits, ``_``, ``'``, ``.``, which Lucene keeps inside a
    token) before step 1b's ``ed``/``ing``, ``bl``/``log`` before ``i``/``y``, words of 1-3 characters.
    """
    rng = np.random.default_rng(7)
    alphabet = np.array(list("abcdefghijklmnopqrstuvwxyzaeiouybl0123456789._:',"))
    endings = [*PORTER_SUFFIXES, *(c + c for c in "abcdefghijklmnopqrstuvwxyz019_"), "bl", "log", "y", "ey", "oy"]
    words: set[str] = set()
    for _ in range(120_000):
        stem = "".join(rng.choice(alphabet, size=int(rng.integers(0, 7))))
        words.add(stem + "".join(rng.choice(endings, size=int(rng.integers(1, 4)))))
    words.update("".join(rng.choice(alphabet, size=int(rng.integers(1, 4)))) for _ in range(3_000))
    # Every ending step 1 can strip from after a BL, a LOG or a doubled letter (up to "yings", five
    # letters), so the routing's "near the end" limits are each reached and passed.
    tails = "i y s is ys ies ied ieds yed yeds ying yings iing iings ed eds ing ings e es".split()
    for stem in ("possi", "ana", "x", "no", "te"):
        for middle in ("bl", "log", *(c + c for c in "chjkqvwxy019_")):
            words.update(stem + middle + tail for tail in ["", *tails])
    return words


def test_stems_are_lucenes_whichever_stemmer_does_the_work() -> None:
    """Most words go to PyStemmer's C Porter for speed; every stem must still be NLTK's MARTIN one (Lucene's)."""
    from nltk.stem.porter import PorterStemmer as NltkPorter

    assert tokenize_module._snowball_porter() is not None, "PyStemmer is a pinned requirement"
    words = _words_to_stem() | _words_where_the_stemmers_part()
    lucene = NltkPorter(mode=NltkPorter.MARTIN_EXTENSIONS)
    differ = [(w, tokenize_module._stem(w), lucene.stem(w, to_lowercase=False)) for w in sorted(words)]
    differ = [d for d in differ if d[1] != d[2]]
    assert differ == [], f"{len(differ)} words stem differently, first: {differ[:3]}"
    # The test means something only if the fast stemmer really took many of these words, including
    # ones on which it would differ without the routing ("bly", "icced", "as"-sized words).
    routed = tokenize_module._SNOWBALL_MAY_DIFFER
    fast = [w for w in words if len(w) > 2 and w.isascii() and not routed.search(w)]
    assert len(fast) > 0.4 * len(words)
    snowball = tokenize_module._snowball_porter()
    assert sum(snowball(w) != lucene.stem(w, to_lowercase=False) for w in words) > 1_000


def test_ascii_pattern_finds_what_the_unicode_pattern_finds_in_ascii_text() -> None:
    """ASCII chunks use a pattern cut down to ASCII (fast to compile); it must find the very same tokens."""
    full, small = tokenize_module._token_pattern(), tokenize_module._token_pattern(ascii_only=True)
    assert len(small.pattern) < len(full.pattern) / 10
    rng = np.random.default_rng(3)
    alphabet = np.array([*"aZ9_.,;:'\"-#*@/()&!?%+=~`^|<>[]{}$\\ \t", "ab", "42", "x.y", "3,1"])
    texts = ["".join(rng.choice(alphabet, size=int(rng.integers(1, 40)))) for _ in range(20_000)]
    texts += ["U.S.A.", "3.14", "1,000,000", "O'Neil's", "foo_bar__baz", "__init__", "a:b", "x'y'z", "'quoted'"]
    assert [small.findall(t) for t in texts] == [full.findall(t) for t in texts]


def test_tokenizing_imports_nltk_only_for_words_pystemmer_cannot_stem_alone() -> None:
    """NLTK's import (about a second: it pulls in scikit-learn, pandas, scipy) is paid only when needed."""
    probe = (
        "import sys; from r2med_core.retrieval.tokenize import tokenize_to_ids; "
        "assert tokenize_to_ids(['Running quickly, the doctors rode home.']).terms; "
        "print(sorted(m for m in ('nltk', 'sklearn', 'pandas', 'scipy') if m in sys.modules)); "
        "assert tokenize_to_ids(['the biologists possibly']).terms; print('nltk' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "True"]
