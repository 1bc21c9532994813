"""The retrieval engines: BM25 and its tokenizer (``bm25``, ``tokenize``), dense
models and their presets (``dense``), static embeddings distilled or loaded with model2vec
(``static``), the encoders behind them (``encoding``, ``onnx_encoder``,
``hardware``), cross-encoder reranking (``rerank``) and reciprocal-rank fusion (``fusion``).

System kinds (``r2med_core.kinds``) put these together; ``r2med_core.systems`` is their public face.
"""
