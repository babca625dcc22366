"""Text extraction for document Q&A (ernie_ops.docs.extract) and running it in a child process
(ernie_ops.docs.isolate): every format on generated files (tests/harness/doc_fixtures.py), both kinds of
Chinese PDF font, every bad-input reason, file names, and a child that crashes, hangs or runs out of memory."""

from __future__ import annotations

import io
import os
import random
import time
import unicodedata
import zipfile
from pathlib import Path

import pytest

from ernie_ops.docs import extract as extract_mod
from ernie_ops.docs.extract import Limits, as_document_error, check_name, decode_text, extract, normalize
from ernie_ops.docs.isolate import FAULT_ENV, extract_isolated, outcome
from ernie_ops.docs.model import DocumentError
from tests.harness import doc_fixtures as fx


def page_texts(pages: list[list[str]]) -> list[str]:
    return ["\n".join(lines) for lines in pages]


def refused(data: bytes, name: str, limits: Limits = Limits()) -> DocumentError:  # noqa: B008
    with pytest.raises(DocumentError) as info:
        extract(data, name, limits)
    error = info.value
    text = str(error)
    assert text.startswith(f"{name}: ") and "\n" not in text and "Traceback" not in text, text
    return error


# ------------------------------------------------------------------------------------------------- PDF


@pytest.mark.parametrize("font", ["ttf", "cid"])
def test_chinese_pdf_gives_the_exact_text_of_each_page(font):
    """(a) embedded TrueType subset, (b) STSong-Light without embedding (UniGB-UCS2-H on the reader's side);
    page 1 carries a mixed Chinese/English line, which must come back without spaces between CJK glyphs."""
    result = extract(fx.zh_pdf(font), f"手册-{font}.pdf")
    assert result.kind == "pdf" and result.pages == 2
    assert [s.page for s in result.sections] == [1, 2]
    assert [s.text for s in result.sections] == page_texts(fx.ZH_PAGES)


def test_a_pdf_drawn_glyph_by_glyph_comes_back_as_one_line_without_spurious_spaces():
    """pypdf's plain mode gives one character per line here; the layout re-read and the CJK space rule fix it."""
    result = extract(fx.zh_pdf_per_glyph(), "glyphs.pdf")
    assert [s.text for s in result.sections] == [fx.PER_GLYPH_LINE]


def test_english_pdf_pages():
    result = extract(fx.en_pdf(), "guide.pdf")
    assert [(s.page, s.text) for s in result.sections] == list(zip([1, 2], page_texts(fx.EN_PAGES), strict=True))


def test_pages_without_text_are_skipped_and_the_others_keep_their_numbers():
    data = fx.pdf_pages([["first page"], [], ["third page"]])
    result = extract(data, "gaps.pdf")
    assert result.pages == 3
    assert [(s.page, s.text) for s in result.sections] == [(1, "first page"), (3, "third page")]


def test_a_long_pdf_keeps_every_page_number():
    result = extract(fx.text_pdf(pages=50), "long.pdf")
    assert [s.page for s in result.sections] == list(range(1, 51))
    assert all(s.text.startswith(f"Page {s.page}.\n") for s in result.sections)


def test_password_protected_pdf_is_refused():
    error = refused(fx.encrypted_pdf(), "secret.pdf")
    assert error.reason == "encrypted"
    assert "password-protected; remove the password and upload it again" in str(error)


def test_pdf_encrypted_with_an_empty_user_password_is_read_like_any_viewer_would():
    """Decision: a viewer opens it without asking, so the user sees nothing to remove; it is indexed."""
    result = extract(fx.encrypted_pdf(user_password=""), "restricted.pdf")
    assert [s.text for s in result.sections] == page_texts(fx.EN_PAGES)


def test_scanned_pdf_without_a_text_layer_says_ocr_is_not_supported():
    error = refused(fx.scanned_pdf(), "scan.pdf")
    assert error.reason == "no_text"
    assert "no text found; OCR is not supported" in str(error)


