"""Issue 9 item 3: a deep link (``?source=local&folder=…``) opens only folders under the operator's
data roots, resolved (symlinks, ``..``); anything else gets one neutral message that does not say
whether the path exists; ``folder=/`` never walks the disk; discovery is bounded."""

from __future__ import annotations

import pathlib
from pathlib import Path

import pytest

from r2med_core.server.roots import NOT_ALLOWED, allowed_folder, discover, folder_signature

from ..conftest import TINY_CORPUS, TINY_QRELS, TINY_QUERIES, write_jsonl
from ..test_app import open_app


def make_dataset(folder: Path) -> Path:
    write_jsonl(folder / "corpus.jsonl", TINY_CORPUS)
    write_jsonl(folder / "query.jsonl", TINY_QUERIES)
    write_jsonl(folder / "qrels.jsonl", TINY_QRELS)
    return folder


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """One root with a dataset inside; a dataset outside; a symlink in the root pointing out."""
    root = tmp_path / "root"
    inside = make_dataset(root / "tasks" / "Biology")
    outside = make_dataset(tmp_path / "private" / "secret-task")
    (root / "escape").symlink_to(outside, target_is_directory=True)
    monkeypatch.setenv("R2MED_DATA_ROOTS", str(root))
    return {"root": root, "inside": inside, "outside": outside}


def _refused(at) -> bool:  # type: ignore[no-untyped-def]
    assert not at.exception, [e.value for e in at.exception]
    assert [e.value for e in at.error] == [NOT_ALLOWED]
    assert any("Choose a data source" in w.value for w in at.warning)  # no page opened on it
    return True


def test_a_folder_inside_a_root_loads(layout: dict[str, Path]) -> None:
    at = open_app("overview", source="local", folder=str(layout["inside"]))
    assert not at.error
    assert at.header[0].value == "Biology"  # the Overview names the task under the app's title
    assert any("5 documents" in c.value for c in at.sidebar.caption)


@pytest.mark.parametrize("case", ["outside", "symlink", "dotdot", "missing", "missing-inside", "relative", "slash"])
def test_every_refusal_is_the_same_neutral_message(layout: dict[str, Path], case: str) -> None:
    root, outside = layout["root"], layout["outside"]
    folder = {
        "outside": str(outside),  # exists, a valid dataset, outside the root
        "symlink": str(root / "escape"),  # inside the root by name, outside once resolved
        "dotdot": f"{root}/tasks/../../private/secret-task",
        "missing": str(outside.parent / "no-such-task"),
        "missing-inside": str(root / "tasks" / "no-such-task"),
        "relative": "tasks/Biology",
        "slash": "/",
    }[case]
    at = open_app("overview", source="local", folder=folder)
    assert _refused(at)
    assert "secret-task" not in " ".join(str(c.value) for c in at.get("caption"))


def test_folder_slash_never_walks_the_disk(layout: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Before this fix every rerun of ``folder=/`` ran ``rglob`` over the whole disk (11-15 s of CPU)."""
    walked: list[str] = []

    def no_walk(self: Path, pattern: str, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        walked.append(str(self))
        raise AssertionError(f"rglob({self})")

    monkeypatch.setattr(pathlib.Path, "rglob", no_walk)
    at = open_app(source="local", folder="/")
    at.run()
    assert _refused(at)
    assert walked == []


def test_a_symlinked_file_inside_a_root_cannot_read_outside(layout: dict[str, Path]) -> None:
    sneaky = make_dataset(layout["root"] / "sneaky")
    (sneaky / "corpus.jsonl").unlink()
    (sneaky / "corpus.jsonl").symlink_to(layout["outside"] / "corpus.jsonl")
    assert allowed_folder(str(sneaky), [layout["root"]]) is None
    assert _refused(open_app(source="local", folder=str(sneaky)))


def test_the_sidebar_offers_the_dataset_folders_found_under_the_roots(layout: dict[str, Path]) -> None:
    at = open_app(source="local")
    picker = at.sidebar.selectbox(key="w_folder")
    assert picker.options == ["root/tasks/Biology"]  # named relative to its root; the symlink is not followed
    picker.set_value(str(layout["inside"])).run()
    assert not at.exception and not at.error
    assert any("5 documents" in c.value for c in at.sidebar.caption)
    assert at.query_params["folder"] == str(layout["inside"])


def test_discovery_is_bounded_in_depth_and_count(tmp_path: Path) -> None:
    root = tmp_path / "root"
    make_dataset(root / "a" / "b" / "c")  # depth 3: found
    make_dataset(root / "a" / "b" / "c" / "d" / "e")  # depth 5: too deep
    for i in range(5):
        make_dataset(root / "many" / f"t{i}")
    found = discover([root], max_depth=3)
    assert [f.label for f in found] == [f"root/many/t{i}" for i in range(5)] + ["root/a/b/c"]
    assert len(discover([root], max_datasets=2)) == 2
    assert discover([tmp_path / "nope"]) == []


def test_the_signature_reads_only_the_dataset_files(layout: dict[str, Path]) -> None:
    inside = layout["inside"]
    write_jsonl(inside / "deep" / "er" / "than" / "needed.jsonl", [{"x": 1}])
    (inside / "hyde" / "llm").mkdir(parents=True)
    write_jsonl(inside / "hyde" / "llm" / "query_with_hydoc.jsonl", [{"id": "q1", "hy_doc": "x"}])
    names = sorted(Path(path).name for path, _, _ in folder_signature(inside))
    assert names == ["corpus.jsonl", "qrels.jsonl", "query.jsonl", "query_with_hydoc.jsonl"]
