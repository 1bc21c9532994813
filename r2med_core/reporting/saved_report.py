"""Saved comparison reports: one self-contained HTML file (charts, tables with significance marks,
the settings, and the runs themselves) and a LaTeX table, both built from the same tests.

The HTML opens offline (plotly.js is inlined once, nothing is fetched) and every string that came
from a dataset, a file or a user is escaped. It carries its runs as TREC text in a
``<script type="application/json">`` block, so uploading the file reopens them as imported runs
(:func:`reopen_report`, through :func:`r2med_core.imported_runs.save_upload`, validated like any upload).

Significance is all pairs on each metric with the project's paired tests
(:func:`r2med_core.evaluation.paired_test`), Holm-corrected over the pairs of a metric, as
ranx's ``compare`` marks them: a superscript letter on a system's value names each system it is
significantly better than.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

import plotly.graph_objects as go

from r2med_core.data import DataError, Dataset, Problem
from r2med_core.evaluation import (
    MAIN_METRICS,
    PairedTest,
    Results,
    holm,
    metric_label,
    paired_test,
    randomization_words,
)
from r2med_core.imported_runs import (
    RUN_PREFIX,
    ImportedRun,
    RunEntry,
    keep_provenance,
    parse_run,
    sanitize_run_name,
    save_upload,
)
from r2med_core.intervals import DESCRIPTION, PAIRED_DESCRIPTION, Interval
from r2med_core.reporting.figures import curves_figure, means_figure, per_query_figure
from r2med_core.reporting.provenance import Provenance, ProvenanceError
from r2med_core.reporting.tables import test_cells
from r2med_core.runs import Run, format_trec
from r2med_core.settings import Price, Settings, load_settings

REPORT_FORMAT = "r2med-explorer-report"
REPORT_VERSION = 1
#: The id of the JSON block holding the runs; reopening looks for exactly one.
DATA_ID = "r2med-report-data"
#: The significance tests a report can use (both from :func:`paired_test`), as a caption names them.
TESTS: dict[str, str] = {
    "randomization": "two-sided paired randomization test",
    "t-test": "two-sided paired Student's t-test",
}
CORRECTIONS: dict[str, str] = {"holm": "Holm-Bonferroni correction", "none": "no correction"}
_BLOCK = re.compile(rb'<script type="application/json" id="' + DATA_ID.encode() + rb'">(.*?)</script>', re.DOTALL)


@dataclass(frozen=True, eq=False)
class ReportSystem:
    """One system in a report: its canonical name (``bm25``, ``run:gpu-model``), the label shown,
    its run and results, a note when its setting is not the benchmark's, and where its numbers
    come from (``provenance``: data, models, code, machine, tokens), shown in the report."""

    name: str
    label: str
    run: Run
    results: Results
    note: str = ""
    provenance: Provenance | None = None


def letter(index: int) -> str:
    """a, b, … z, aa, ab …: the mark of the ``index``-th system (ranx's convention)."""
    out = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        out = chr(ord("a") + rest) + out
    return out


@dataclass(frozen=True)
class Significance:
    """All-pairs paired tests per metric: which systems each system is significantly better than."""

    systems: tuple[str, ...]
    metrics: tuple[str, ...]
    test: str
    alpha: float
    correction: str
    n_resamples: int
    #: (metric, i, j) with i < j → the test of system j against system i, and its (adjusted) p-value.
    pairs: dict[tuple[str, int, int], tuple[PairedTest, float]] = field(repr=False)

    def better_than(self, metric: str, index: int) -> tuple[int, ...]:
        """Indexes of the systems that system ``index`` beats significantly on ``metric``."""
        beaten = []
        for other in range(len(self.systems)):
            if other == index:
                continue
            i, j = min(index, other), max(index, other)
            test, p = self.pairs[(metric, i, j)]
            # test.delta is system j minus system i over the queries both were evaluated on
            wins = test.delta > 0 if index == j else test.delta < 0
            if wins and p < self.alpha:
                beaten.append(other)
        return tuple(beaten)

    @property
    def test_text(self) -> str:
        """The test, as a caption names it."""
        if self.test != "randomization":
            return TESTS[self.test]
        # the test scipy ran, pair by pair: exact over a few queries, sampled over many
        return randomization_words(test for test, _ in self.pairs.values())

    @property
    def correction_text(self) -> str:
        n_pairs = len(self.systems) * (len(self.systems) - 1) // 2
        if n_pairs <= 1:
            return "one pair per metric, so no correction for multiple comparisons"
        if self.correction == "holm":
            return f"{CORRECTIONS['holm']} over the {n_pairs} pairs of each metric"
        return f"no correction for multiple comparisons over the {n_pairs} pairs of each metric"

    @property
    def description(self) -> str:
        """The sentence a caption needs: which test, alpha, which correction."""
        return f"{self.test_text}, alpha = {self.alpha:g}, {self.correction_text}"


def significance(
    results: Sequence[Results],
    metrics: Sequence[str],
    *,
    test: str = "randomization",
    alpha: float = 0.05,
    correction: str = "holm",
    n_resamples: int = 10_000,
) -> Significance:
    """Test every pair of systems on every metric with :func:`paired_test`; Holm over the pairs."""
    if test not in TESTS:
        raise ValueError(f"unknown test {test!r} (choose from {', '.join(TESTS)})")
    if correction not in CORRECTIONS:
        raise ValueError(f"unknown correction {correction!r} (choose from {', '.join(CORRECTIONS)})")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha}")
    pairs: dict[tuple[str, int, int], tuple[PairedTest, float]] = {}
    for metric in metrics:
        keys = [(i, j) for i in range(len(results)) for j in range(i + 1, len(results))]
        tests = [paired_test(results[i], results[j], metric, n_resamples=n_resamples) for i, j in keys]
        raw = [t.randomization_pvalue if test == "randomization" else t.t_pvalue for t in tests]
        adjusted = holm(raw) if correction == "holm" and len(raw) > 1 else raw
        pairs |= {(metric, i, j): (t, p) for (i, j), t, p in zip(keys, tests, adjusted)}
    return Significance(
        systems=tuple(r.run_name for r in results),
        metrics=tuple(metrics),
        test=test,
        alpha=alpha,
        correction=correction,
        n_resamples=n_resamples,
        pairs=pairs,
    )


