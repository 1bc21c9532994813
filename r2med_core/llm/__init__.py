"""Large language models: live query rewriting (``generation``) and how a rewrite enters retrieval by
R2MED's rules (``rewrite``), the prompts and sampling (``prompts``), where the operator's key may go
(``endpoints``), what made a rewrite set (``provenance``), a local llama.cpp server started and found by
name (``local_server``), the LLM rerankers (``llm_rerank``) and the speed a server was measured at for
them (``speed``); the chat client every one of them uses (``client``) and the one batch runner, report
and retry policy they share (``batch``).
"""
