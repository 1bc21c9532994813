"""A tokenizer worker process: pickled chunks of texts in on stdin, their term ids out on stdout.

Why a module of its own, started with ``python -m``: a multiprocessing pool re-imports the parent's
``__main__`` (the app, pytest, a benchmark) in every worker before the first chunk; this entry
imports only the tokenizer, so a worker is ready in the time it takes to import numpy.
"""

from __future__ import annotations

import os
import pickle
import sys

from r2med_core.retrieval.tokenize import _tokenize_chunk


def main() -> None:
    source = sys.stdin.buffer
    # Results get their own copy of stdout; anything a library prints goes to stderr instead of
    # corrupting the stream of pickles.
    sink = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    while True:
        try:
            texts = pickle.load(source)
        except EOFError:  # the parent closed the pipe: every chunk is done
            return
        pickle.dump(_tokenize_chunk(texts), sink, protocol=pickle.HIGHEST_PROTOCOL)
        sink.flush()


if __name__ == "__main__":
    main()
