"""Lucene ``EnglishAnalyzer`` tokens in pure Python, so BM25 scores match the R2MED paper's.

The benchmark's BM25 runs on pyserini's Lucene English analyzer:
``StandardTokenizer`` (Unicode UAX#29 word boundaries) -> English possessive filter -> lower case
-> the 33 English stop words -> Porter stemming. Any other tokenizer changes the vocabulary and
hence every score, so "BM25 (R2MED official)" is only official if the tokens are identical.

The tokenizer below is one regular expression built from Unicode character classes (generated
once, on first use, from :mod:`unicodedata` plus a few script ranges) that follows the UAX#29
rules Lucene's grammar implements: letters and digits join, ``.``/``'``/``:`` join letters,
``.``/``,``/``;``/``'`` join digits, ``_`` joins anything, each CJK ideograph and Hiragana
character is its own token, Thai-like scripts are kept as runs, emoji are tokens, everything
else separates tokens and is dropped. Like Lucene (since 4.10, LUCENE-5897/7760) a token longer
than 255 UTF-16 units is chopped into pieces of at most 255, not dropped.

Speed: text is first split on whitespace (which always ends a token), and each distinct chunk —
and each distinct raw token inside it — is analysed once and memoised, so tokenizing a corpus is
mostly ``str.split`` plus a dictionary look-up per word done in C, which numbers the chunk; numpy
then expands chunk numbers into term ids. Chunks that are ASCII letters and digits are one raw
token; other ASCII chunks use the grammar cut down to ASCII, which compiles in milliseconds. Stems are those of NLTK's
Porter stemmer in ``MARTIN_EXTENSIONS`` mode, which gives Lucene's stems: PyStemmer's C "porter"
stems every word on which the two cannot differ, NLTK itself the rest (imported on the first such
word only: ``import nltk`` pulls in scikit-learn, pandas and scipy).
:func:`tokenize_to_ids` works in this process unless asked for worker processes (they cost more
CPU than they save wall time here), whose ids it merges into exactly the single-process result.
"""

from __future__ import annotations

import functools
import os
import pickle
import re
import subprocess
import sys
import threading
import unicodedata
import warnings
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain, count, filterfalse
from pathlib import Path
from typing import IO, TYPE_CHECKING

import numpy as np

from r2med_core.progress import Progress, notify

if TYPE_CHECKING:
    from nltk.stem.porter import PorterStemmer

__all__ = [
    "ANALYZER_VERSION",
    "ENGLISH_STOP_WORDS",
    "MAX_TOKEN_LENGTH",
    "TokenIds",
    "clear_cache",
    "lucene_tokenize",
    "tokenize_many",
    "tokenize_to_ids",
]

#: Lucene's ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`` (also bm25s's ``stopwords="en"``).
ENGLISH_STOP_WORDS: frozenset[str] = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with".split()
)

#: Bump when the analyzer's output changes: it is part of every BM25 cache key.
ANALYZER_VERSION = 1

#: ``StandardTokenizer.DEFAULT_MAX_TOKEN_LENGTH``, counted in UTF-16 code units as Java does.
MAX_TOKEN_LENGTH = 255

# Memoised analyses are dropped wholesale past this many entries (~125 bytes each, so memory stays
# near 125 MB on huge corpora; a refill costs one regex pass and one stemming per distinct word).
_CACHE_LIMIT = 1_000_000


@functools.cache
def _stemmer() -> PorterStemmer:
    """NLTK's Porter stemmer in Lucene's mode, imported on first use (``import nltk`` is slow)."""
    from nltk.stem.porter import PorterStemmer

    return PorterStemmer(mode=PorterStemmer.MARTIN_EXTENSIONS)


# --- Unicode classes -------------------------------------------------------------------------

