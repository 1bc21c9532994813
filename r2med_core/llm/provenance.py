"""What made a rewrite set, written beside its ``query_with_hydoc.jsonl``.

A rewrite file alone does not say whether an LLM wrote it, which model file (a name can hide any
weights: its sha256 does not), with which prompts and sampling. ``write_provenance`` records that
in ``provenance.json`` (``"made_by": "llm"``), and every request's exact messages with the model's raw
reply and its tokens in ``replies.jsonl``, so a shipped set can be checked and regenerated.
``Dataset.hand_written`` reads the same file: a set written by hand says ``"made_by": "hand"``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from r2med_core.cache import atomic_write_text
from r2med_core.data import PROVENANCE_FILE, Dataset
from r2med_core.llm.batch import Usage
from r2med_core.llm.client import AnyEndpoint, Endpoint
from r2med_core.llm.generation import PROMPT_VERSION
from r2med_core.llm.prompts import Prompts, build_messages

#: Each request's messages, raw reply and tokens, one JSON object a line, beside the rewrite file.
REPLIES_FILE = "replies.jsonl"


def file_digest(path: str | Path) -> dict[str, Any]:
    """A model file's name, size and sha256 (read in 1 MiB blocks)."""
    path = Path(path)
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return {"name": path.name, "bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def write_provenance(
    folder: str | Path,
    dataset: Dataset,
    method: str,
    llm_name: str,
    endpoint: AnyEndpoint,
    texts: Mapping[str, str],
    usage: Mapping[str, Usage],
    prompts: Prompts,
    *,
    model_file: str | Path | None = None,
    notes: Mapping[str, str] | None = None,
    passages: Mapping[str, list[str]] | None = None,
) -> Path:
    """Write ``provenance.json`` and ``replies.jsonl`` for a generated set into ``folder`` (atomically);
    ``notes``: anything else worth keeping (the server's version …). Returns the provenance file."""
    folder = Path(folder)
    record: dict[str, Any] = {
        "made_by": "llm",
        "method": method,
        "llm_name": llm_name,
        "model": endpoint.model,
        "prompts": prompts.describe(method, dataset.name, dataset.family),
        "prompt_set": prompts.name,
        "prompt_version": PROMPT_VERSION,
        "queries": len(texts),
    }
    if isinstance(endpoint, Endpoint):
        record["sampling"] = {**endpoint.sampling(), "max_tokens": endpoint.token_budget()}
    else:
        record["sampling"] = {"temperature": endpoint.temperature, "max_tokens": endpoint.max_tokens}
    if model_file is not None:
        record["model_file"] = file_digest(model_file)
    record.update(dict(notes or {}))
    rows = []
    for qid in dataset.queries:
        if qid not in texts:
            continue
        messages = build_messages(
            method,
            dataset.queries[qid],
            dataset.family,
            list((passages or {}).get(qid, [])),
            task=dataset.name,
            prompts=prompts,
            llm_name=llm_name,
        )
        spent = usage.get(qid)
        row = {"id": qid, "messages": messages, "reply": texts[qid], "usage": spent.to_json() if spent else None}
        rows.append(json.dumps(row, ensure_ascii=False))
    atomic_write_text(folder / REPLIES_FILE, "".join(row + "\n" for row in rows))
    target = folder / PROVENANCE_FILE
    atomic_write_text(target, json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    return target