def test_a_partly_scanned_pdf_names_the_pages_without_a_text_layer():
    data = fx.partly_scanned_pdf(pages=6, scanned=(2, 4, 5))
    for result in (extract(data, "mixed.pdf"), extract_isolated(data, "mixed.pdf")):  # the child's answer carries them too
        assert result.pages == 6 and result.empty_pages == (2, 4, 5)
        assert [s.page for s in result.sections] == [1, 3, 6] and "Page 3: the backup" in result.sections[1].text
    assert extract(fx.en_pdf(), "en.pdf").empty_pages == ()


def test_truncated_pdf_is_corrupt():
    error = refused(fx.truncated_pdf(), "half.pdf")
    assert str(error) == "half.pdf: is truncated or damaged (no PDF end-of-file marker); upload the complete file"


def test_pdf_with_a_damaged_body_is_corrupt_and_names_the_library_error():
    data = fx.zh_pdf()
    error = refused(data[: len(data) // 2] + data[-300:], "damaged.pdf")  # the end-of-file marker is there
    assert error.reason == "corrupt" and "PdfReadError" in str(error)


def test_too_many_pages():
    error = refused(fx.zh_pdf(), "two.pdf", Limits(max_pages=1))
    assert error.reason == "too_large" and "2 pages" in str(error) and "1-page limit" in str(error)


# ----------------------------------------------------------------------------------------- Markdown


def test_markdown_sections_follow_the_heading_path_and_drop_the_markup():
    result = extract(fx.markdown_zh(), "guide.md")
    assert result.kind == "markdown" and result.encoding == "utf-8"
    assert [(s.heading, s.text) for s in result.sections] == fx.MARKDOWN_ZH_SECTIONS
    assert all(s.page is None for s in result.sections)


def test_markdown_text_before_the_first_heading_and_skipped_levels():
    text = "前言，没有标题。\n\n# 一\n\n### 三级\n\n正文，跨行\n续写。\n\n## 二级\n\n![架构图](a.png)\n\n<div>raw html</div>\n"
    result = extract(text.encode(), "notes.markdown")
    assert [(s.heading, s.text) for s in result.sections] == [
        ((), "前言，没有标题。"),
        (("一", "三级"), "三级\n正文，跨行续写。"),  # a soft line break between CJK characters joins them
        (("一", "二级"), "二级\n架构图"),
    ]


def test_a_title_with_a_one_line_byline_opens_its_first_sub_section():
    """A near-empty passage (title + byline) would win BM25 for any short question naming the title."""
    text = "# VPN 配置指南（Windows）\n\n维护：IT 服务台\n\n## 概述\n\n网关地址为 vpn.example.com。\n\n## 安装\n\n双击安装包。\n"
    result = extract(text.encode(), "vpn.md")
    assert [(s.heading, s.text) for s in result.sections] == [
        (("VPN 配置指南（Windows）", "概述"), "VPN 配置指南（Windows）\n维护：IT 服务台\n概述\n网关地址为 vpn.example.com。"),
        (("VPN 配置指南（Windows）", "安装"), "安装\n双击安装包。"),
    ]


def test_only_a_short_one_line_section_followed_by_its_own_sub_section_is_a_preamble():
    long_line = "x" * extract_mod.PREAMBLE_CHARS
    cases = {
        "# A\n\nshort\n\n# B\n\nbody\n": [(("A",), "A\nshort"), (("B",), "B\nbody")],  # a sibling follows, not a child
        "# A\n\nline one\n\nline two\n\n## B\n\nbody\n": [(("A",), "A\nline one\nline two"), (("A", "B"), "B\nbody")],
        f"# A\n\n{long_line}\n\n## B\n\nbody\n": [(("A",), f"A\n{long_line}"), (("A", "B"), "B\nbody")],
        # carried through a heading with no text of its own, to the first sub-section that has text
        "# A\n\nby me\n\n## B\n\n### C\n\nbody\n": [(("A", "B", "C"), "A\nby me\nC\nbody")],
        # its sub-section has no text: the preamble is kept as it is, never lost
        "# A\n\nby me\n\n## B\n\n# D\n\nbody\n": [(("A", "B"), "A\nby me\nB"), (("D",), "D\nbody")],
        "# A\n\nby me\n\n## B\n": [(("A", "B"), "A\nby me\nB")],
    }
    for text, expected in cases.items():
        assert [(s.heading, s.text) for s in extract(text.encode(), "a.md").sections] == expected, text


def test_markdown_soft_break_in_english_becomes_a_space():
    result = extract(b"# Intro\n\nThe service\nrestarts nightly.\n", "a.md")
    assert result.sections[0].text == "Intro\nThe service restarts nightly."


# --------------------------------------------------------------------------------------------- DOCX


def test_docx_heading_styles_give_the_path_and_tables_are_included():
    result = extract(fx.docx_file(), "manual.docx")
    assert result.kind == "docx"
    assert [(s.heading, s.text) for s in result.sections] == fx.DOCX_SECTIONS


def test_docx_chinese_heading_style_names_count_as_headings():
    """WPS and some localised templates name the styles 标题 1, 标题 2."""
    import docx
    from docx.enum.style import WD_STYLE_TYPE

    document = docx.Document()
    for style in ("标题 1", "标题 2"):
        document.styles.add_style(style, WD_STYLE_TYPE.PARAGRAPH)
    document.add_paragraph("部署", style="标题 1")
    document.add_paragraph("升级", style="标题 2")
    document.add_paragraph("先停止服务。")
    out = io.BytesIO()
    document.save(out)
    result = extract(out.getvalue(), "wps.docx")
    assert [(s.heading, s.text) for s in result.sections] == [(("部署", "升级"), "升级\n先停止服务。")]


def test_zip_bomb_docx_is_refused_before_it_is_parsed(monkeypatch):
    data = fx.zip_bomb_docx()
    assert len(data) < 200_000
    import docx

    opened = []
    monkeypatch.setattr(docx, "Document", lambda *a, **k: opened.append(a))  # records a parse, if one happens
    error = refused(data, "bomb.docx")
    assert error.reason == "bomb" and "zip bomb" in str(error) and "100:1" in str(error)
    assert opened == []


def test_docx_unpacking_over_the_total_limit_is_a_bomb():
    error = refused(fx.docx_file(), "big.docx", Limits(max_unzipped_bytes=10_000))
    assert error.reason == "bomb" and "would unpack to" in str(error)


def test_docx_with_too_many_zip_members_is_a_bomb():
    error = refused(fx.docx_file(), "parts.docx", Limits(max_zip_members=3))
    assert error.reason == "bomb" and "ZIP parts" in str(error)


def test_truncated_docx_is_corrupt():
    data = fx.docx_file()
    error = refused(data[: len(data) // 2], "half.docx")
    assert error.reason == "corrupt"


def _zip(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, body in members.items():
            z.writestr(name, body)
    return out.getvalue()


def test_docx_missing_its_package_parts_is_corrupt():
    error = refused(_zip({"word/document.xml": b"<w:document/>"}), "parts.docx")
    assert error.reason == "corrupt" and "damaged" in str(error)


def test_docx_with_malformed_xml_is_corrupt():
    with zipfile.ZipFile(io.BytesIO(fx.docx_file())) as src:
        members = {i.filename: src.read(i) for i in src.infolist()}
    members["word/document.xml"] = members["word/document.xml"][:200]  # cut inside the XML
    error = refused(_zip(members), "broken.docx")
    assert error.reason == "corrupt" and "XMLSyntaxError" in str(error)


# --------------------------------------------------------------------------------------------- text


def test_plain_text_utf8_with_and_without_bom_and_utf16():
    body = "年假每年五天。\nVPN 配置见附录。"
    for data, encoding in [(body.encode(), "utf-8"), (b"\xef\xbb\xbf" + body.encode(), "utf-8-sig"), (body.encode("utf-16"), "utf-16")]:
        result = extract(data, "a.txt")
        assert (result.kind, result.encoding, [s.text for s in result.sections]) == ("text", encoding, [body])


def test_gb18030_text_is_detected_and_said():
    result = extract(fx.gb18030_text(), "gbk.txt")
    assert result.encoding == "gb18030"
    assert result.sections[0].text == fx.GB18030_TEXT.strip()


def test_binary_without_nul_bytes_is_not_taken_for_gb18030():
    rng = random.Random(0)
    trail = [*range(0x40, 0x7F), *range(0x80, 0xFF)]
    noise = b"".join(bytes([rng.randrange(0x81, 0xFF), rng.choice(trail)]) for _ in range(2048))
    assert noise.decode("gb18030")  # the trap: random valid GBK byte pairs decode strictly
    assert decode_text(noise) is None
    assert refused(noise, "noise.txt").reason == "wrong_type"


def test_gb18030_text_with_symbols_greek_and_circled_numbers_is_still_text():
    text = "①检查端口 ②重启服务 ■注意：α、β 参数。Ⅰ类故障→联系值班。"
    assert decode_text(text.encode("gb18030")) == (text, "gb18030")


def test_mostly_whitespace_with_real_text_is_indexed():
    data = fx.whitespace_text(with_sentence=True)
    assert len(fx.WHITESPACE_SENTENCE.encode()) < 0.01 * len(data)
    result = extract(data, "sparse.txt")
    assert [s.text for s in result.sections] == [fx.WHITESPACE_SENTENCE]


def test_whitespace_with_almost_no_text_is_no_text():
    error = refused(fx.whitespace_text(with_sentence=False), "blank.txt")
    assert error.reason == "no_text" and "only whitespace" in str(error)


def test_normalize_keeps_chinese_punctuation_and_folds_the_rest():
    assert normalize("你好，世界！真的？是；对：（好）……") == "你好，世界！真的？是；对：（好）……"
    assert normalize("ＶＰＮ１２３　配置") == "VPN123 配置"  # full-width letters/digits, ideographic space
    assert normalize("\u2f00\u2f08 ﬁle") == "一人 file"  # Kangxi radicals (some PDF fonts), a ligature
    assert normalize("部 署\t 前  请\u200b检查。 VPN  配置 ") == "部署前请检查。 VPN 配置"  # CJK-Latin spaces stay
    assert normalize("a\r\n\r\n\r\nb\x00c\x0cd") == "a\nbc\nd"
    assert normalize("한국어 단어") == "한국어 단어"  # Hangul keeps its word spaces
    assert normalize("坏\udc80字") == "坏字"  # a lone surrogate (broken ToUnicode map) would break UTF-8 output


# ------------------------------------------------------------------------------------ types and size


def test_empty_file():
    assert refused(b"", "empty.pdf").reason == "empty"


def test_file_over_the_size_limit_names_the_limit():
    error = refused(fx.en_pdf(), "big.pdf", Limits(max_bytes=1024))
    assert error.reason == "too_large" and str(error) == "big.pdf: is 2.0 KB, over the 1.0 KB limit; split it or upload a smaller file"


def test_size_limit_message_in_megabytes():
    error = refused(b"x" * (2 * 1024 * 1024 + 1), "big.txt", Limits(max_bytes=2 * 1024 * 1024))
    assert "over the 2 MB limit" in str(error)


@pytest.mark.parametrize(
    ("data", "name", "looks"),
    [
        (fx.docx_file(), "report.pdf", "DOCX"),
        (fx.xlsx_like(), "report.pdf", "Excel"),
        (fx.zh_pdf(), "report.docx", "a PDF"),
        ("只是文本。".encode(), "report.pdf", "plain text"),
        (fx.PNG_1PX, "photo.txt", "PNG image"),
        (bytes(range(256)) * 8, "notes.txt", "binary data"),
        (fx.zh_pdf(), "notes.md", "a PDF"),
    ],
)
def test_content_that_does_not_match_the_extension_is_wrong_type(data, name, looks):
    error = refused(data, name)
    assert error.reason == "wrong_type" and looks in str(error) and "rename it or upload the real" in str(error)


@pytest.mark.parametrize(
    ("data", "name"), [(fx.PNG_1PX, "photo.png"), (fx.xlsx_like(), "sheet.xlsx"), (bytes(range(256)) * 8, "blob.bin"), (b"plain", "README")]
)
def test_unsupported_types_name_the_accepted_ones(data, name):
    error = refused(data, name)
    assert error.reason == "unsupported" and ".pdf .md .markdown .txt .docx" in str(error)


def test_extension_case_does_not_matter():
    assert extract(fx.en_pdf(), "GUIDE.PDF").kind == "pdf"


# ------------------------------------------------------------------------------ library exceptions


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (MemoryError(), "ran out of memory"),
        (RecursionError("maximum recursion depth exceeded"), "nested too deeply"),
        (zipfile.BadZipFile("File is not a zip file"), "BadZipFile"),
        (KeyError("word/document.xml"), "KeyError"),
        (RuntimeError("boom"), "unexpected RuntimeError: boom"),
    ],
)
def test_every_exception_becomes_a_corrupt_document_error(exc, words):
    error = as_document_error(exc, "x.pdf")
    assert error.reason == "corrupt" and words in str(error) and str(error).startswith("x.pdf: ")


def test_an_unexpected_library_exception_inside_extract_is_reported_not_raised(monkeypatch):
    """Stub: pypdf raising an arbitrary exception type cannot be produced on demand with a real file."""

    def explode(*args, **kwargs):
        raise RuntimeError("internal pypdf state")

    import pypdf

    monkeypatch.setattr(pypdf, "PdfReader", explode)
    error = refused(fx.en_pdf(), "x.pdf")
    assert error.reason == "corrupt" and "unexpected RuntimeError: internal pypdf state" in str(error)


def test_the_accepted_suffixes_are_exported_for_directory_scans():
    assert extract_mod.SUFFIXES == (".pdf", ".md", ".markdown", ".txt", ".docx")


# --------------------------------------------------------------------------------------------- names


@pytest.mark.parametrize("raw", ["报告.pdf", "v1..2.pdf", "my notes (final).md", b"\xe6\x8a\xa5\xe5\x91\x8a.pdf"])
def test_ordinary_names_are_accepted(raw):
    assert check_name(raw) == (raw.decode() if isinstance(raw, bytes) else raw)


def test_decomposed_names_are_composed():
    assert check_name(unicodedata.normalize("NFD", "café.md")) == "café.md"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("../etc/passwd", "../etc/passwd"),
        ("dir/report.pdf", "dir/report.pdf"),
        ("C:\\fakepath\\report.pdf", "C:\\fakepath\\report.pdf"),
        ("a\x00b.pdf", "a\\x00b.pdf"),
        ("a\nb.pdf", "a\\x0ab.pdf"),
        ("evil\u202efdp.exe", "evil\\u202efdp.exe"),
        (b"r\xe9sum\xe9.pdf", "r\\xe9sum\\xe9.pdf"),  # Latin-1 bytes, not UTF-8
        (os.fsdecode(b"r\xe9sum\xe9.pdf"), "r\\xe9sum\\xe9.pdf"),  # the same from os.listdir (surrogateescape)
        ("..", ".."),
        (".", "."),
        ("   ", "   "),
    ],
)
def test_dangerous_names_are_refused_and_shown_escaped(raw, shown):
    with pytest.raises(DocumentError) as info:
        check_name(raw)
    assert info.value.reason == "name" and info.value.name == shown
    text = str(info.value)
    assert text.isprintable() and "\n" not in text


def test_a_name_over_255_bytes_is_refused():
    with pytest.raises(DocumentError) as info:
        check_name("长" * 90 + ".pdf")  # 274 bytes in UTF-8
    assert info.value.reason == "name" and "255 bytes" in str(info.value)


# ----------------------------------------------------------------------------------------- isolation


def test_isolated_extraction_gives_the_same_result():
    data = fx.zh_pdf("cid")
    assert extract_isolated(data, "zh.pdf", timeout=30) == extract(data, "zh.pdf")


def test_isolated_extraction_returns_the_childs_document_error_unchanged():
    with pytest.raises(DocumentError) as here:
        extract(fx.encrypted_pdf(), "secret.pdf")
    with pytest.raises(DocumentError) as there:
        extract_isolated(fx.encrypted_pdf(), "secret.pdf", timeout=30)
    assert (there.value.reason, str(there.value)) == (here.value.reason, str(here.value))


def test_isolated_extraction_of_a_file_with_an_unchecked_non_utf8_name_reports_its_own_error():
    """The name travels to the child and back in JSON; a surrogate-escaped byte must not crash the answer."""
    name = os.fsdecode(b"r\xe9sum\xe9.txt")
    with pytest.raises(DocumentError) as info:
        extract_isolated(b"", name, timeout=30)
    assert info.value.reason == "empty" and info.value.name == name
    result = extract_isolated(b"caf\xc3\xa9 menu, five items", name, timeout=30)
    assert result.sections[0].text == "café menu, five items"


def test_isolated_limits_reach_the_child():
    with pytest.raises(DocumentError) as info:
        extract_isolated(fx.zh_pdf(), "two.pdf", Limits(max_pages=1), timeout=30)
    assert info.value.reason == "too_large"


def _children_running_isolate() -> list[int]:
    """PIDs of this process's children that run ernie_ops.docs.isolate (read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and b"ernie_ops.docs.isolate" in cmdline:
            found.append(int(entry.name))
    return found


def test_a_segfault_in_the_child_is_reported_and_the_parent_carries_on(monkeypatch):
    """Stub: ERNIE_OPS_DOCS_FAULT=segv makes the child SIGSEGV itself; no real file makes pypdf segfault on demand."""
    monkeypatch.setenv(FAULT_ENV, "segv")
    with pytest.raises(DocumentError) as info:
        extract_isolated(fx.en_pdf(), "crash.pdf", timeout=30)
    assert info.value.reason == "crashed"
    assert str(info.value) == "crash.pdf: extraction stopped (killed by signal 11, SIGSEGV); the file was not indexed"
    monkeypatch.delenv(FAULT_ENV)
    assert [s.text for s in extract_isolated(fx.en_pdf(), "next.pdf", timeout=30).sections] == page_texts(fx.EN_PAGES)


def test_a_hanging_child_is_killed_at_the_timeout(monkeypatch):
    """Stub: ERNIE_OPS_DOCS_FAULT=hang makes the child sleep; a real pathological file is not at hand."""
    monkeypatch.setenv(FAULT_ENV, "hang")
    started = time.monotonic()
    with pytest.raises(DocumentError) as info:
        extract_isolated(fx.en_pdf(), "slow.pdf", timeout=1.5)
    assert info.value.reason == "timeout" and "after 1.5 seconds" in str(info.value)
    assert time.monotonic() - started < 10
    assert _children_running_isolate() == []  # killed and reaped


def test_a_child_that_exhausts_its_memory_limit_is_reported(monkeypatch):
    """Stub trigger (ERNIE_OPS_DOCS_FAULT=oom): the child allocates for real until RLIMIT_AS (memory_mb) stops it."""
    monkeypatch.setenv(FAULT_ENV, "oom")
    with pytest.raises(DocumentError) as info:
        extract_isolated(fx.en_pdf(), "huge.pdf", timeout=30, memory_mb=256)
    assert info.value.reason == "crashed" and "out of memory at the 256 MB limit" in str(info.value)


def test_a_child_answering_garbage_is_crashed(monkeypatch):
    """Stub: ERNIE_OPS_DOCS_FAULT=garbage makes the child print non-JSON and exit 0."""
    monkeypatch.setenv(FAULT_ENV, "garbage")
    with pytest.raises(DocumentError) as info:
        extract_isolated(fx.en_pdf(), "odd.pdf", timeout=30)
    assert info.value.reason == "crashed" and "without an answer" in str(info.value)


def test_the_fault_switch_is_read_by_the_child_only(monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "segv")
    assert extract(fx.en_pdf(), "in-process.pdf").kind == "pdf"  # still alive: the parent ignores it


def test_outcome_of_a_child_that_died_with_a_message_on_stderr():
    with pytest.raises(DocumentError) as info:
        outcome("x.pdf", 1, b"", b"Traceback...\nMemoryError\n", 512)
    assert info.value.reason == "crashed" and "status 1" in str(info.value) and "MemoryError" in str(info.value)