# UAX#29 Word_Break values that are single characters or short lists.
_MID_LETTER = "\u003a\u00b7\u0387\u055f\u05f4\u2027\ufe13\ufe55\uff1a"
_MID_NUM = "\u002c\u003b\u037e\u0589\u060c\u060d\u066c\u07f8\u2044\ufe10\ufe14\ufe50\ufe54\uff0c\uff1b"
_MID_NUM_LET = "\u002e\u2018\u2019\u2024\ufe52\uff07\uff0e"
_SINGLE_QUOTE = "\u0027"
_DOUBLE_QUOTE = "\u0022"
_EXTEND_NUM_LET = "\u005f\u202f\u203f\u2040\u2054\ufe33\ufe34\ufe4d\ufe4e\ufe4f\uff3f"


def _ranges(spec: str) -> list[tuple[int, int]]:
    """``"41-5A 61"`` -> ``[(0x41, 0x5A), (0x61, 0x61)]`` (inclusive code point ranges)."""
    pairs = []
    for item in spec.split():
        lo, _, hi = item.partition("-")
        pairs.append((int(lo, 16), int(hi or lo, 16)))
    return pairs


# Script ranges that UAX#29 (and Lucene's grammar) treat specially; inclusive code point pairs.
_HAN = _ranges(
    "2E80-2E99 2E9B-2EF3 2F00-2FD5 3005 3007 3021-3029 3038-303B 3400-4DBF 4E00-9FFF F900-FAFF 16FF0-16FF1 20000-323AF"
)
_HIRAGANA = _ranges("3041-3096 309D-309F 1B001-1B11F 1B150-1B152 1F200")
_KATAKANA = _ranges(
    "3031-3035 309B-309C 30A0-30FA 30FC-30FF 31F0-31FF 32D0-32FE 3300-3357 FF66-FF9D 1AFF0-1AFFE "
    "1B000 1B120-1B122 1B164-1B167"
)
_HEBREW_LETTER = _ranges("05D0-05EA 05EF-05F2 FB1D FB1F-FB28 FB2A-FB4F")
# Line_Break=Complex_Context (Thai, Lao, Myanmar, Khmer, Tai scripts); their digits are Numeric.
_COMPLEX_CONTEXT = _ranges(
    "0E01-0E3A 0E40-0E4E 0E81-0ECF 0EDA-0EDF 1000-103F 1050-108F 109A-109F 1780-17D3 17D7 "
    "17DC-17DD 1950-1974 1980-19CF 19DA 19DE-19DF 1A20-1A7F 1AA0-1AAD A9E0-A9EF A9FA-A9FE "
    "AA60-AADF 11700-1172F 1173A-1173F"
)
# Extended_Pictographic (emoji-data.txt); with Emoji_Modifier these start an emoji token.
_PICTOGRAPHIC = _ranges(
    "00A9 00AE 203C 2049 2122 2139 2194-2199 21A9-21AA 231A-231B 2328 2388 23CF 23E9-23F3 "
    "23F8-23FA 24C2 25AA-25AB 25B6 25C0 25FB-25FE 2600-2605 2607-2612 2614-2685 2690-2705 "
    "2708-2712 2714 2716 271D 2721 2728 2733-2734 2744 2747 274C 274E 2753-2755 2757 2763-2767 "
    "2795-2797 27A1 27B0 27BF 2934-2935 2B05-2B07 2B1B-2B1C 2B50 2B55 3030 303D 3297 3299 "
    "1F000-1F0FF 1F10D-1F10F 1F12F 1F16C-1F171 1F17E-1F17F 1F18E 1F191-1F19A 1F1AD-1F1E5 "
    "1F201-1F20F 1F21A 1F22F 1F232-1F23A 1F23C-1F23F 1F249-1F3FA 1F400-1F53D 1F546-1F64F "
    "1F680-1F6FF 1F774-1F77F 1F7D5-1F7FF 1F80C-1F80F 1F848-1F84F 1F85A-1F85F 1F888-1F88F "
    "1F8AE-1F8FF 1F90C-1F93A 1F93C-1F945 1F947-1FAFF 1FC00-1FFFD"
)
_EMOJI_MODIFIER = _ranges("1F3FB-1F3FF")
_REGIONAL_INDICATOR = _ranges("1F1E6-1F1FF")
# Alphabetic symbols (circled/squared letters) and modifier symbols that UAX#29 counts as ALetter.
_EXTRA_ALETTER = _ranges(
    "02C2-02C5 02D2-02D7 02DE-02DF 02E5-02EB 02ED 02EF-02FF 055A-055C 055E 058A 05F3 A708-A716 "
    "A720-A721 A789-A78A AB5B 24B6-24E9 1F130-1F149 1F150-1F169 1F170-1F189"
)
_SCAN_LIMIT = 0x32400  # all letters, digits and marks are below this (plus the E0000 plane)


