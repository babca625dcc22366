"""Document fixtures for the document Q&A tests (unit, integration, browser): each function returns the bytes
of one file, generated here (no downloads), deterministic and fast (each built once per process with
functools.cache: bytes are immutable); the texts they carry are constants so a test can assert exactly what
extraction must give back.

Chinese PDFs come in the two font kinds real files use:
- "ttf": an embedded TrueType subset of WenQuanYi Micro Hei (the reader maps glyphs back via the embedded
  ToUnicode CMap);
- "cid": reportlab's CID font STSong-Light, not embedded, encoded with the UniGB-UCS2-H CMap (the reader needs
  that CMap on its side, as Acrobat's Asian font packs provide).
`zh_pdf_per_glyph` draws every character as its own text object, as some generators do, which makes pypdf's
plain extraction put one character per line.

Run as a script to write every fixture into a directory: `python -m tests.harness.doc_fixtures DIR`.
reportlab and python-docx are test dependencies only.
"""

from __future__ import annotations

import functools
import io
import sys
import zipfile
from pathlib import Path

CJK_TTF = "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc"

# one entry per page; each page a list of lines; extraction must give "\n".join(lines) per page
ZH_PAGES: list[list[str]] = [
    [
        "部署指南：安装前请检查显卡驱动版本。",
        "升级步骤：先停止服务，再替换模型文件！",
        "VPN 配置说明：连接公司网络后访问 ernie-ops 控制台。",
    ],
    [
        "年假申请需提前三天提交；请假超过五天需经理批准？",
        "日志保存在 /var/log/ernie 目录（保留三十天）。",
        "如有问题，请联系运维值班电话 8000。",
    ],
]
EN_PAGES: list[list[str]] = [
    ["Deployment guide: check the GPU driver version before installing.", "Upgrade: stop the service, then replace the model files."],
    ["Annual leave must be requested three days ahead.", "Logs are kept under /var/log/ernie for thirty days."],
]
PER_GLYPH_LINE = "部署前请检查显卡驱动版本。VPN 配置"
ENCRYPTED_PASSWORD = "secret"

MARKDOWN_ZH = """# 部署

安装前请确认 **Python 3.11** 已就绪，详见[官方文档](https://example.com/docs)。

## 升级

升级步骤：先停止服务，再替换模型文件。

1. 停止 `ernie-chat` 服务
2. 替换权重

```bash
systemctl stop ernie-chat
```

### 回滚

回滚时恢复备份目录。

## 配置

| 参数 | 默认值 |
| --- | --- |
| port | 8000 |
| 超时 | 60 秒 |

# FAQ

- VPN 配置：先连接公司网络。
- 年假：每年五天。
"""
# the sections extract() must give for MARKDOWN_ZH: (heading path, text)
MARKDOWN_ZH_SECTIONS: list[tuple[tuple[str, ...], str]] = [
    # 部署's one short line is a preamble (extract.PREAMBLE_CHARS): it opens its first sub-section's text
    (
        ("部署", "升级"),
        "部署\n安装前请确认 Python 3.11 已就绪，详见官方文档。\n"
        "升级\n升级步骤：先停止服务，再替换模型文件。\n停止 ernie-chat 服务\n替换权重\nsystemctl stop ernie-chat",
    ),
    (("部署", "升级", "回滚"), "回滚\n回滚时恢复备份目录。"),
    (("部署", "配置"), "配置\n参数 | 默认值\nport | 8000\n超时 | 60 秒"),
    (("FAQ",), "FAQ\nVPN 配置：先连接公司网络。\n年假：每年五天。"),
]

DOCX_BLOCKS: list[tuple[str, str]] = [  # (style, text) in document order; "table" rows follow
    ("Normal", "本手册介绍 ernie-ops 的日常运维。"),
    ("Heading 1", "运维"),
    ("Normal", "每天检查服务状态。"),
    ("Heading 2", "备份"),
    ("Normal", "备份在每天凌晨两点执行。"),
    ("Heading 1", "Contacts"),
    ("Normal", "Call the on-duty engineer."),
]
DOCX_TABLE: list[list[str]] = [["姓名", "电话"], ["张三", "8001"], ["Li Si", "8002"]]  # placed under "Contacts"
DOCX_SECTIONS: list[tuple[tuple[str, ...], str]] = [
    ((), "本手册介绍 ernie-ops 的日常运维。"),
    (("运维", "备份"), "运维\n每天检查服务状态。\n备份\n备份在每天凌晨两点执行。"),  # a preamble opens its sub-section
    (("Contacts",), "Contacts\nCall the on-duty engineer.\n姓名 | 电话\n张三 | 8001\nLi Si | 8002"),
]

WHITESPACE_SENTENCE = "年假每年五天，需提前申请。"
GB18030_TEXT = "年假申请需提前三天提交。\n运维值班电话：8000。\n"


def _canvas(buf: io.BytesIO):
    from reportlab.pdfgen import canvas

    return canvas.Canvas(buf, invariant=1)  # invariant: fixed dates and IDs, so the bytes are reproducible


