"""Document Q&A: extract text from uploaded or operator-loaded files, cut it into passages, index them
in SQLite (FTS5 over a CJK-aware token column, optional dense vectors), retrieve, and cite.

Modules, one job each:
- `model`: the data passed between them (Section, Chunk, Hit) and `DocumentError`.
- `extract`: bytes -> sections (PDF pages, Markdown/DOCX heading paths, text), refusing bad input.
- `isolate`: runs `extract` in a child process with limits, so a crash there cannot take the app down.
- `chunk`: sections -> passages at sentence ends in both scripts, with offsets.
- `tokens`: the CJK-aware token text the index stores and the query terms it searches; `terms`: its statistics.
- `store`: the index as callers use it (`Index`, the listings), over `index_file` (the SQLite file: schema,
  opening, one writer, damage), `index_write` (documents, vectors, removal), `index_search` (BM25 within a
  postings budget, nearest vectors) and `scope` (what a search may see).
- `ingest`: a file into the index (checks, isolated extraction, chunks, vectors); `owner`: as the index's owner.
- `retrieve`: a question -> the passages to answer from, or the verdict that the documents do not answer it.
- `followup`: whether a question leans on the ones before it in the conversation (then it is searched with them).
- `embed`, `fusion`: the optional dense path (/v1/embeddings) and reciprocal-rank fusion.
- `cite`: numbered passages for the prompt, markers placed after the sentences they support.
- `agree`: whether a sentence's numbers, dates, amounts and negations agree with a passage (before `cite` marks it).
- `commands`: `ernie-ops docs add|sync|list|remove|search|embed` as typed functions.
- `config`: its config section, `chat.docs` (DocsConfig, the collections' readers, the embedding server).
"""