def _code_points(ranges: list[tuple[int, int]]) -> Iterator[int]:
    return (cp for lo, hi in ranges for cp in range(lo, hi + 1))


def _char_class(code_points: Iterable[int]) -> str:
    """``[...]`` matching exactly ``code_points``, written as compact ranges (never-matching if none)."""
    cps = sorted(set(code_points))
    if not cps:
        return r"[^\s\S]"
    parts: list[str] = []
    i = 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        lo, hi = cps[i], cps[j]
        parts.append(_escape(lo) if lo == hi else f"{_escape(lo)}-{_escape(hi)}")
        i = j + 1
    return "[" + "".join(parts) + "]"


def _escape(cp: int) -> str:
    return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


@functools.cache
def _token_pattern(ascii_only: bool = False) -> re.Pattern[str]:
    """Compile the UAX#29 token regex (once per process: building the classes takes ~0.15 s).

    ``ascii_only`` builds the same grammar with every character class cut down to ASCII: on a
    pure-ASCII string it matches exactly what the full pattern matches (no other character can
    occur), and it compiles in milliseconds, so a corpus without a non-ASCII chunk never pays for
    the Unicode-wide classes.
    """
    limit = 0x80 if ascii_only else None

    def _in(ranges: list[tuple[int, int]]) -> set[int]:
        return {cp for cp in _code_points(ranges) if limit is None or cp < limit}

    han, hiragana, katakana = _in(_HAN), _in(_HIRAGANA), _in(_KATAKANA)
    hebrew, complex_context = _in(_HEBREW_LETTER), _in(_COMPLEX_CONTEXT)
    modifier = _in(_EMOJI_MODIFIER)
    special = han | hiragana | katakana | complex_context

    extend: set[int] = {cp for cp in (0x200C, 0x200D, 0xFF9E, 0xFF9F) if limit is None} | modifier
    aletter: set[int] = _in(_EXTRA_ALETTER)
    numeric: set[int] = set()
    scan = range(limit) if limit is not None else chain(range(_SCAN_LIMIT), range(0xE0000, 0xE0200))
    for cp in scan:
        cat = unicodedata.category(chr(cp))
        if cat in ("Mn", "Me", "Mc") or (cat == "Cf" and cp != 0x200B):
            extend.add(cp)  # WB Extend / Format / ZWJ: glued to the preceding character
        elif cat == "Nd":
            numeric.add(cp)
        elif (cat[0] == "L" or cat == "Nl") and cp not in special:
            aletter.add(cp)
    aletter -= extend | hebrew | numeric
    # Thai, Lao, ... digits are Numeric, not part of the script runs (their marks are both).
    complex_context -= numeric

    x = _char_class(extend) + "*+"
    # Inside emoji sequences the presentation selectors and ZWJ have their own roles.
    x_emoji = _char_class(extend - {0xFE0E, 0xFE0F, 0x200D}) + "*+"
    letter = _char_class(aletter | hebrew) + x
    heb = _char_class(hebrew) + x
    digit = _char_class(numeric) + x
    kata = _char_class(katakana) + x
    enl = _char_class(map(ord, _EXTEND_NUM_LET)) + x
    mid_letter = _char_class(map(ord, _MID_LETTER + _MID_NUM_LET + _SINGLE_QUOTE)) + x
    mid_num = _char_class(map(ord, _MID_NUM + _MID_NUM_LET + _SINGLE_QUOTE)) + x
    quote_tail = f"(?:{re.escape(_SINGLE_QUOTE)}{x}|{re.escape(_DOUBLE_QUOTE)}{x}{heb})"

    letters = f"{letter}(?:(?:{enl})*+{letter}|{mid_letter}{letter})*"
    digits = f"{digit}(?:(?:{enl})*+{digit}|{mid_num}{digit})*"
    katakanas = f"{kata}(?:(?:{enl})*+{kata})*"
    unit = f"(?:{katakanas}|(?:{heb}{quote_tail}|{letters}|{digits})+)"
    # A word never starts right after an ExtendNumLet (it would have joined the run), and the
    # look-behind keeps a long "____" run from being rescanned at every position (quadratic).
    enl_class = _char_class(map(ord, _EXTEND_NUM_LET))
    word = f"(?<!{enl_class})(?:{enl})*+{unit}(?:(?:{enl})++{unit})*(?:{enl})*"

    pict = _char_class(_in(_PICTOGRAPHIC))
    emoji_core = f"(?:{pict}{x_emoji}\ufe0f?|{_char_class(modifier)}{x_emoji})"
    emoji = (
        f"(?:(?<!\u200d)\u200d++)?{emoji_core}(?:\u200d++{emoji_core})*"
        f"|[#*]{x_emoji}\ufe0f?\u20e3{x_emoji}"
        f"|{_char_class(_in(_REGIONAL_INDICATOR))}{x}{_char_class(_in(_REGIONAL_INDICATOR))}{x}"
    )
    complex_run = f"(?:{_char_class(complex_context)}{x})+"
    single = f"{_char_class(han | hiragana)}{x}"
    return re.compile(f"{word}|{complex_run}|{single}|{emoji}")