def _font(kind: str) -> str:
    from reportlab.pdfbase import pdfmetrics

    if kind == "ttf":
        from reportlab.pdfbase.ttfonts import TTFont

        if "WQY" not in pdfmetrics.getRegisteredFontNames():
            pdfmetrics.registerFont(TTFont("WQY", CJK_TTF, subfontIndex=0))
        return "WQY"
    if kind == "cid":
        from reportlab.pdfbase.cidfonts import UnicodeCIDFont

        if "STSong-Light" not in pdfmetrics.getRegisteredFontNames():
            pdfmetrics.registerFont(UnicodeCIDFont("STSong-Light"))
        return "STSong-Light"
    if kind == "helvetica":
        return "Helvetica"
    raise ValueError(f"unknown font kind {kind!r}")


def pdf_pages(pages: list[list[str]], font: str = "helvetica") -> bytes:
    """A text PDF: one page per entry, each line drawn as one string."""
    buf = io.BytesIO()
    c = _canvas(buf)
    name = _font(font)
    for lines in pages:
        c.setFont(name, 12)
        for i, line in enumerate(lines):
            c.drawString(50, 800 - 20 * i, line)
        c.showPage()
    c.save()
    return buf.getvalue()


@functools.cache
def zh_pdf(font: str = "ttf") -> bytes:
    """ZH_PAGES in a Chinese font: "ttf" (embedded TrueType subset) or "cid" (STSong-Light, not embedded)."""
    return pdf_pages(ZH_PAGES, font)


@functools.cache
def en_pdf() -> bytes:
    return pdf_pages(EN_PAGES)


@functools.cache
def text_pdf(pages: int = 50, lines: int = 40) -> bytes:
    """A long English text PDF (throughput): page n's first line is 'Page n.'."""
    body = [f"Page {n}." for n in range(1, pages + 1)]
    filler = "The service keeps its logs for thirty days and rotates them every night at two."
    return pdf_pages([[first] + [f"{filler} Line {i}." for i in range(1, lines)] for first in body])


@functools.cache
def zh_pdf_per_glyph(font: str = "ttf") -> bytes:
    """One page whose PER_GLYPH_LINE is drawn character by character (one text object per glyph, 1 pt apart)."""
    from reportlab.pdfbase import pdfmetrics

    buf = io.BytesIO()
    c = _canvas(buf)
    name = _font(font)
    c.setFont(name, 12)
    x = 50.0
    for ch in PER_GLYPH_LINE:
        c.drawString(x, 800, ch)
        x += pdfmetrics.stringWidth(ch, name, 12) + 1
    c.showPage()
    c.save()
    return buf.getvalue()


@functools.cache
def encrypted_pdf(user_password: str = ENCRYPTED_PASSWORD) -> bytes:
    """EN_PAGES encrypted with AES-256 (pypdf's writer.encrypt). user_password="" gives a file any viewer opens
    without asking (only the owner password restricts editing). Not byte-reproducible: the IV is random."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(en_pdf())))
    writer.encrypt(user_password=user_password, owner_password="owner-" + ENCRYPTED_PASSWORD, algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


@functools.cache
def scanned_pdf(pages: int = 2) -> bytes:
    """Pages with only drawings (grey bars where text lines would be), no text layer: a scan as far as a text
    extractor can tell."""
    buf = io.BytesIO()
    c = _canvas(buf)
    for _ in range(pages):
        c.setFillGray(0.3)
        for i in range(30):
            c.rect(50, 780 - 22 * i, 300 + (i * 37) % 200, 10, stroke=0, fill=1)
        c.showPage()
    c.save()
    return buf.getvalue()


@functools.cache
def partly_scanned_pdf(pages: int = 6, scanned: tuple[int, ...] = (2, 4, 5)) -> bytes:
    """`pages` pages: the 1-based `scanned` ones drawn like scanned_pdf (grey bars, no text layer), the others text
    ('Page n: the backup runs nightly at 02:00.'), as a scanner's PDF with a few pages OCR'd or typed in."""
    buf = io.BytesIO()
    c = _canvas(buf)
    for n in range(1, pages + 1):
        if n in scanned:
            c.setFillGray(0.3)
            for i in range(30):
                c.rect(50, 780 - 22 * i, 300 + (i * 37) % 200, 10, stroke=0, fill=1)
        else:
            c.setFont("Helvetica", 12)
            c.drawString(50, 800, f"Page {n}: the backup runs nightly at 02:00 and is kept for 30 days.")
        c.showPage()
    c.save()
    return buf.getvalue()


def truncated_pdf() -> bytes:
    """zh_pdf cut in half (as an interrupted upload leaves it)."""
    data = zh_pdf("ttf")
    return data[: len(data) // 2]


def padded_pdf(megabytes: float, line: str) -> bytes:
    """A one-page text PDF of at least `megabytes` MB: `line` as its text, then a noise image (incompressible,
    seeded: the same bytes every run) that makes the size and that a text extractor skips at once."""
    import random

    from PIL import Image
    from reportlab.lib.utils import ImageReader

    target = int(megabytes * 1024 * 1024)
    side = int((target / 1.2) ** 0.5) + 1  # reportlab writes image data ASCII85-encoded (5 bytes per 4)
    noise = Image.frombytes("L", (side, side), random.Random(megabytes).randbytes(side * side))
    buf = io.BytesIO()
    c = _canvas(buf)
    c.setFont(_font("ttf"), 12)
    c.drawString(50, 800, line)
    c.drawImage(ImageReader(noise), 50, 300, width=400, height=400)
    c.showPage()
    c.save()
    data = buf.getvalue()
    assert len(data) >= target, (len(data), target)
    return data


def markdown_zh() -> bytes:
    return MARKDOWN_ZH.encode()


@functools.cache
def docx_file() -> bytes:
    """DOCX_BLOCKS as paragraphs (Heading n styles) and DOCX_TABLE at the end."""
    import docx

    document = docx.Document()
    for style, text in DOCX_BLOCKS:
        document.add_paragraph(text, style=style)
    table = document.add_table(rows=len(DOCX_TABLE), cols=len(DOCX_TABLE[0]))
    for r, row in enumerate(DOCX_TABLE):
        for c, text in enumerate(row):
            table.cell(r, c).text = text
    out = io.BytesIO()
    document.save(out)
    return _zip_fixed_time(out.getvalue())


def _zip_fixed_time(data: bytes) -> bytes:
    """Rewrite a zip with fixed member timestamps (python-docx stamps the current time), so the bytes repeat."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            fixed = zipfile.ZipInfo(info.filename, date_time=(2024, 1, 1, 0, 0, 0))
            fixed.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(fixed, src.read(info))
    return out.getvalue()


