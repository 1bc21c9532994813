"""The view's URL: every parameter is untrusted. Only the fields declared for the URL are read from or
written to it (a new session-only field is private without anyone listing it), each read by its
declared type, so a bad value (not a number, 5000 digits, NaN, a repeated or unknown parameter)
falls back to the default instead of crashing the page, and a saved link reads as it always did."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlencode

import pytest

from r2med_app.views.state import URL, View

from ..test_app import open_app


class Params:
    """A URL's query as ``st.query_params`` offers it (every value of a repeated parameter)."""

    def __init__(self, query: str) -> None:
        self._values = parse_qs(query, keep_blank_values=True)

    def get_all(self, name: str) -> list[str]:
        return self._values.get(name, [])


def link(view: View) -> str:
    """The query string a copied address (or ``state.explorer_link``) carries."""
    return urlencode(view.to_params(), doseq=True)


@dataclass
class Wider(View):
    """The view as it grows: a session-only field added without any list to update, and URL fields of
    every declared type."""

    secret_token: str = ""
    ratio: float = field(default=0.5, metadata=URL)
    limit: int | None = field(default=None, metadata=URL)
    strict: bool = field(default=True, metadata=URL)
    tags: tuple[str, ...] = field(default=(), metadata=URL)


def test_a_new_session_field_stays_out_of_the_url() -> None:
    view = Wider(secret_token="s3cr3t")
    assert "secret_token" not in view.to_params() and "s3cr3t" not in link(view)
    assert Wider.from_params(Params("secret_token=planted")).secret_token == ""


def test_the_views_private_fields_never_reach_the_url() -> None:
    view = View(annotator="ann", llm_key="sk-123", llm_url="http://x", flash="done", llm_temperature=0.7)
    assert not {"annotator", "llm_key", "llm_url", "flash", "llm_temperature"} & set(view.to_params())
    planted = View.from_params(Params("llm_url=http://evil&llm_key=k&annotator=boss&llm_max_tokens=1"))
    assert (planted.llm_url, planted.llm_key, planted.annotator, planted.llm_max_tokens) == ("", "", "", 10240)


def test_declared_types_round_trip() -> None:
    view = Wider(ratio=0.25, limit=7, strict=False, tags=("a", "b"), depth=50, fail=True)
    back = Wider.from_params(Params(link(view)))
    assert (back.ratio, back.limit, back.strict, back.tags) == (0.25, 7, False, ("a", "b"))
    assert (back.depth, back.fail) == (50, True)
    assert type(back.ratio) is float and type(back.limit) is int and type(back.tags) is tuple
    untouched = Wider.from_params(Params(""))
    assert (untouched.ratio, untouched.limit, untouched.strict, untouched.tags) == (0.5, None, True, ())


@pytest.mark.parametrize(
    "query",
    [
        "depth=abc&ratio=x&limit=-1",
        "depth=%C2%B2&limit=%D9%A3",  # "²" and an Arabic-Indic 3: str.isdigit() says yes, int() says no
        "depth=" + "9" * 5000 + "&limit=" + "9" * 40,  # past int()'s digit limit; absurdly large
        "ratio=nan&depth=1e3",
        "ratio=inf",
        "ratio=1e999",
        "ratio=0x10&depth=%200x1",
    ],
    ids=["words", "unicode-digits", "huge", "nan", "inf", "overflow", "hex"],
)
def test_a_value_its_type_refuses_falls_back_to_the_default(query: str) -> None:
    view = Wider.from_params(Params(query))
    assert (view.depth, view.ratio, view.limit) == (10, 0.5, None)


def test_repeated_and_unknown_parameters() -> None:
    view = View.from_params(Params("depth=5&depth=20&q=a&q=b&systems=bm25&systems=&systems=minilm&nope=1&__class__=x"))
    assert (view.depth, view.q) == (20, "b")  # a single value: the last, as st.query_params reads it
    assert view.systems == ["bm25", "minilm"]
    assert not hasattr(view, "nope")


@pytest.mark.parametrize(
    ("saved", "written"),
    [
        ("", "source=demo&task=clinical-case&systems=bm25&systems=minilm"),
        (
            "source=hf&task=Biology&systems=bm25&extra=x%2Fy&rewrite=hyde%3Agpt4&system=bm25&q=12&fail=1&missed=yes"
            "&search=heart&depth=20&oracle=o&diag=a&diag=b&compare=&ask=why&ask_systems=bm25&rerank=bge&rerank_k=100",
            "source=hf&task=Biology&systems=bm25&extra=x%2Fy&rewrite=hyde%3Agpt4&system=bm25&q=12&fail=1&missed=1"
            "&search=heart&depth=20&oracle=o&diag=a&diag=b&compare=&ask=why&ask_systems=bm25&rerank=bge&rerank_k=100",
        ),
        ("source=local&task=X&folder=%2Fdata&systems=&compare=bm25&compare=minilm&fail=0&depth=abc",
         "source=local&folder=%2Fdata&compare=bm25&compare=minilm"),
        ("systems=bm25&systems=&fail=true&depth=007", "source=demo&task=clinical-case&systems=bm25&fail=1&depth=7"),
    ],
)
def test_saved_links_read_and_write_as_before(saved: str, written: str) -> None:
    assert link(View.from_params(Params(saved))) == written


def test_a_hostile_number_in_the_address_leaves_the_page_working() -> None:
    at = open_app("explorer", depth="9" * 5000, rerank_k="²")
    assert at.query_params.get("depth") is None  # fell back to the default "Show top", so not written