# --- Per-token analysis ----------------------------------------------------------------------

_POSSESSIVE_APOSTROPHES = ("'", "\u2019", "\uff07")


def _utf16_len(text: str) -> int:
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def _chop(token: str) -> list[str]:
    """Split a too-long token the way Lucene's 255-unit scanner buffer does.

    The scanner cannot match more than 255 UTF-16 units, so it emits the longest match that fits
    and starts afresh right after it. Slices (not ``pos`` arguments) give each restart the same
    blank left context the scanner has, and keep the work linear in the token length.
    """
    pattern = _token_pattern(ascii_only=token.isascii())
    pieces: list[str] = []
    pos, n = 0, len(token)
    while pos < n:
        window = token[pos : pos + 4 * MAX_TOKEN_LENGTH]
        found = pattern.search(window)
        if found is None and pos + len(window) < n:
            window = token[pos:]  # a start beyond the window: rare, so a full search is fine
            found = pattern.search(window)
        if found is None:
            break
        start = pos + found.start()
        end, units = start, 0
        while end < n:
            width = 2 if ord(token[end]) > 0xFFFF else 1
            if units + width > MAX_TOKEN_LENGTH:
                break
            units += width
            end += 1
        match = pattern.match(token[start:end])
        if match is None or not match.group():  # cannot happen for a real token; never loop
            break
        pieces.append(match.group())
        pos = start + match.end()
    return pieces


def _lower(term: str) -> str:
    """Java ``Character.toLowerCase`` per code point (no final sigma, ``İ`` -> ``i``)."""
    if term.isascii():
        return term.lower()
    return term.replace("\u03a3", "\u03c3").replace("\u0130", "i").lower()


def _analyze_piece(raw: str) -> str:
    """Possessive filter -> lower case -> stop words -> Porter; "" when the token is dropped."""
    if len(raw) >= 2 and raw[-1] in "sS" and raw[-2] in _POSSESSIVE_APOSTROPHES:
        raw = raw[:-2]
    term = _lower(raw)
    if term in ENGLISH_STOP_WORDS:
        return ""
    return _stem(term)


