"""Saved comparison reports: an HTML file that opens offline with its charts, tables and runs (all
user strings escaped), a LaTeX table whose marks are the project's paired tests, and reopening a
report's runs in the app as imported runs."""

from __future__ import annotations

import hashlib
import html
import json
import re
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest

from r2med_core import DataError, evaluate, load_demo, paired_test, run_system
from r2med_core.evaluation import holm
from r2med_core.imported_runs import available_runs, kept_provenance, load_run
from r2med_core.reporting.provenance import collect
from r2med_core.reporting.saved_report import (
    DATA_ID,
    Report,
    ReportSystem,
    latex_escape,
    letter,
    read_report,
    reopen_report,
)
from r2med_core.runs import Run
from r2med_core.settings import parse_prices
from tests.test_app import open_app, significance

TASK = "clinical-evidence"
METRICS = ("ndcg_at_10", "recall_at_100", "mrr")
NASTY = 'Mine </script><script>alert(1)</script> & "co" a_b 50% #1 $x$ {y} ~^\\'


@pytest.fixture(scope="module")
def dataset():  # type: ignore[no-untyped-def]
    return load_demo(TASK)


def _gold_first(dataset) -> Run:  # type: ignore[no-untyped-def]
    """A run much better than BM25 and MiniLM: every query's gold documents first, then the rest."""
    docs = list(dataset.corpus)[::-1]
    rankings = {}
    for qid in dataset.queries:
        order = list(dict.fromkeys([*dataset.positives(qid), *docs]))[:100]
        rankings[qid] = [(doc, float(100 - i) + 0.123456789) for i, doc in enumerate(order)]
    return Run("run:oracle", rankings)