# --------------------------------------------------------------------------- LaTeX

_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
}


def latex_escape(text: object) -> str:
    """Text set literally in LaTeX: every special character escaped (system names have ``_ & %``)."""
    return "".join(_LATEX_SPECIAL.get(c, c) for c in str(text))


def _best(values: Sequence[float], digits: int) -> set[int]:
    """The rows holding the best value as printed (ties at the shown precision are all bold)."""
    shown = [round(v, digits) for v in values]
    top = max(shown)
    return {i for i, v in enumerate(shown) if v == top}


def latex_table(
    systems: Sequence[ReportSystem],
    sig: Significance,
    *,
    dataset_name: str,
    digits: int = 4,
    prices: Mapping[str, Price] | None = None,
) -> str:
    """A booktabs table: best value per metric in bold, superscript letters for the systems a
    system is significantly better than (the others as phantoms, so columns stay aligned), and a
    caption naming the test, alpha and the correction; then each system's provenance as a comment."""
    letters = [letter(i) for i in range(len(systems))]
    lines = [
        "% Made by R2MED Explorer. Needs \\usepackage{booktabs} in the preamble.",
        "\\begin{table}[t]",
        "\\centering",
        "\\caption{Results on " + latex_escape(dataset_name) + ". The best value of each metric is in bold. "
        "A superscript letter marks a system significantly better than the system with that letter ("
        + latex_escape(sig.test_text)
        + f", $\\alpha = {sig.alpha:g}$, "
        + latex_escape(sig.correction_text)
        + ").}",
        "\\label{tab:" + re.sub(r"[^A-Za-z0-9-]+", "-", dataset_name).strip("-") + "}",
        "\\begin{tabular}{cl" + "c" * len(sig.metrics) + "}",
        "\\toprule",
        " & System & " + " & ".join(latex_escape(metric_label(m)) for m in sig.metrics) + " \\\\",
        "\\midrule",
    ]
    best = {m: _best([s.results.means[m] for s in systems], digits) for m in sig.metrics}
    for index, system in enumerate(systems):
        cells = []
        for metric in sig.metrics:
            value = f"{system.results.means[metric]:.{digits}f}"
            if index in best[metric]:
                value = f"\\textbf{{{value}}}"
            beaten = set(sig.better_than(metric, index))
            others = [i for i in range(len(systems)) if i != index]
            shown = "".join(letters[i] for i in others if i in beaten)
            hidden = "".join(letters[i] for i in others if i not in beaten)
            if shown:
                value += f"\\textsuperscript{{{shown}}}"
            if hidden:
                value += f"\\hphantom{{\\textsuperscript{{{hidden}}}}}"
            cells.append(value)
        lines.append(f"{letters[index]} & {latex_escape(system.label)} & " + " & ".join(cells) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}", "\\end{table}"]
    lines += latex_provenance(systems, letters, prices)
    return "\n".join(lines) + "\n"