# Where Snowball's frozen Porter (PyStemmer's "porter") can stem differently from Lucene's Porter
# (NLTK's MARTIN_EXTENSIONS): the latter's BLI -> BLE (for ABLI -> ABLE) and LOGI -> LOG rules of
# step 2, and a doubled letter step 1b undoubles that Snowball does not count as a double consonant
# (Snowball's doubles are bb dd ff gg mm nn pp rr tt; ll ss zz stay doubled in both). Each can only
# act near the end of a word: step 2 sees the word after step 1, which removes at most five
# letters ("ings" and an undoubled letter), so a BL or LOG that decides anything is followed by at
# most six letters; step 1b undoubles only right before a removed "ed"/"ing" (step 1a having removed
# an "s" after it). Words of one or two characters, which only Lucene's leaves alone, are checked
# by length.
_SNOWBALL_MAY_DIFFER = re.compile(r"(?:bl|log).{0,6}$|([^abdefgilmnoprstuz])\1(?:ed|ing)s?$")


@functools.cache
def _snowball_porter() -> Callable[[str], str] | None:
    """PyStemmer's C Porter (about 5x faster than the Python one), or None if it is not installed."""
    try:
        import Stemmer
    except ImportError:
        return None
    return Stemmer.Stemmer("porter").stemWord