@functools.cache
def zip_bomb_docx(unzipped_mb: int = 32) -> bytes:
    """A valid DOCX whose word/document.xml is padded with `unzipped_mb` MB of spaces: ~70 KB on disk, a
    1000:1 ratio; a reader that does not check member sizes first parses all of it."""
    head = (
        b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
        b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>'
    )
    tail = b"<w:p><w:r><w:t>bomb</w:t></w:r></w:p></w:body></w:document>"
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(docx_file())) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            fixed = zipfile.ZipInfo(info.filename, date_time=(2024, 1, 1, 0, 0, 0))
            fixed.compress_type = zipfile.ZIP_DEFLATED
            if info.filename != "word/document.xml":
                dst.writestr(fixed, src.read(info))
                continue
            with dst.open(fixed, "w", force_zip64=True) as member:
                member.write(head)
                block = b" " * (1 << 20)
                for _ in range(unzipped_mb):
                    member.write(block)
                member.write(tail)
    return out.getvalue()


@functools.cache
def xlsx_like() -> bytes:
    """A zip that looks like an Excel workbook (xl/workbook.xml): an unsupported type."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr(zipfile.ZipInfo("[Content_Types].xml", (2024, 1, 1, 0, 0, 0)), "<Types/>")
        z.writestr(zipfile.ZipInfo("xl/workbook.xml", (2024, 1, 1, 0, 0, 0)), "<workbook/>")
    return out.getvalue()


PNG_1PX = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)


@functools.cache
def whitespace_text(with_sentence: bool = True, size: int = 200_000) -> bytes:
    """~99% whitespace (spaces, tabs, newlines, ideographic spaces); with one real sentence in the middle or
    only two stray characters."""
    pad = ("  \t \u3000 \n" * (size // 16)).encode()
    middle = WHITESPACE_SENTENCE.encode() if with_sentence else b"x ."
    return pad + middle + pad


def gb18030_text() -> bytes:
    return GB18030_TEXT.encode("gb18030")


# file name -> bytes: every fixture, as the integration and browser tests upload them
def all_fixtures() -> dict[str, bytes]:
    return {
        "zh-ttf.pdf": zh_pdf("ttf"),
        "zh-cid.pdf": zh_pdf("cid"),
        "zh-per-glyph.pdf": zh_pdf_per_glyph(),
        "en.pdf": en_pdf(),
        "encrypted.pdf": encrypted_pdf(),
        "scanned.pdf": scanned_pdf(),
        "truncated.pdf": truncated_pdf(),
        "guide.md": markdown_zh(),
        "manual.docx": docx_file(),
        "bomb.docx": zip_bomb_docx(),
        "report.pdf": docx_file(),  # a DOCX renamed to .pdf
        "empty.txt": b"",
        "whitespace.txt": whitespace_text(),
        "gbk.txt": gb18030_text(),
    }


def write_all(directory: str | Path) -> dict[str, Path]:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, data in all_fixtures().items():
        paths[name] = directory / name
        paths[name].write_bytes(data)
    return paths


if __name__ == "__main__":
    for path in write_all(sys.argv[1]).values():
        print(path)