def latex_provenance(
    systems: Sequence[ReportSystem], letters: Sequence[str], prices: Mapping[str, Price] | None = None
) -> list[str]:
    """Each system's provenance record as a LaTeX comment block (ignored when typeset). The JSON is
    ASCII with every line break escaped, so no text in it can end the comment and reach TeX."""
    lines: list[str] = []
    for mark, system in zip(letters, systems, strict=True):
        if system.provenance is None:
            continue
        if not lines:
            lines.append("%")
            lines.append("% Provenance of each system (R2MED Explorer's record: data, models, code, machine, tokens).")
        record = json.dumps(system.provenance.to_json(), indent=1, ensure_ascii=True, sort_keys=True)
        cost = system.provenance.cost(prices)
        lines.append(f"% ({mark}) {json.dumps(system.label, ensure_ascii=True)}: cost {json.dumps(cost)}")
        lines += [f"%   {line}" for line in record.splitlines()]
    return lines


# --------------------------------------------------------------------------- HTML

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1100px;
       padding: 0 1rem; color: #1f2937; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; font-size: 0.92rem; }
th, td { border-bottom: 1px solid #e5e7eb; padding: 0.3rem 0.7rem; text-align: left; }
th { background: #f3f4f6; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
sup { color: #2563eb; }
dl { display: grid; grid-template-columns: max-content auto; gap: 0.2rem 1rem; }
dt { font-weight: 600; }
.note { color: #6b7280; font-size: 0.88rem; }
.warn { color: #92400e; font-weight: 600; }
.ci { color: #6b7280; font-size: 0.8rem; white-space: nowrap; }
code { background: #f3f4f6; padding: 0 0.25rem; border-radius: 3px; }
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _json_for_script(payload: Any) -> str:
    """JSON that cannot end its ``<script>`` block: ``<``, ``>``, ``&`` and the JS line separators
    are written as \\u escapes (JSON readers decode them back to the same text)."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    for char, escape in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escape)
    return text


def _outcomes(system: ReportSystem) -> list[str]:
    """What the system's LLM uses did that its numbers do not say (unusable reranker replies)."""
    return system.provenance.outcomes() if system.provenance is not None else []


class Report:
    """A comparison of systems on one dataset, ready to save as HTML or LaTeX.

    Nothing is computed until asked: the tests run on the first ``html()`` / ``latex()``, once.
    """

    def __init__(
        self,
        dataset: Dataset,
        systems: Sequence[ReportSystem],
        *,
        metrics: Sequence[str] = MAIN_METRICS,
        test: str = "randomization",
        alpha: float = 0.05,
        correction: str = "holm",
        n_resamples: int = 10_000,
        settings: Mapping[str, str] | None = None,
        baseline_tests: Sequence[PairedTest] = (),
        title: str = "Comparison",
        prices: Mapping[str, Price] | None = None,
        left_out: Sequence[str] = (),
    ) -> None:
        if len(systems) < 1:
            raise ValueError("a report needs at least one system")
        self.dataset_name = dataset.name
        self.fingerprint = dataset.fingerprint
        self.systems = tuple(systems)
        self.metrics = tuple(dict.fromkeys(metrics))
        self.test, self.alpha, self.correction, self.n_resamples = test, alpha, correction, n_resamples
        self.settings = dict(settings or {})
        self.baseline_tests = tuple(baseline_tests)
        self.title = title
        self.prices = dict(prices or {})  # the operator's price per 1M tokens, for the cost lines
        #: Systems chosen on the page but not in the report (not computed yet): named, never silently dropped.
        self.left_out = tuple(left_out)
        self.created = datetime.now(UTC).isoformat(timespec="seconds")
        if test not in TESTS or correction not in CORRECTIONS:
            raise ValueError(f"unknown test {test!r} or correction {correction!r}")

    @cached_property
    def significance(self) -> Significance:
        return significance(
            [s.results for s in self.systems],
            self.metrics,
            test=self.test,
            alpha=self.alpha,
            correction=self.correction,
            n_resamples=self.n_resamples,
        )

    @cached_property
    def intervals(self) -> dict[str, dict[str, Interval | None]]:
        """Each system's 95 % bootstrap interval per metric (system name → metric → interval)."""
        return {s.name: s.results.intervals(self.metrics) for s in self.systems}

    def left_out_lines(self) -> list[str]:
        """One sentence per system chosen on the page that this report does not contain."""
        return [
            f"Not in this report: {label} was chosen on the page but had not been computed when it was saved."
            for label in self.left_out
        ]

    def latex(self, digits: int = 4) -> str:
        table = latex_table(
            self.systems, self.significance, dataset_name=self.dataset_name, digits=digits, prices=self.prices
        )
        # LaTeX comments, one line each (a name's own line breaks cannot end the comment).
        return "".join(f"% {' '.join(line.split())}\n" for line in self.left_out_lines()) + table

    # ------------------------------------------------------------------ the HTML file

    @cached_property
    def _embedded(self) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
        """Each run as TREC text with its SHA-256 (so an edited file is refused instead of silently
        reopened), and the runs a TREC file cannot hold (ids with spaces), with why."""
        embedded, left_out = [], []
        for system in self.systems:
            try:
                trec = format_trec(system.run, tag=system.name)
            except DataError as err:
                left_out.append((system.label, err.problems[0].message))
                continue
            digest = hashlib.sha256(trec.encode("utf-8")).hexdigest()
            entry: dict[str, Any] = {
                "name": system.name, "label": system.label, "note": system.note, "trec": trec, "sha256": digest
            }
            if system.provenance is not None:
                entry["provenance"] = system.provenance.to_json()
            embedded.append(entry)
        return embedded, left_out

    def payload(self) -> dict[str, Any]:
        """What the HTML embeds to reopen the runs: the dataset, the settings and the runs."""
        return {
            "format": REPORT_FORMAT,
            "version": REPORT_VERSION,
            "created": self.created,
            "dataset": {"name": self.dataset_name, "fingerprint": self.fingerprint},
            "settings": self.all_settings(),
            "systems": self._embedded[0],
        }

    def all_settings(self) -> dict[str, str]:
        """The page's settings plus the report's own (metrics, test, alpha, correction)."""
        return {
            "dataset": self.dataset_name,
            **self.settings,
            "metrics": ", ".join(metric_label(m) for m in self.metrics),
            "ranking depth evaluated": "top 100 per query (the benchmark's)",
            "significance": self.significance.description,
        }

    def html(self) -> str:
        """The whole report as one HTML file that opens offline."""
        sig = self.significance
        settings = self.all_settings()
        figures = self._figures()
        charts = []
        for index, (heading, fig) in enumerate(figures):
            body = fig.to_html(
                full_html=False,
                include_plotlyjs=index == 0,  # the library once, inlined: no network needed to open it
                config={"displaylogo": False},
                div_id=f"chart-{index}",
            )
            charts.append(f"<h3>{_e(heading)}</h3>\n{body}")
        parts = [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{_e(self.title)} · {_e(self.dataset_name)} · R2MED Explorer</title>",
            f"<style>{_STYLE}</style></head><body>",
            f"<h1>{_e(self.title)}: {_e(self.dataset_name)}</h1>",
            f'<p class="note">Saved by R2MED Explorer on {_e(self.created)}. Upload this file on the Compare '
            "page to reopen its runs as imported runs.</p>",
            "<h2>Settings</h2>",
            "<dl>" + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in settings.items()) + "</dl>",
            "<h2>Systems</h2>",
            self._systems_table(),
            *(f'<p class="note warn">{_e(line)}</p>' for line in self.left_out_lines()),
            "<h2>Mean metrics</h2>",
            self._means_table(sig),
            f'<p class="note">Best value per metric in bold. A superscript letter marks a system significantly '
            f"better than the system with that letter ({_e(sig.description)}). Under each mean: its "
            f"{_e(DESCRIPTION)}.</p>",
        ]
        if self.baseline_tests:
            parts += ["<h2>Paired tests against the baseline</h2>", self._baseline_table()]
        for label, reason in self._embedded[1]:
            parts.append(
                f'<p class="note">The run of {_e(label)} is not in this file and cannot be reopened: {_e(reason)}.</p>'
            )
        provenance = self._provenance_section()
        if provenance:
            parts += ["<h2>Provenance</h2>", provenance]
        parts += ["<h2>Charts</h2>", *charts]
        parts.append(f'<script type="application/json" id="{DATA_ID}">{_json_for_script(self.payload())}</script>')
        parts.append("</body></html>")
        return "\n".join(parts) + "\n"

    def _systems_table(self) -> str:
        benchmark = "the benchmark's"
        rows = "".join(
            f"<tr><td>{letter(i)}</td><td>{_e(s.label)}</td><td><code>{_e(s.name)}</code></td>"
            f'<td>{_e("; ".join([s.note or benchmark, *_outcomes(s)]))}</td>'
            f'<td class="num">{s.results.n_evaluated}</td></tr>'
            for i, s in enumerate(self.systems)
        )
        head = "<tr><th>mark</th><th>system</th><th>canonical name</th><th>setting</th><th>queries evaluated</th></tr>"
        return f"<table>{head}{rows}</table>"

    def _provenance_section(self) -> str:
        """Each system's provenance, folded: a summary table and the full record (all escaped)."""
        blocks = []
        for index, system in enumerate(self.systems):
            record = system.provenance
            if record is None:
                continue
            rows = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in record.summary_rows(self.prices))
            full = json.dumps(record.to_json(), indent=2, ensure_ascii=False, sort_keys=True)
            blocks.append(
                f"<details><summary>{letter(index)} · {_e(system.label)} — {_e(record.cost(self.prices))}</summary>"
                f"<dl>{rows}</dl><details><summary>the full record (JSON)</summary><pre>{_e(full)}</pre></details>"
                "</details>"
            )
        if not blocks:
            return ""
        note = (
            '<p class="note">Where each system\'s numbers come from: the data revision, the models, the rewrites, '
            "the code and packages, the machine, and the tokens API LLMs spent (cached replies count what they "
            "cost when they were made).</p>"
        )
        return note + "\n".join(blocks)

    def _means_table(self, sig: Significance, digits: int = 4) -> str:
        best = {m: _best([s.results.means[m] for s in self.systems], digits) for m in self.metrics}
        head = "<tr><th>mark</th><th>system</th>" + "".join(f"<th>{_e(metric_label(m))}</th>" for m in self.metrics)
        rows = []
        for index, system in enumerate(self.systems):
            cells = []
            for metric in self.metrics:
                value = f"{system.results.means[metric]:.{digits}f}"
                if index in best[metric]:
                    value = f"<strong>{value}</strong>"
                marks = "".join(letter(i) for i in sig.better_than(metric, index))
                interval = self.intervals[system.name][metric]
                ci = f'<br><span class="ci">{interval.text()}</span>' if interval else ""
                cells.append(f'<td class="num">{value}' + (f"<sup>{marks}</sup>" if marks else "") + f"{ci}</td>")
            rows.append(f"<tr><td>{letter(index)}</td><td>{_e(system.label)}</td>{''.join(cells)}</tr>")
        return f"<table>{head}</tr>{''.join(rows)}</table>"

    def _baseline_table(self) -> str:
        labels = {s.name: s.label for s in self.systems}
        tested = [test_cells(t) for t in self.baseline_tests]  # called only with tests: the first names the columns
        head = "".join(f"<th>{_e(name)}</th>" for name in ["system", "baseline", "metric", *tested[0]])
        rows = []
        for t, cells in zip(self.baseline_tests, tested):
            names = [labels.get(t.system, t.system), labels.get(t.baseline, t.baseline), metric_label(t.metric)]
            rows.append("<tr>" + "".join(f"<td>{_e(value)}</td>" for value in [*names, *cells.values()]) + "</tr>")
        note = (
            '<p class="note">The Compare page\'s tests: each system against the first one, over the queries '
            f"both were evaluated on. &Delta; 95% CI: the {_e(PAIRED_DESCRIPTION)}.</p>"
        )
        return f"<table><tr>{head}</tr>{''.join(rows)}</table>{note}"

    def _figures(self) -> list[tuple[str, go.Figure]]:
        """The Metrics page's charts, from the same builders (:mod:`r2med_core.reporting.figures`)."""
        labels = {s.name: s.label for s in self.systems}
        results = [s.results for s in self.systems]
        primary = self.metrics[0]
        return [
            ("Mean metrics", means_figure(results, labels, self.metrics, self.intervals)),
            ("Metric @ k", curves_figure(results, labels)),
            (f"Per-query {metric_label(primary)}", per_query_figure(results, labels, primary)),
        ]


# --------------------------------------------------------------------------- reopening


@dataclass(frozen=True)
class SavedRun:
    name: str
    label: str
    trec: str
    provenance: Provenance | None = None


@dataclass(frozen=True)
class SavedReport:
    """What a saved report's JSON block holds, checked."""

    dataset_name: str
    fingerprint: str
    settings: dict[str, str]
    runs: tuple[SavedRun, ...]


def read_report(data: bytes, label: str) -> SavedReport:
    """The runs a saved HTML report carries; a DataError naming ``label`` (and the line) when the file
    is not such a report, was cut short, or its runs were edited after it was saved."""

    def fail(message: str, line: int | None = None) -> DataError:
        return DataError([Problem(label, line, message)])

    blocks = list(_BLOCK.finditer(data))
    if not blocks:
        raise fail(
            "not a report saved by R2MED Explorer (it holds no runs block); upload the .html file "
            "downloaded with 'Download report (HTML)'"
        )
    if len(blocks) > 1:
        raise fail(f"{len(blocks)} runs blocks where a saved report has one: the file was edited")
    block = blocks[0]
    line = data.count(b"\n", 0, block.start(1)) + 1
    try:
        text = block.group(1).decode("utf-8")
    except UnicodeDecodeError as err:
        raise fail(f"the runs block is not UTF-8 text (byte {err.start})", line) from None
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as err:
        raise fail(f"the runs block is malformed JSON: {err.msg} (column {err.colno})", line + err.lineno - 1) from None
    except (ValueError, RecursionError) as err:
        raise fail(f"the runs block is unreadable JSON: {type(err).__name__}", line) from None
    if not isinstance(payload, dict) or payload.get("format") != REPORT_FORMAT:
        raise fail("the runs block is not an R2MED Explorer report", line)
    if payload.get("version") != REPORT_VERSION:
        raise fail(f"report version {payload.get('version')!r} is not one this app reads ({REPORT_VERSION})", line)
    dataset = payload.get("dataset")
    systems = payload.get("systems")
    settings = payload.get("settings", {})
    if not (
        isinstance(dataset, dict)
        and isinstance(dataset.get("name"), str)
        and isinstance(dataset.get("fingerprint", ""), str)
    ):
        raise fail("the runs block does not say which dataset the runs were made on", line)
    if not isinstance(systems, list) or not systems:
        raise fail("the runs block holds no runs", line)
    if not isinstance(settings, dict):
        settings = {}
    runs = []
    for n, entry in enumerate(systems, start=1):
        fields = ("name", "label", "trec", "sha256")
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in fields):
            raise fail(f"run {n} of the runs block lacks its name, label, TREC text or checksum", line)
        if hashlib.sha256(entry["trec"].encode("utf-8")).hexdigest() != entry["sha256"]:
            raise fail(f"the run of {entry['name']!r} was changed after the report was saved (checksum mismatch)", line)
        record = None
        if entry.get("provenance") is not None:
            try:
                record = Provenance.from_json(entry["provenance"], source=f"the provenance of {entry['name']!r}")
            except ProvenanceError as err:
                raise fail(str(err), line) from None
        runs.append(SavedRun(entry["name"], entry["label"], entry["trec"], record))
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise fail("the runs block names a system twice", line)
    return SavedReport(
        dataset_name=dataset["name"],
        fingerprint=str(dataset.get("fingerprint", "")),
        settings={str(k): str(v) for k, v in settings.items()},
        runs=tuple(runs),
    )


@dataclass(frozen=True)
class Reopened:
    """The runs a report brought back, as imported runs, and what to tell the user."""

    entries: tuple[tuple[RunEntry, ImportedRun, SavedRun], ...]
    warnings: tuple[str, ...] = ()

    @property
    def systems(self) -> list[str]:
        return [entry.system for entry, _, _ in self.entries]


def upload_file_name(system: str) -> str:
    """The file name a reopened run is stored under (its run name is derived from it)."""
    return sanitize_run_name(system.removeprefix(RUN_PREFIX)) + ".trec"


def reopen_report(
    dataset: Dataset, data: bytes, file_name: str, settings: Settings | None = None, uploader: str = ""
) -> Reopened:
    """Store a saved report's runs as imported runs of ``dataset`` (``run:<system>``).

    Every run is checked before any is stored, so a bad report adds nothing; the messages name the
    report file. A report of another dataset is refused; one of another version of the same corpus
    is reopened with a warning (documents no longer in the corpus count as not relevant).
    """
    settings = settings or load_settings()
    label = file_name.replace("\\", "/").rsplit("/", 1)[-1] or "report.html"
    if len(data) > settings.upload_max_bytes:
        raise DataError(
            [Problem(label, None, f"{len(data) / 2**20:.1f} MB is over the {settings.upload_max_mb:g} MB upload limit")]
        )
    saved = read_report(data, label)
    if saved.dataset_name != dataset.name:
        raise DataError(
            [
                Problem(
                    label,
                    None,
                    f"the report was saved on {saved.dataset_name!r}: open that dataset "
                    f"first to reopen its runs (this is {dataset.name!r})",
                )
            ]
        )
    warnings = []
    if saved.fingerprint and saved.fingerprint != dataset.fingerprint:
        warnings.append(
            f"{label}: saved on another version of {dataset.name}'s corpus; its rankings are checked against this one"
        )
    for run in saved.runs:  # all checked first: a report with one bad run adds none
        checked = parse_run(run.trec.encode("utf-8"), f"{label} › {run.name}", run.name, dataset)
        if not checked.run.rankings:
            raise DataError([Problem(f"{label} › {run.name}", None, f"no row names a query of {dataset.name}")])
    entries = []
    for run in saved.runs:
        try:
            entry, imported = save_upload(
                dataset, run.trec.encode("utf-8"), upload_file_name(run.name), settings, uploader
            )
        except DataError as err:
            raise DataError([Problem(f"{label} › {run.name}", p.line, p.message) for p in err.problems]) from None
        if run.provenance is not None:  # the run keeps where it came from, not where it was reopened
            keep_provenance(entry, run.provenance.to_json())
        entries.append((entry, imported, run))
        warnings += [f"{label} › {run.name}: {w.message}" for w in imported.warnings]
    return Reopened(tuple(entries), tuple(warnings))