@functools.lru_cache(maxsize=_CACHE_LIMIT // 4)
def _stem(term: str) -> str:
    """Porter as Lucene does it; memoised by lower-cased word ("The"/"the" stem once).

    The stem is always Lucene's: a word goes to the fast C stemmer only when it is ASCII, longer
    than two characters and has none of the letter patterns where the two algorithms part ways
    (``tests/test_tokenize.py`` checks this against NLTK on several hundred thousand words built
    to reach every rule); everything else goes to NLTK's stemmer.
    """
    fast = _snowball_porter()
    if fast is not None and len(term) > 2 and term.isascii() and _SNOWBALL_MAY_DIFFER.search(term) is None:
        return fast(term)
    return _stemmer().stem(term, to_lowercase=False)


def _analyze(raw: str) -> tuple[str, ...]:
    """All index terms for one raw token (several only when Lucene would chop it)."""
    if len(raw) > MAX_TOKEN_LENGTH // 2 and _utf16_len(raw) > MAX_TOKEN_LENGTH:
        terms = (_analyze_piece(piece) for piece in _chop(raw))
        return tuple(term for term in terms if term)
    term = _analyze_piece(raw)
    return (term,) if term else ()


class _TermCache(dict[str, tuple[str, ...]]):
    """raw token -> analysed terms, filled on first sight."""

    def __missing__(self, raw: str) -> tuple[str, ...]:
        terms = self[raw] = _analyze(raw)
        return terms


class _ChunkCache(dict[str, tuple[str, ...]]):
    """whitespace-free chunk (e.g. ``"(IL-6,"``) -> its terms, filled on first sight."""

    def __missing__(self, chunk: str) -> tuple[str, ...]:
        if chunk.isascii() and chunk.isalnum():  # ASCII letters and digits all join: one raw token
            terms = self[chunk] = _TOKENS[chunk]
            return terms
        pattern = _token_pattern(ascii_only=chunk.isascii())
        terms = self[chunk] = tuple(chain.from_iterable(map(_TOKENS.__getitem__, pattern.findall(chunk))))
        return terms


_TOKENS = _TermCache()
_CHUNKS = _ChunkCache()
# The one separator Python's str.split() breaks on that UAX#29 joins words with (ExtendNumLet).
_NARROW_NO_BREAK_SPACE = "\u202f"


def _check_cache_size() -> None:
    if len(_CHUNKS) + len(_TOKENS) > _CACHE_LIMIT:
        clear_cache()


def clear_cache() -> None:
    """Forget memoised analyses (frees memory; benchmarks use it for cold-cache timings)."""
    _TOKENS.clear()
    _CHUNKS.clear()
    _stem.cache_clear()


def _chunks(text: str) -> list[str]:
    """Pieces of ``text`` that no token crosses.

    Whitespace always ends a UAX#29 token, so splitting on it first lets the (slow, Unicode-wide)
    token regex run once per distinct chunk instead of over every character of the corpus.
    """
    if _NARROW_NO_BREAK_SPACE in text:
        return [text]
    return text.split()


# --- Public API ------------------------------------------------------------------------------


def lucene_tokenize(text: str) -> list[str]:
    """The terms Lucene's English analyzer (as used by the R2MED benchmark) produces for ``text``."""
    _check_cache_size()
    return list(chain.from_iterable(map(_CHUNKS.__getitem__, _chunks(text))))


def tokenize_many(texts: Iterable[str], progress: Progress | None = None) -> list[list[str]]:
    """:func:`lucene_tokenize` over many texts, reporting progress about every 1%."""
    items = texts if isinstance(texts, Sequence) else list(texts)
    lookup = _CHUNKS.__getitem__
    total = len(items)
    step = max(1, total // 100)
    out: list[list[str]] = []
    for i, text in enumerate(items):
        if i % step == 0:
            _check_cache_size()
            notify(progress, i / max(total, 1), f"Tokenizing {i:,}/{total:,}")
        out.append(list(chain.from_iterable(map(lookup, _chunks(text)))))
    notify(progress, 1.0, f"Tokenized {total:,} texts")
    return out


@dataclass(frozen=True)
class TokenIds:
    """A tokenized corpus: text ``i`` is ``terms[j] for j in ids[offsets[i]:offsets[i + 1]]``."""

    ids: np.ndarray  # int32, every token of every text, in order
    offsets: np.ndarray  # int64, len(texts) + 1
    terms: list[str]  # id -> term, in order of first occurrence

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per text (int64)."""
        return np.diff(self.offsets)

    def tokens(self, i: int) -> list[str]:
        """The terms of text ``i``."""
        return [self.terms[j] for j in self.ids[self.offsets[i] : self.offsets[i + 1]].tolist()]

    @classmethod
    def from_lists(cls, token_ids: Sequence[Sequence[int]], terms: list[str]) -> TokenIds:
        """From one list of ids per text (e.g. bm25s's tokenizer output)."""
        lengths = np.fromiter(map(len, token_ids), dtype=np.int64, count=len(token_ids))
        offsets = np.zeros(len(token_ids) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        ids = np.fromiter(chain.from_iterable(token_ids), dtype=np.int32, count=int(offsets[-1]))
        return cls(ids, offsets, terms)


def tokenize_to_ids(texts: Sequence[str], workers: int | None = None, progress: Progress | None = None) -> TokenIds:
    """Analyse ``texts`` straight to term ids (what a sparse index needs).

    By default this process does the work, whatever the corpus size, cores or load: measured side by
    side (README: Speed), two worker processes cost 1.4-1.8x the CPU time (each starts, re-derives
    the stems the other has, pickles its vocabulary back to be remapped) for at best 0.94x the wall
    time at 60,000 texts on 2 cores, and slower wall time once anything else runs. ``workers`` > 1
    asks for that trade: chunks tokenized by that many processes, numbered locally and merged in
    corpus order, so the ids, the vocabulary order (first occurrence) and every token are exactly
    those of a single-process run. If the worker processes cannot run, this process does the work
    (with a warning).
    """
    texts = texts if isinstance(texts, Sequence) else list(texts)
    n_workers = _worker_count(workers, len(texts))
    if n_workers > 1:
        try:
            return _tokenize_in_chunks(texts, n_workers, progress)
        except (_WorkerError, OSError) as err:
            message = f"tokenizer worker processes failed ({err or type(err).__name__}); tokenizing in this process"
            warnings.warn(message, RuntimeWarning, stacklevel=2)
    return _tokenize_in_chunks(texts, 1, progress)


def _tokenize_in_chunks(texts: Sequence[str], n_workers: int, progress: Progress | None) -> TokenIds:
    total = len(texts)
    size = _chunk_size(total, n_workers)
    pieces = [texts[start : start + size] for start in range(0, total, size)]
    ids: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    notify(progress, 0.0, f"Tokenizing 0/{total:,}" + (f" on {n_workers} processes" if n_workers > 1 else ""))
    done = 0

    def add(piece_ids: np.ndarray, piece_lengths: np.ndarray) -> None:
        nonlocal done
        ids.append(piece_ids)
        lengths.append(piece_lengths)
        done += len(piece_lengths)
        notify(progress, done / max(total, 1), f"Tokenizing {done:,}/{total:,}")

    if n_workers <= 1 or len(pieces) <= 1:
        numbering = _Numbering()  # one numbering for the whole corpus: ids are final as they come
        for piece in pieces:
            add(*numbering.ids(piece))
        terms = list(numbering.terms)
    else:
        vocab: dict[str, int] = {}
        with _chunk_results(pieces, n_workers) as results:
            for local_terms, local_ids, local_lengths in results:
                # Local id -> global id; unseen terms numbered in their order of first occurrence.
                vocab.update(zip(filterfalse(vocab.__contains__, local_terms), count(len(vocab))))
                to_global = np.fromiter(map(vocab.__getitem__, local_terms), dtype=np.int32, count=len(local_terms))
                add(to_global[local_ids], local_lengths)
        terms = list(vocab)
    offsets = np.zeros(total + 1, dtype=np.int64)
    if lengths:
        np.cumsum(np.concatenate(lengths), out=offsets[1:])
    flat = np.concatenate(ids) if ids else np.empty(0, dtype=np.int32)
    notify(progress, 1.0, f"Tokenized {total:,} texts")
    return TokenIds(flat, offsets, terms)


_MAX_CHUNK = 10_000


def _worker_count(workers: int | None, total: int) -> int:
    return max(1, min(int(workers or 1), total))


def _chunk_size(total: int, workers: int) -> int:
    """Several chunks per worker (steady progress), none huge (bounded memory)."""
    if workers <= 1:
        return max(1, min(total, _MAX_CHUNK))
    return max(1, min(_MAX_CHUNK, -(-total // (4 * workers))))


class _WorkerError(RuntimeError):
    """A tokenizer worker process died or answered garbage."""


_Chunk = tuple[list[str], np.ndarray, np.ndarray]


@contextmanager
def _chunk_results(pieces: list[Sequence[str]], workers: int) -> Iterator[Iterator[_Chunk]]:
    """``_tokenize_chunk`` of every piece, in order, from ``workers`` processes.

    Each worker is ``python -m r2med_core.retrieval._tokenize_worker``, which imports only the
    tokenizer (a multiprocessing pool would first re-import the caller's ``__main__`` — the app,
    the whole package — in every worker). Piece ``i`` goes to worker ``i % workers``; a thread
    per worker writes its pieces to the worker's stdin while this thread reads the results in
    corpus order, so neither pipe can fill up and stall both sides.
    """
    workers = min(workers, len(pieces))
    root = str(Path(__file__).resolve().parents[2])  # the folder holding r2med_core
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "r2med_core.retrieval._tokenize_worker"]
    procs: list[subprocess.Popen[bytes]] = []
    feeders: list[threading.Thread] = []
    try:
        for _ in range(workers):
            procs.append(subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env))
        for i, proc in enumerate(procs):
            feeders.append(threading.Thread(target=_feed, args=(proc.stdin, pieces[i::workers]), daemon=True))
            feeders[-1].start()
        yield (_read_result(procs[i % workers]) for i in range(len(pieces)))
    finally:
        for proc in procs:  # stopped first, so a feeder blocked on a full pipe gets an error and ends
            _stop(proc)
        for feeder in feeders:
            feeder.join()


def _feed(pipe: IO[bytes], pieces: list[Sequence[str]]) -> None:
    """Send ``pieces`` to one worker, then close its stdin (its signal to exit)."""
    try:
        with pipe:
            for piece in pieces:
                pickle.dump(piece, pipe, protocol=pickle.HIGHEST_PROTOCOL)
    except (OSError, ValueError):  # the worker died (or was stopped): the reader reports it
        pass


def _read_result(proc: subprocess.Popen[bytes]) -> _Chunk:
    assert proc.stdout is not None  # every worker is started with stdout=PIPE
    try:
        terms, ids, lengths = pickle.load(proc.stdout)
    except Exception as err:  # EOF from a dead worker, or a truncated pickle
        raise _WorkerError(f"worker {proc.pid} stopped: {type(err).__name__}") from None
    return terms, ids, lengths


def _stop(proc: subprocess.Popen) -> None:
    """Reap a worker: it exits on its own once its stdin is closed; killed if still busy."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def _tokenize_chunk(texts: Sequence[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """One chunk as (its terms in first-seen order, token ids into those terms, tokens per text)."""
    numbering = _Numbering()
    ids, lengths = numbering.ids(texts)
    return list(numbering.terms), ids, lengths


class _ChunkNumbers(dict[str, int]):
    """whitespace-free chunk -> its number, in order of first sight; new chunks are also listed in ``fresh``."""

    def __init__(self) -> None:
        super().__init__()
        self.fresh: list[str] = []

    def __missing__(self, chunk: str) -> int:
        number = self[chunk] = len(self)
        self.fresh.append(chunk)
        return number


class _Numbering:
    """Term ids for texts, numbered in order of first occurrence across every call to :meth:`ids`.

    The per-word work is one C loop: ``str.split``, then each chunk's number by a dict look-up (a
    Python call only for a chunk never seen). The chunks' terms are analysed afterwards, once per
    distinct chunk, and numpy expands chunk numbers into term ids. Numbering the terms while going
    through the chunks in order of first sight gives each term the id of its first occurrence in
    the texts (a term first occurs in the earliest chunk that holds it).
    """

    def __init__(self) -> None:
        self.terms: dict[str, int] = {}
        self._chunks = _ChunkNumbers()
        self._counts = array("q")  # chunk number -> how many terms it has
        self._term_ids = array("i")  # the chunks' term ids, one chunk after the other

    def ids(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(token ids of every text, in order; tokens per text)."""
        _check_cache_size()
        if len(self._chunks) > _CACHE_LIMIT:  # a memo only: the ids live in self.terms
            self._chunks = _ChunkNumbers()
            self._counts, self._term_ids = array("q"), array("i")
        numbers, ends = array("i"), array("q")
        extend, append, number = numbers.extend, ends.append, self._chunks.__getitem__
        for text in texts:
            extend(map(number, _chunks(text)))
            append(len(numbers))
        self._number_fresh_terms()
        counts_by_chunk = np.array(self._counts, dtype=np.int64)
        starts_by_chunk = np.cumsum(counts_by_chunk) - counts_by_chunk
        words = np.frombuffer(numbers, dtype=np.int32)
        counts = counts_by_chunk[words]
        done = np.cumsum(counts)  # tokens up to and including each word
        firsts = np.repeat(starts_by_chunk[words] - (done - counts), counts)
        token_ids = np.array(self._term_ids, dtype=np.int32)[firsts + np.arange(len(firsts))]
        text_ends = np.concatenate(([0], done))[np.frombuffer(ends, dtype=np.int64)]
        return token_ids, np.diff(text_ends, prepend=0)

    def _number_fresh_terms(self) -> None:
        """Analyse the chunks first seen in the last call, numbering their new terms."""
        terms, fresh = self.terms, self._chunks.fresh
        number = terms.setdefault
        analysed = list(map(_CHUNKS.__getitem__, fresh))
        self._counts.extend(map(len, analysed))
        self._term_ids.extend([number(term, len(terms)) for term in chain.from_iterable(analysed)])
        fresh.clear()