@pytest.fixture(scope="module")
def systems(dataset, tmp_path_factory: pytest.TempPathFactory) -> list[ReportSystem]:  # type: ignore[no-untyped-def]
    out = []
    with pytest.MonkeyPatch.context() as patch:  # the runs' cache away from the user's, once per module
        patch.setenv("R2MED_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        for name, label in (("bm25", "BM25 (R2MED official)"), ("minilm", NASTY)):
            run = run_system(dataset, name)
            out.append(ReportSystem(name, label, run, evaluate(run, dataset.qrels, dataset_name=dataset.name)))
    oracle = _gold_first(dataset)
    out.append(ReportSystem(oracle.name, "Oracle_run & co", oracle, evaluate(oracle, dataset.qrels), note="made up"))
    return out


@pytest.fixture(scope="module")
def report(dataset, systems) -> Report:  # type: ignore[no-untyped-def]
    return Report(dataset, systems, metrics=METRICS, settings={"task": TASK, "query rewrite": "off"})


@pytest.fixture(scope="module")
def page(report) -> str:  # type: ignore[no-untyped-def]
    return report.html()


class _Tags(HTMLParser):
    """Every start tag with its attributes, and the text inside each table cell."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _parse(text: str) -> _Tags:
    parser = _Tags()
    parser.feed(text)
    return parser


# --------------------------------------------------------------------------- the HTML file


def test_the_html_opens_offline_with_its_charts_and_tables(page: str, systems: list[ReportSystem]) -> None:
    parsed = _parse(page)
    scripts = [attrs for tag, attrs in parsed.tags if tag == "script"]
    assert scripts and all("src" not in attrs for attrs in scripts)  # plotly.js is inlined, not fetched
    assert not [t for t, _ in parsed.tags if t in ("link", "iframe", "img", "object", "embed")]
    head = page[: page.index("<body>")]
    assert "http" not in head and "@import" not in page
    assert page.count("Plotly.newPlot") == 3  # the means, metric@k and per-query charts
    assert len(re.findall(r"/\*\*\s*\n?\s*\* plotly\.js v", page)) <= 1  # the library once, not per chart
    assert "plotly.js" in page
    # the means table: one row per system, each value as the evaluator computed it, marks after it,
    # then its 95 % interval, which holds the mean
    cell_form = re.compile(r"(\d\.\d{4})([a-c]*)\[(\d\.\d\d), (\d\.\d\d)\]")
    rows = [r for r in parsed.rows if len(r) == 2 + len(METRICS) and cell_form.fullmatch(r[2])]
    assert [r[1] for r in rows] == [s.label for s in systems]
    for row, system in zip(rows, systems):
        for cell, metric in zip(row[2:], METRICS):
            value, _, low, high = cell_form.fullmatch(cell).groups()  # type: ignore[union-attr]
            assert value == f"{system.results.means[metric]:.4f}"
            assert float(low) - 0.005 <= system.results.means[metric] <= float(high) + 0.005
    assert "95% bootstrap confidence interval (BCa, 10,000 resamples of the queries, seed 0)" in page
    # the systems with their canonical names and settings, and the test the marks come from
    assert ["a", "BM25 (R2MED official)", "bm25", "the benchmark's", "12"] in parsed.rows
    assert ["c", "Oracle_run & co", "run:oracle", "made up", "12"] in parsed.rows
    # the 12 demo queries: scipy ran the exact test (2**12 sign assignments), and the caption says so
    assert "exact paired randomization test (all 4,096 sign assignments of 12 queries)" in page
    assert "10,000 sign flips" not in page and "alpha = 0.05" in page
    assert "Holm-Bonferroni correction over the 3 pairs" in page


def test_user_strings_are_escaped_and_cannot_leave_the_data_block(page: str, systems: list[ReportSystem]) -> None:
    assert "<script>alert(1)" not in page
    assert html.escape(NASTY) in page  # shown as written in the tables
    # the JSON block ends at its own </script>: the label inside it cannot close it early
    block = re.search(r'<script type="application/json" id="' + DATA_ID + r'">(.*?)</script>', page, re.S)
    assert block is not None and "<" not in block.group(1)
    payload = json.loads(block.group(1))
    assert [s["label"] for s in payload["systems"]] == [s.label for s in systems]
    assert [s["name"] for s in payload["systems"]] == ["bm25", "minilm", "run:oracle"]
    # in the charts the label is HTML-escaped too, so plotly shows it as text instead of reading its tags
    assert "alert(1)</script>" not in page.replace("<\\/script>", "")


def test_report_reopens_runs_equal_to_the_originals(dataset, page: str, systems: list[ReportSystem]) -> None:  # type: ignore[no-untyped-def]
    reopened = reopen_report(dataset, page.encode("utf-8"), "saved report.html")
    assert reopened.systems == ["run:bm25", "run:minilm", "run:oracle"]
    for system, name in zip(systems, reopened.systems):
        run = load_run(dataset, name.removeprefix("run:")).run
        assert set(run.rankings) == set(system.run.rankings)
        for qid, ranking in system.run.rankings.items():
            assert [d for d, _ in run.rankings[qid]] == [d for d, _ in ranking]
            assert [s for _, s in run.rankings[qid]] == pytest.approx([s for _, s in ranking], abs=5e-7)
        again = evaluate(run, dataset.qrels)
        assert again.means == pytest.approx(system.results.means, abs=1e-12)
    # saved with what it came from, and reopening the same file twice adds nothing new
    assert {e.label for e, _, _ in reopened.entries} == {"bm25.trec", "minilm.trec", "oracle.trec"}
    assert reopen_report(dataset, page.encode("utf-8"), "saved report.html").systems == reopened.systems
    assert len(available_runs(dataset)) == 3


def _messages(err: pytest.ExceptionInfo[DataError]) -> list[str]:
    return [str(p) for p in err.value.problems]


def test_tampered_or_malformed_reports_are_refused_naming_the_file(dataset, page: str) -> None:  # type: ignore[no-untyped-def]
    block = re.search(r'(<script type="application/json" id="' + DATA_ID + r'">)(.*?)(</script>)', page, re.S)
    assert block is not None
    line = page[: block.start(2)].count("\n") + 1
    payload = json.loads(block.group(2))

    def with_payload(text: str) -> bytes:  # written as the report writes it: "<" escaped inside the block
        return (page[: block.start(2)] + text.replace("<", "\\u003c") + page[block.end(2) :]).encode("utf-8")

    edited = json.loads(block.group(2))
    first = edited["systems"][0]["trec"].split("\n", 1)[0]
    edited["systems"][0]["trec"] = edited["systems"][0]["trec"].replace(first, first.replace(" 1 ", " 2 ", 1), 1)
    cases = [
        (with_payload(json.dumps(edited)), "the run of 'bm25' was changed after the report was saved"),
        (with_payload(block.group(2)[:-40]), f"report.html:{line}: the runs block is malformed JSON"),
        (b"<html><body>just a page</body></html>", "report.html: not a report saved by R2MED Explorer"),
        (with_payload(json.dumps({**payload, "version": 99})), "report version 99 is not one this app reads"),
        (with_payload(json.dumps({**payload, "systems": []})), "the runs block holds no runs"),
        (page.encode() + page[block.start(1) : block.end(3)].encode(), "2 runs blocks where a saved report has one"),
    ]
    for data, expected in cases:
        with pytest.raises(DataError) as err:
            read_report(data, "report.html")
        assert any(expected in m and m.startswith("report.html") for m in _messages(err)), _messages(err)

    # a run whose checksum was recomputed but whose TREC text is broken: file, run and line named
    broken = json.loads(block.group(2))
    trec = broken["systems"][1]["trec"].split("\n")
    trec[2] = "not a trec line"
    broken["systems"][1]["trec"] = "\n".join(trec)
    broken["systems"][1]["sha256"] = hashlib.sha256(broken["systems"][1]["trec"].encode()).hexdigest()
    with pytest.raises(DataError) as err:
        reopen_report(dataset, with_payload(json.dumps(broken)), "report.html")
    assert "report.html › minilm:3: expected 6 columns" in _messages(err)[0]
    assert available_runs(dataset) == {}  # nothing stored: the good runs of a bad report are not added

    other = json.loads(block.group(2))
    other["dataset"]["name"] = "clinical-case"
    with pytest.raises(DataError) as err:
        reopen_report(dataset, with_payload(json.dumps(other)), "report.html")
    assert "report.html: the report was saved on 'clinical-case'" in _messages(err)[0]


# --------------------------------------------------------------------------- the LaTeX table


def _unescaped(text: str, char: str) -> int:
    return len(re.findall(r"(?<!\\)" + re.escape(char), text))


def test_latex_is_balanced_escaped_and_its_marks_are_the_paired_tests(report: Report, systems) -> None:  # type: ignore[no-untyped-def]
    tex = report.latex()
    body = re.sub(r"\\\\", "", tex)  # row ends, so an escaped brace is \{ and never \\{
    assert _unescaped(body, "{") == _unescaped(body, "}")
    depth = 0
    for char in re.sub(r"\\[{}]", "", body):
        depth += {"{": 1, "}": -1}.get(char, 0)
        assert depth >= 0
    assert re.findall(r"\\begin\{(\w+)\}", tex) == ["table", "tabular"]
    assert re.findall(r"\\end\{(\w+)\}", tex) == ["tabular", "table"]
    assert "\\toprule" in tex and "\\midrule" in tex and "\\bottomrule" in tex
    caption = re.search(r"\\caption\{(.*)\}\n", tex)
    assert caption and "paired randomization test" in caption.group(1) and "$\\alpha = 0.05$" in caption.group(1)
    assert "Holm-Bonferroni correction over the 3 pairs" in caption.group(1)
    # system names: every special character escaped, so they typeset as written
    assert latex_escape(NASTY) in tex and "Oracle\\_run \\& co" in tex
    assert "a\\_b 50\\% \\#1 \\$x\\$ \\{y\\} \\textasciitilde{}\\textasciicircum{}\\textbackslash{}" in tex
    assert _unescaped(tex.split("\\caption")[0], "%") == 1  # only the leading comment line
    rows = [line for line in tex.splitlines() if re.match(r"^[a-c] & ", line)]
    assert len(rows) == 3 and all(_unescaped(r, "&") == 1 + len(METRICS) for r in rows)

    results = [s.results for s in systems]
    for m, metric in enumerate(METRICS):
        pairs = [(i, j) for i in range(3) for j in range(i + 1, 3)]
        tests = [paired_test(results[i], results[j], metric) for i, j in pairs]
        adjusted = holm([t.randomization_pvalue for t in tests])
        expected = {i: set() for i in range(3)}
        for (i, j), t, p in zip(pairs, tests, adjusted):
            if p < 0.05:
                expected[j if t.delta > 0 else i].add(letter(i if t.delta > 0 else j))
        best = max(round(r.means[metric], 4) for r in results)
        for index, row in enumerate(rows):
            cell = row.split(" & ")[2 + m].removesuffix(" \\\\")
            visible = re.sub(r"\\hphantom\{\\textsuperscript\{[a-c]+\}\}", "", cell)
            marks = set("".join(re.findall(r"\\textsuperscript\{([a-c]+)\}", visible)))
            assert marks == expected[index], (metric, index, cell)
            assert cell.startswith("\\textbf{") == (round(results[index].means[metric], 4) == best)
    # the oracle beats both others on nDCG@10: the table says so, and the HTML agrees
    assert "\\textbf{1.0000}\\textsuperscript{ab}" in rows[2]


def test_the_test_and_alpha_chosen_change_the_caption_and_marks(dataset, systems) -> None:  # type: ignore[no-untyped-def]
    strict = Report(dataset, systems, metrics=("ndcg_at_10",), test="t-test", alpha=1e-12)
    tex = strict.latex()
    assert "paired Student's t-test" in tex and "$\\alpha = 1e-12$" in tex
    assert "\\textsuperscript{" not in re.sub(r"\\hphantom\{\\textsuperscript\{[a-c]+\}\}", "", tex)
    with pytest.raises(ValueError):
        Report(dataset, systems, test="wilcoxon")


# --------------------------------------------------------------------------- the app


@pytest.fixture
def _computes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pages may compute MiniLM by themselves (gating is tested in test_jobs.py)."""
    monkeypatch.setenv("R2MED_COMPUTE_SECONDS", "100000")


def _record_reports(monkeypatch: pytest.MonkeyPatch) -> list[Report]:
    """Every Report the pages build from now on, in order (the page builds one; a click saves it)."""
    import r2med_app.views.panels.saved_reports as saved_reports

    made: list[Report] = []

    class Recording(Report):
        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(saved_reports, "Report", Recording)
    return made


@pytest.mark.usefixtures("_computes")
def test_compare_page_offers_both_downloads_of_what_it_compares(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _record_reports(monkeypatch)
    at = open_app("compare", task=TASK, systems=["bm25", "minilm"])
    labels = [b.proto.label for b in at.get("download_button")]
    assert labels == ["Download report (HTML)", "Download LaTeX table"]
    assert made, "the page built no report"
    report = made[-1]
    assert [s.name for s in report.systems] == ["bm25", "minilm"]
    assert [t.system for t in report.baseline_tests] == ["minilm"]
    text = report.html()
    assert "Paired tests against the baseline" in text and "MiniLM" in text
    assert report.latex().count("\\\\\n") == 3  # header and two systems

    at = open_app("metrics", task=TASK, systems=["bm25", "minilm"])
    labels = [b.proto.label for b in at.get("download_button")]
    assert "Download report (HTML)" in labels and "Download LaTeX table" in labels


@pytest.mark.usefixtures("_computes")
def test_uploading_a_report_on_compare_reopens_its_runs(page: str) -> None:
    at = open_app("compare", task=TASK, systems=["bm25"])
    at.file_uploader(key="w_report_file").set_value(("my report.html", page.encode(), "text/html")).run()
    at.button(key="w_report_open").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert any("Reopened 3 runs from my report" in s.value.replace("\\", "") for s in at.success)
    assert at.multiselect(key="w_compare").value == ["run:bm25", "run:minilm", "run:oracle"]
    assert list(significance(at).index) == ["Run minilm (imported)", "Run oracle (imported)"]
    assert {"run:bm25", "run:minilm", "run:oracle"} <= set(at.multiselect(key="w_systems").value)


@pytest.mark.usefixtures("_computes")
def test_a_bad_report_upload_names_the_file_and_the_app_lives_on() -> None:
    at = open_app("compare", task=TASK, systems=["bm25", "minilm"])
    at.file_uploader(key="w_report_file").set_value(("notes.html", b"<html>hello</html>", "text/html")).run()
    at.button(key="w_report_open").click().run()
    assert not at.exception
    assert any("notes.html: not a report saved by R2MED Explorer" in e.value.replace("\\", "") for e in at.error)
    assert at.get("download_button")  # the page still shows the comparison


def test_a_report_dropped_on_your_runs_reopens_its_runs_too(page: str) -> None:
    at = open_app(task=TASK, systems=["bm25"])
    at.file_uploader(key="w_run_file").set_value(("saved.html", page.encode(), "text/html")).run()
    at.button(key="w_run_add").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any("Reopened 3 runs from saved" in s.value.replace("\\", "") for s in at.success)
    at.run()
    assert {"run:bm25", "run:minilm", "run:oracle"} <= set(at.multiselect(key="w_systems").value)


_CHARTS_DRAWN = (
    "[...document.querySelectorAll('.js-plotly-plot')].filter(p => p.querySelector('.main-svg')).length === 3"
)


@pytest.mark.browser
def test_the_saved_report_draws_its_charts_in_chromium_with_the_network_off(page: str, tmp_path: Path) -> None:
    """Opened from disk with every request but the file itself refused: the three charts draw, and
    the label carrying a <script> shows as text instead of running."""
    from playwright.sync_api import sync_playwright

    from tests.test_browser import CHROMIUM, CHROMIUM_ARGS

    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found (apt-get install chromium)")
    path = tmp_path / "report.html"
    path.write_text(page, encoding="utf-8")
    requested: list[str] = []
    dialogs: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(offline=True)

            def refuse(route) -> None:  # type: ignore[no-untyped-def]
                if route.request.url != path.as_uri():
                    requested.append(route.request.url)
                    route.abort()
                else:
                    route.continue_()

            context.route("**/*", refuse)
            tab = context.new_page()
            tab.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
            tab.goto(path.as_uri())
            tab.wait_for_function(_CHARTS_DRAWN, timeout=60_000)
            cells = tab.locator("td").all_inner_texts()
        finally:
            browser.close()
    assert requested == [] and dialogs == []
    assert NASTY in cells  # the label, shown exactly as written


def test_a_run_a_trec_file_cannot_hold_is_named_in_the_report_not_a_crash(dataset, systems) -> None:  # type: ignore[no-untyped-def]
    spaced = Run("run:spaced", {"0": [("doc with spaces", 1.0)]})
    odd = ReportSystem("run:spaced", "Spaced", spaced, evaluate(spaced, dataset.qrels))
    text = Report(dataset, [systems[0], odd], metrics=("ndcg_at_10",)).html()
    assert "The run of Spaced is not in this file and cannot be reopened" in text
    assert [r.name for r in read_report(text.encode(), "r.html").runs] == ["bm25"]


# --------------------------------------------------------------------------- provenance in the files


EVIL_MODEL = "gpt-<script>alert('p')</script>"


def test_each_systems_provenance_is_in_both_files_escaped_and_kept_when_reopened(dataset, systems) -> None:  # type: ignore[no-untyped-def]
    uses = [{"model": EVIL_MODEL, "use": "listwise rerank", "prompt": 1200, "completion": 34}]
    record = collect(dataset, "bm25", llm_usage=uses, wall_seconds=2.5)
    with_record = [replace(systems[0], provenance=record), *systems[1:]]
    saved = Report(dataset, with_record, metrics=METRICS, prices=parse_prices(f"{EVIL_MODEL}=1000/2000 USD"))
    page = saved.html()

    assert "<script>alert('p')" not in page and html.escape(EVIL_MODEL) in page  # shown as written, never run
    section = page[page.index("<h2>Provenance</h2>") : page.index("<h2>Charts</h2>")]
    assert section.count("<details><summary>a · ") == 1 and "b · " not in section  # only systems with a record
    cost = "1,200 prompt tokens, 34 completion tokens (≈ 1.268 USD at the configured price per 1M tokens)"
    assert html.escape(cost) in section and html.escape("listwise rerank · " + EVIL_MODEL) in section
    assert html.escape(json.dumps(record.to_json(), indent=2, ensure_ascii=False, sort_keys=True)) in section

    tex = saved.latex()
    after = tex[tex.index("\\end{table}") + len("\\end{table}\n") :].splitlines()
    assert after and all(line.startswith("%") for line in after)  # a comment block: nothing reaches TeX
    assert "% Provenance of each system" in tex and f"cost {json.dumps(cost)}" in tex
    kept = json.loads("\n".join(line.removeprefix("%   ") for line in after if line.startswith("%   ")))
    assert kept == json.loads(json.dumps(record.to_json()))
    assert "<script>" not in tex.split("\\end{table}")[0]

    reopened = reopen_report(dataset, page.encode("utf-8"), "with provenance.html")
    assert [run.provenance for _, _, run in reopened.entries] == [record, None, None]
    assert kept_provenance(dataset, reopened.systems[0]) == record.to_json()  # the run keeps where it came from
    assert kept_provenance(dataset, reopened.systems[1]) is None


def test_a_report_whose_provenance_was_edited_badly_is_refused_naming_the_file(dataset, systems) -> None:  # type: ignore[no-untyped-def]
    record = collect(dataset, "bm25")
    page = Report(dataset, [replace(systems[0], provenance=record)], metrics=METRICS).html()
    block = re.search(r'(<script type="application/json" id="' + DATA_ID + r'">)(.*?)(</script>)', page, re.S)
    payload = json.loads(block.group(2))
    payload["systems"][0]["provenance"] = {"system": 5}
    edited = page.replace(block.group(2), json.dumps(payload).replace("<", "\\u003c"))
    with pytest.raises(DataError) as err:
        read_report(edited.encode("utf-8"), "edited.html")
    assert any("edited.html" in m and "provenance of 'bm25'" in m for m in _messages(err))


# --------------------------------------------------------------------------- colours and left-out systems


def _series_colours(fig) -> list[str]:  # type: ignore[no-untyped-def]
    """Each legend entry's colour (marker for bars and boxes, line for curves), once per system."""
    seen: dict[str, str] = {}
    for trace in fig.data:
        colour = trace.marker.color if trace.type in ("bar", "box") else trace.line.color
        seen.setdefault(trace.legendgroup or trace.name, colour)
    return list(seen.values())


def test_a_report_built_inside_the_app_keeps_real_distinct_colours(dataset, systems) -> None:  # type: ignore[no-untyped-def]
    """Inside a Streamlit process plotly's default template is Streamlit's, whose colours are
    placeholders (#000001…) only its frontend fills in: a saved report must not draw with them."""
    import plotly.io as pio
    from streamlit.elements.lib.streamlit_plotly_theme import configure_streamlit_plotly_theme

    configure_streamlit_plotly_theme()  # what importing streamlit's plotly element does in the app
    assert pio.templates.default == "streamlit"
    report = Report(dataset, systems, metrics=METRICS)
    placeholder = re.compile(r"#0000(0[1-9]|[1-3]\d|40)\b")  # Streamlit's #000001 … #000040
    assert not placeholder.search(report.html().split("<h2>Charts</h2>")[1])
    for heading, fig in report._figures():
        assert not placeholder.search(fig.to_json()), heading
        colours = _series_colours(fig)
        assert len(colours) == len(systems), heading
        assert len(set(colours)) == len(systems), f"{heading}: series share a colour {colours}"
        assert all(re.fullmatch(r"#[0-9A-Fa-f]{6}", c) and not c.startswith("#0000") for c in colours), colours


@pytest.mark.usefixtures("_computes")
def test_the_metrics_page_draws_the_reports_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    """One builder for page and report: the page's charts have the report's series and colours."""
    made = _record_reports(monkeypatch)
    at = open_app("metrics", task=TASK, systems=["bm25", "minilm"])
    assert not at.exception, [e.value for e in at.exception]
    page_bars, page_curves = (json.loads(c.proto.spec) for c in at.get("plotly_chart")[:2])
    report_figs = [fig.to_plotly_json() for _, fig in made[-1]._figures()]
    for page_fig, report_fig in ((page_bars, report_figs[0]), (page_curves, report_figs[1])):
        page_series = {t["name"]: t.get("marker", {}).get("color") or t["line"]["color"] for t in page_fig["data"]}
        report_series = {t["name"]: t.get("marker", {}).get("color") or t["line"]["color"] for t in report_fig["data"]}
        assert page_series == report_series
        assert len(set(page_series.values())) == 2
        assert not any(c.startswith("#0000") for c in page_series.values()), page_series  # real colours


def test_a_system_chosen_but_not_computed_is_named_on_the_page_and_in_the_report(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from r2med_core.compute.workbench import Workbench

    made = _record_reports(monkeypatch)
    monkeypatch.setenv("R2MED_CACHE_DIR", str(tmp_path))
    ready = Workbench.ready
    monkeypatch.setattr(Workbench, "ready", lambda self, data, system: system != "minilm" and ready(self, data, system))
    at = open_app("metrics", task=TASK, systems=["bm25", "minilm"])
    assert not at.exception, [e.value for e in at.exception]
    assert any("Not in the report until computed" in w.value and "MiniLM" in w.value for w in at.warning)
    report = made[-1]
    assert [s.name for s in report.systems] == ["bm25"]
    text = report.html()
    assert "Not in this report:" in text and "MiniLM" in text.split("Not in this report:")[1][:200]
    assert report.latex().startswith("% Not in this report:")
