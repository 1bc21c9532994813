"""``encode``, ``export``, ``import``: fill the cache with a dense model's embeddings, and carry cache
entries between machines (encode on a GPU box, export, import on a laptop)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from r2med_core.cache import cache_root, entry_path
from r2med_core.cli._common import DATA_ERROR, INTERRUPTED, UsageError, add_ray, add_source, eta_bar, load, ray
from r2med_core.data import DEMO_TASKS
from r2med_core.kinds.roles import cache_kinds
from r2med_core.retrieval.dense import PRESETS
from r2med_core.retrieval.hardware import DeviceError
from r2med_core.settings import ENCODE_BACKENDS


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this group's subcommands to ``commands`` (an argparse subparsers action)."""
    en = commands.add_parser("encode", help="encode a corpus with a dense model into the cache (resumable)")
    en.add_argument(
        "--model",
        required=True,
        help=f"a preset ({', '.join(PRESETS)}), a model id or path, or static:<model> (e.g. static:minilm)",
    )
    add_source(en)
    en.add_argument("--device", default=None, help="auto (CUDA, then MPS, then CPU), cpu, cuda, cuda:N or mps")
    en.add_argument(
        "--backend",
        default=None,
        choices=ENCODE_BACKENDS,
        help="auto (default: ONNX on a CPU when installed and measured faster, else torch), torch, onnx, onnx-int8",
    )
    en.add_argument("--batch-size", type=int, help="texts per batch (default: by device memory)")
    add_ray(en, "encode on a Ray cluster (none: local Ray)")
    en.set_defaults(handler=cmd_encode)

    ex = commands.add_parser("export", help="pack cache entries (with their manifests) into a tar.gz")
    ex.add_argument("--output", required=True, type=Path, help="the archive to write, e.g. embeddings.tar.gz")
    ex.add_argument("--kind", default="dense", choices=(*cache_kinds(), "all"))
    only = ex.add_mutually_exclusive_group()
    only.add_argument("--task", help="only entries built on this task's corpus")
    only.add_argument("--data-dir", type=Path, help="only entries built on this folder's corpus")
    only.add_argument("--demo", choices=DEMO_TASKS, help="only entries built on this demo task's corpus")
    ex.add_argument("--hf", action="store_true", help="with --task: load it from the Hugging Face hub")
    ex.set_defaults(handler=cmd_export)

    im = commands.add_parser("import", help="add the entries of an exported archive to the cache (checked)")
    im.add_argument("archive", type=Path)
    im.set_defaults(handler=cmd_import)


def cmd_encode(args: argparse.Namespace) -> int:
    from r2med_core.compute.distributed import encode_on_ray
    from r2med_core.retrieval.dense import DenseRetriever
    from r2med_core.retrieval.hardware import detect
    from r2med_core.retrieval.onnx_encoder import BackendUnavailable
    from r2med_core.retrieval.static import StaticRetriever
    from r2med_core.systems import _dense_model, parse_system

    spec = parse_system(args.model if ":" in args.model or args.model in PRESETS else f"dense:{args.model}")
    static = spec.kind == "static"  # static:<model>: the same corpus cache, a static encoder
    if spec.models() != ((spec.kind, spec.name),) or spec.kind not in ("dense", "static") or spec.rewrite:
        raise UsageError(
            f"--model must be a dense model (a preset: {', '.join(PRESETS)}, or a model id or path) or static:<model>"
        )
    if static and args.ray is not None:
        raise UsageError("--ray encodes transformer models; a static model encodes in minutes on one machine")
    try:
        hardware = detect(args.device)
    except DeviceError as err:
        raise UsageError(str(err)) from None
    cluster = ray(args)
    progress, close = eta_bar()
    try:
        dataset = load(args, progress)
        if cluster is not None:
            retriever = encode_on_ray(
                cluster, dataset, spec.name, device=args.device, backend=args.backend, progress=progress
            )
        else:
            retriever = (
                StaticRetriever(spec.name, progress)
                if static
                else DenseRetriever(
                    _dense_model(dataset, spec.name),
                    batch_size=args.batch_size,
                    device=args.device,
                    backend=args.backend,
                )
            )
            retriever.index_corpus(list(dataset.corpus), list(dataset.corpus.values()), dataset.fingerprint, progress)
    except BackendUnavailable as err:
        raise UsageError(str(err)) from None
    except KeyboardInterrupt:
        print("error: interrupted; run the same command again to resume (finished chunks are cached)", file=sys.stderr)
        return INTERRUPTED
    finally:
        close()
    key = retriever.cache_key(dataset.fingerprint)
    where = "a Ray cluster" if cluster is not None else f"{hardware.device}{' fp16' if hardware.fp16 else ''}"
    print(f"{dataset.name} · {spec.label}: {len(dataset.corpus)} documents encoded on {where}")
    print(f"cache entry: {entry_path('dense', key)}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from r2med_core.server.portable import entries, export_entries

    kinds = None if args.kind == "all" else (args.kind,)
    corpus = load(args).fingerprint if (args.task or args.data_dir or args.demo) else None
    folders = entries(kinds, corpus)
    if not folders:
        print(f"error: no {args.kind} cache entries to export in {cache_root()}", file=sys.stderr)
        return DATA_ERROR
    count = export_entries(folders, args.output)
    print(f"wrote {args.output} ({count} entries)")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from r2med_core.server.portable import ArchiveError, import_entries

    if not args.archive.is_file():
        raise UsageError(f"{args.archive}: no such file")
    try:
        report = import_entries(args.archive)
    except ArchiveError as err:
        print(f"error: {err}", file=sys.stderr)
        return DATA_ERROR
    for line in report.rejected:
        print(f"error: {line}", file=sys.stderr)
    print(
        f"imported {len(report.added)} entries, {len(report.skipped)} already present, {len(report.rejected)} rejected"
    )
    return DATA_ERROR if report.rejected else 0
