"""Tokenisation for the FTS5 token column, proved against a real in-memory SQLite FTS5 table."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys

import pytest

from ernie_ops.docs import tokens
from ernie_ops.docs.tokens import TOKENIZERS, fts_match, index_text, query_terms, tokenize
from ernie_ops.errors import ErnieOpsError

CJK_AWARE = [t for t in TOKENIZERS if t != "whitespace"]


class Fts:
    """A real FTS5 table over index_text, declared as the store declares it."""

    def __init__(self, tokenizer: str, docs: list[str]):
        self.tokenizer = tokenizer
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE t USING fts5(body, tokenize='unicode61')")
        self.db.executemany("INSERT INTO t(rowid, body) VALUES (?, ?)", [(i, index_text(d, tokenizer)) for i, d in enumerate(docs)])

    def search(self, question: str) -> list[int]:
        expr = fts_match(query_terms(question, self.tokenizer))
        if not expr:
            return []
        return [r for (r,) in self.db.execute("SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t)", (expr,))]


DOCS = [
    "员工入职满一年后享有5天带薪年假，年假需提前两周在OA系统中申请。",
    "VPN 配置：在IT门户下载客户端，服务器地址 vpn.example.com，端口 443。",
    "To upgrade, stop the vllm service, replace the model directory, and start it again.",
    "C++ 编码规范：头文件使用 #pragma once。",
    "C 语言的编码规范请参见内部文档。",
    "年度预算由财务部在每年一月制定。",
]


# --- what the tokenizers produce -------------------------------------------------------------------------------


def test_bigram_splits_a_chinese_run_into_overlapping_pairs_and_keeps_words_whole():
    assert tokenize("年假申请 Deploy K8S", "bigram") == ["年假", "假申", "申请", "deploy", "k8s"]
    assert tokenize("改", "bigram") == ["改"]


def test_unigram_bigram_adds_each_character():
    assert tokenize("年假", "unigram+bigram") == ["年", "假", "年假"]


def test_jieba_segments_words_and_jieba_bigram_adds_the_pairs():
    assert tokenize("员工手册", "jieba") == ["员工", "手册"]
    both = tokenize("员工入职手册", "jieba+bigram")
    assert {"员工", "工入", "入职", "职手", "手册"} <= set(both)
    assert both.count("员工") == 1  # a two-character word is a bigram already, not counted twice


def test_whitespace_is_the_naive_baseline_a_chinese_run_is_one_token():
    assert tokenize("请问年假怎么申请 VPN", "whitespace") == ["请问年假怎么申请", "vpn"]


def test_full_width_letters_and_digits_are_folded():
    for tk in TOKENIZERS:
        assert tokenize("Ｖ８０００", tk) == ["v8000"]
        assert tokenize("ﬁle", tk) == ["file"]  # NFKC beyond full-width ASCII: a ligature


def test_compounds_are_kept_whole_and_in_parts():
    toks = tokenize("see site.yml and ops@example.com", "bigram")
    assert {"site", "yml", "ops", "example", "com"} <= set(toks)
    assert tokens._safe("site.yml") in toks and tokens._safe("ops@example.com") in toks


@pytest.mark.parametrize("tokenizer", CJK_AWARE)
def test_camel_case_identifiers_are_kept_whole_and_in_parts(tokenizer):
    assert tokenize("livenessProbe", tokenizer) == ["livenessprobe", "liveness", "probe"]
    assert tokenize("HTTPServer macOS", tokenizer) == ["httpserver", "http", "server", "macos", "mac", "os"]
    assert tokenize("readinessProbe.httpGet", tokenizer) == [
        tokens._safe("readinessprobe.httpget"), "readinessprobe", "readiness", "probe", "httpget", "http", "get",
    ]  # fmt: skip
    # words that are not camelCase stay one token: all capitals, capitalised, digits after capitals (IPv6), non-ASCII
    for word in ("NGINX", "Kubernetes", "IPv6", "Straße"):
        assert tokenize(word, tokenizer) == [word.lower()]
    assert query_terms("livenessProbe 配置", tokenizer)[:3] == ["livenessprobe", "liveness", "probe"]


def test_the_whitespace_baseline_does_not_split_camel_case():
    assert tokenize("livenessProbe", "whitespace") == ["livenessprobe"]


def test_vpn_dash_chinese_is_the_word_and_the_chinese():
    for tk in CJK_AWARE:
        assert {"vpn", "配置"} <= set(tokenize("VPN-配置", tk))


@pytest.mark.parametrize("tokenizer", TOKENIZERS)
def test_every_token_is_exactly_one_unicode61_token(tokenizer):
    """If unicode61 split or dropped any token we make, the counts would differ."""
    alphabet = [
        *"abcXYZ019 年假配置部署。，！？.,;:!?-_/@+#*\"'()[]{}<>^~$%&|\\`=Ｖ８é\t\n",
        "C++",
        "VPN-配置",
        "k8s",
        "a@b.c",
        "v1.2.3",
        "livenessProbe",
        "HTTPServer.getURL",
        "ジョン・スミス",
        "한국어",
    ]
    rng = random.Random(7)
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(body, tokenize='unicode61')")
    db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    expected = {}
    for rowid in range(200):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        toks = tokenize(text, tokenizer)
        expected[rowid] = len(toks)
        db.execute("INSERT INTO t(rowid, body) VALUES (?, ?)", (rowid, " ".join(toks)))
    counted = dict(db.execute("SELECT doc, count(*) FROM v GROUP BY doc"))
    assert {r: counted.get(r, 0) for r in expected} == expected


def test_unknown_tokenizer_is_refused():
    with pytest.raises(ValueError, match="unknown tokenizer 'porter': use one of whitespace, bigram"):
        index_text("x", "porter")
    with pytest.raises(ValueError, match="unknown tokenizer"):
        query_terms("x", "")


def test_importing_tokens_does_not_load_a_segmenter():
    code = (
        "import sys, ernie_ops.docs.tokens as t; t.index_text('年假', 'bigram'); print('rjieba' in sys.modules or 'jieba' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# --- query terms -----------------------------------------------------------------------------------------------


def test_query_terms_drop_question_words_and_keep_nianjia():
    assert query_terms("请问年假怎么申请？", "bigram") == ["年假", "申请"]
    assert query_terms("公司的年假有几天", "bigram") == ["公司", "年假", "几天"]
    assert query_terms("年假", "bigram") == ["年假"]
    assert query_terms("请问年假怎么申请？", "jieba") == ["年", "假", "申请"]
    assert query_terms("请问年假怎么申请？", "jieba+bigram") == ["年假", "年", "假", "申请"]


def test_query_terms_do_not_break_words_that_contain_a_stop_character():
    assert query_terms("了解的目的", "bigram") == ["了解", "目的"]  # 了 and 的 are stop words, 了解 and 目的 are not


def test_query_terms_english_and_mixed():
    assert query_terms("What is the VPN 配置 port?", "bigram") == ["vpn", "配置", "port"]
    assert query_terms("How do I upgrade the server? upgrade!", "jieba") == ["upgrade", "server"]


def test_query_terms_of_only_stop_words_and_punctuation_are_empty():
    for tk in CJK_AWARE:
        assert query_terms("什么是？ What is it... ？！", tk) == []
        assert fts_match(query_terms("的了吗", tk)) == ""
    # The baseline keeps punctuation attached, as text.split() does: only bare stop words and punctuation go.
    assert query_terms("what is the ... ？！ 的", "whitespace") == []
    assert query_terms("What is it?", "whitespace") == [tokens._safe("it?")]


def test_query_terms_are_capped():
    question = " ".join(f"word{i}" for i in range(500))
    assert len(query_terms(question, "bigram")) == tokens.MAX_QUERY_TERMS
    assert query_terms(question, "bigram", limit=3) == ["word0", "word1", "word2"]


def test_without_rjieba_jieba_says_what_to_install_and_bigram_still_works(monkeypatch):
    """Stub: rjieba is installed here, so its absence is injected through sys.modules."""
    monkeypatch.setitem(sys.modules, "rjieba", None)
    tokens._segmenter.cache_clear()
    try:
        with pytest.raises(ErnieOpsError, match="need the rjieba package: install it, or choose the 'bigram' tokenizer"):
            index_text("年假", "jieba")
        assert query_terms("请问年假怎么申请？", "bigram") == ["年假", "申请"]  # stop words cut out without a segmenter
        assert query_terms("年假", "bigram") == ["年假"]
    finally:
        tokens._segmenter.cache_clear()


# --- retrieval on a real FTS5 table ----------------------------------------------------------------------------


@pytest.mark.parametrize("tokenizer", CJK_AWARE)
def test_nianjia_finds_the_leave_passage_first(tokenizer):
    assert Fts(tokenizer, DOCS).search("年假怎么申请？")[0] == 0


def test_whitespace_baseline_cannot_find_a_two_character_chinese_keyword():
    assert Fts("whitespace", DOCS).search("年假") == []


@pytest.mark.parametrize("tokenizer", TOKENIZERS)
def test_mixed_vpn_question(tokenizer):
    assert Fts(tokenizer, DOCS).search("VPN 配置")[0] == 1


@pytest.mark.parametrize("tokenizer", CJK_AWARE)
def test_cpp_ranks_above_c(tokenizer):
    hits = Fts(tokenizer, DOCS).search("C++ 规范")
    assert hits[0] == 3 and 4 in hits


@pytest.mark.parametrize("tokenizer", CJK_AWARE)
def test_words_find_the_camel_case_identifier_and_it_finds_itself_first(tokenizer):
    docs = ["Set a livenessProbe on every container.", "A probe of the liveness of upstream services is not allowed."]
    assert Fts(tokenizer, docs[:1]).search("liveness probe") == [0]
    assert Fts(tokenizer, docs).search("livenessProbe")[0] == 0


@pytest.mark.parametrize("tokenizer", TOKENIZERS)
def test_english_words(tokenizer):
    assert Fts(tokenizer, DOCS).search("How do I upgrade the model")[0] == 2


# --- FTS5 MATCH safety -----------------------------------------------------------------------------------------

HOSTILE = [
    '"',
    '""',
    'a"b',
    '"unterminated',
    "AND",
    "OR",
    "NOT",
    "a AND OR b",
    "NOT NOT",
    "NEAR(a b, 2)",
    "NEAR",
    "*",
    "a*",
    "^a",
    "(",
    ")",
    "((a)",
    "body:x",
    "x:y",
    "{body}: x",
    "- x",
    "+",
    "a + b",
    ":",
    "'",
    "\\",
    '年假" OR "',
    "'; DROP TABLE t; --",
    "\x00",
    "a\x00b",
    "\u3000",
    "\ufeff",
    "😀",
    "",
    "   ",
]


def test_raw_hostile_input_is_an_fts5_syntax_error():
    """The same table refuses these as raw MATCH strings, so the next test would catch a quoting mistake."""
    db = Fts("bigram", DOCS).db
    for raw in ['"', "x:y", "NEAR(", "(", "AND", "*"]:
        with pytest.raises(sqlite3.OperationalError):
            db.execute("SELECT rowid FROM t WHERE t MATCH ?", (raw,)).fetchall()


@pytest.mark.parametrize("tokenizer", TOKENIZERS)
def test_hostile_questions_never_make_a_syntax_error(tokenizer):
    fts = Fts(tokenizer, [*DOCS, "NEAR AND OR NOT x y body"])
    for q in HOSTILE:
        fts.search(q)  # raises sqlite3.OperationalError on bad syntax
        expr = fts_match([q])  # the raw string as one term, quotes and all
        if expr:
            fts.db.execute("SELECT rowid FROM t WHERE t MATCH ?", (expr,)).fetchall()


def test_hostile_terms_all_at_once():
    fts = Fts("bigram", DOCS)
    expr = fts_match([q for q in HOSTILE if q.strip()])
    fts.db.execute("SELECT rowid FROM t WHERE t MATCH ?", (expr,)).fetchall()


def test_fts_keywords_are_searched_as_words():
    fts = Fts("bigram", ["nothing here", "NEAR the NOT gate OR the AND gate"])
    assert fts.search("NEAR") == [1]
    assert fts.search("NOT") == [1]


def test_fts_match_quotes_escapes_dedupes_and_is_empty_for_nothing():
    assert fts_match(["年假", 'a"b', "年假", "", "  "]) == '"年假" OR "a""b"'
    assert fts_match([]) == ""
    assert fts_match(["a\x00b", "\x00"]) == '"ab"'
