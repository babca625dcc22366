"""ernie_ops.marketing.rules: counting as a person counts, the length and forbidden-word checks, parsing posts."""

from __future__ import annotations

import pytest

from ernie_ops.errors import ErnieOpsError
from ernie_ops.marketing.rules import (
    DEFAULT_FORBIDDEN_WORDS,
    NEAR_DUPLICATE,
    PostsFormatError,
    Rules,
    check,
    count_chars,
    fold,
    fold_with_spans,
    near_duplicate,
    parse_posts,
    similarity,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("新品上市", 4),
        ("新品，上市！", 6),
        ("abc 123!", 8),  # the space counts
        ("  ", 2),
        ("a\r\nb", 3),  # CRLF is one line break
        ("👨\u200d👩\u200d👧", 1),  # ZWJ family: 5 code points
        ("🇨🇳", 1),  # flag: two regional indicators
        ("👍🏽", 1),  # skin-tone modifier
        ("1\ufe0f\u20e3", 1),  # keycap
        ("e\u0301", 1),  # combining accent
        ("好物👍🏽推荐🇨🇳", 6),
        ("", 0),
    ],
)
def test_count_chars_counts_what_a_person_sees(text, expected):
    assert count_chars(text) == expected


def test_sixty_emoji_family_sequences_fit_sixty():
    post = "👨\u200d👩\u200d👧" * 60
    assert len(post) == 300
    assert check(post, Rules(forbidden_words=())) == []


def test_too_long_is_reported_with_its_count_and_the_post_is_untouched():
    post = "好" * 61
    problems = check(post, Rules())
    assert [(p.kind, p.count, p.limit) for p in problems] == [("too_long", 61, 60)]
    assert problems[0].flag == "too_long:61/60"
    assert post == "好" * 61
    assert check("好" * 60, Rules()) == []


@pytest.mark.parametrize("word", ["最佳", "第一", "国家级", "顶级", "极致", "首个", "唯一", "100%"])
def test_default_list_catches_the_absolute_claims(word):
    problems = check(f"本品{word}好用", Rules())
    assert [(p.kind, p.word, p.position, p.offset) for p in problems] == [("forbidden", word, 3, 2)]


def test_forbidden_position_is_counted_in_characters_not_code_points():
    post = "👨\u200d👩\u200d👧好物，最佳选择"
    (problem,) = check(post, Rules())
    assert problem.position == 5
    assert post[problem.offset : problem.offset + 2] == "最佳"
    assert problem.flag == "forbidden:最佳@5"


def test_each_occurrence_is_reported_and_overlaps_once_longest():
    problems = check("全网最低，第一，还是第一", Rules())
    assert [(p.word, p.position) for p in problems] == [("全网最低", 1), ("第一", 6), ("第一", 11)]


def test_latin_words_match_case_insensitively():
    (problem,) = check("销量 no.1 的好物", Rules())
    assert problem.word == "NO.1"


def test_neutral_zui_words_are_not_flagged_by_default_but_bare_zui_can_be_configured():
    assert "最" not in DEFAULT_FORBIDDEN_WORDS
    assert check("最近上新", Rules()) == []
    (problem,) = check("最近上新", Rules(forbidden_words=("最",)))
    assert problem.word == "最"


def test_length_and_word_problems_both_reported():
    problems = check("顶级" + "好" * 60, Rules())
    assert [p.kind for p in problems] == ["too_long", "forbidden"]


@pytest.mark.parametrize("bad", [{"max_chars": 0}, {"max_chars": "60"}, {"max_chars": True}, {"forbidden_words": ("",)}])
def test_bad_rules_are_refused(bad):
    with pytest.raises(ErnieOpsError):
        Rules(**bad)


def test_parse_posts_plain_and_fenced():
    assert parse_posts('{"posts": ["一", "二"]}', 2) == ["一", "二"]
    assert parse_posts('  ```json\n{"posts": ["一", "二"]}\n```\n', 2) == ["一", "二"]
    assert parse_posts('```\n{"posts": ["一"]}```', 1) == ["一"]
    assert parse_posts('```json{"posts": ["一"]}```', 1) == ["一"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "empty"),
        ("好物推荐", "not JSON"),
        ('Here: {"posts": ["一"]}', "not JSON"),  # prose around it is not tolerated
        ('{"posts": ["一"]} thanks', "not JSON"),
        ('```json\n{"posts": ["一"]}\n``` more', "not JSON"),
        ('["一"]', "not an object"),
        ('{"post": ["一"]}', 'no "posts"'),
        ('{"posts": "一"}', "not a list"),
        ('{"posts": [1]}', "not text"),
        ('{"posts": ["  "]}', "empty"),
        ('{"posts": ["一", "二"]}', "2 post(s), 1 were asked"),
    ],
)
def test_parse_posts_errors_say_what_is_wrong(text, needle):
    with pytest.raises(PostsFormatError) as e:
        parse_posts(text, 1)
    assert needle in str(e.value)


def test_words_starting_at_the_same_place_report_the_longest_once():
    problems = check("最佳之选", Rules(forbidden_words=("最", "最佳")))
    assert [(p.word, p.position) for p in problems] == [("最佳", 1)]


# --- folding: full-width, spaced and invisible forms are caught, reported as written ------------------------


@pytest.mark.parametrize(
    ("post", "word", "written"),
    [
        ("１００％纯棉", "100%", "１００％"),
        ("行业ＮＯ．１", "NO.1", "ＮＯ．１"),
        ("销量第 一", "第一", "第 一"),
        ("最\u3000佳之选", "最佳", "最\u3000佳"),  # the ideographic space
        ("第\u200b一", "第一", "第\u200b一"),  # a zero-width space
        ("绝\u00ad对好用", "绝对", "绝\u00ad对"),  # a soft hyphen
        ("排名第\n一", "第一", "第\n一"),  # across a line break: read as one word (module docstring)
        ("ｔｏｐ １好物", "TOP1", "ｔｏｐ １"),
    ],
)
def test_folded_forms_are_caught_and_reported_as_written(post, word, written):
    (problem,) = check(post, Rules())
    assert (problem.kind, problem.word, problem.written) == ("forbidden", word, written)
    assert post[problem.offset : problem.end] == written  # the span as written, for highlighting
    assert problem.position == count_chars(post[: problem.offset]) + 1


def test_a_folded_match_says_how_it_was_written():
    (problem,) = check("销量第 一", Rules())
    assert "'第一'" in problem.message and "written '第 一'" in problem.message and problem.flag == "forbidden:第一@3"
    (plain,) = check("销量第一", Rules())
    assert "written" not in plain.message


def test_the_position_after_an_emoji_and_a_full_width_word():
    post = "👍🏽好物ＮＯ．１，第 一"
    problems = check(post, Rules())
    assert [(p.word, p.position, p.written) for p in problems] == [("NO.1", 4, "ＮＯ．１"), ("第一", 9, "第 一")]


@pytest.mark.parametrize("post", ["TOP 10 好物", "No. 12 色号", "ＴＯＰ１０榜单", "1100%"])
def test_folding_does_not_join_a_number_into_a_listed_word(post):
    # folding removes the space: TOP 10 -> top10, which contains top1; a listed word ending in a digit must
    # not continue a number, nor one starting with a digit follow one
    assert check(post, Rules()) == []


def test_folding_finds_nothing_in_neutral_text():
    assert check("最　近上新，第二件半价，ＡＢＣ 款", Rules()) == []


def test_a_configured_full_width_or_spaced_word_is_folded_too():
    (problem,) = check("全网首发 no.1", Rules(forbidden_words=("ＮＯ．１",)))
    assert problem.word == "ＮＯ．１" and problem.written == "no.1"


def test_fold_keeps_the_spans_of_the_original():
    head, word = "Ａ 👨\u200d👩\u200d👧 ", "第\u3000一"
    folded = fold_with_spans(head + word)
    assert folded.text == fold(head + word) == "a👨👩👧第一"
    assert folded.original(len(folded.text) - 2, len(folded.text)) == (len(head), len(head + word))


# --- near-duplicates -------------------------------------------------------------------------------------------

# Measured (3-gram Jaccard on the folded text, punctuation and emoji left out), the pairs behind NEAR_DUPLICATE:
NEAR = [
    ("保温杯，陪你暖一整天☕", "保温杯，陪你暖一整天！", 1.0),  # the same words
    ("316不锈钢保温杯，12小时长效保温，早八通勤的好搭档", "早八通勤的好搭档，316不锈钢保温杯，12小时长效保温", 0.84),  # reordered
    ("316不锈钢保温杯，12小时长效保温，早八通勤的好搭档", "316不锈钢保温杯，12小时持久保温，早八通勤的好搭档", 0.70),  # a word swapped
    ("保温杯，陪你暖一整天", "保温杯，陪你暖一整天，冬天出门必备", 0.54),  # the first, and a tail
]
DISTINCT = [  # posts of one product from different angles share its name and facts, and still differ
    ("316不锈钢保温杯，12小时长效保温，早八通勤的好搭档", "冬天的早晨，一口热水暖到心里——316不锈钢保温杯陪你12小时", 0.23),
    ("保温杯，好用又保温", "保温杯，好看又耐用", 0.20),
    ("早八人的续命神器来了！316不锈钢保温杯，12小时热水不断 #保温杯# #通勤好物#",
     "冬天办公室太冷？一杯热水暖一下午，316不锈钢，12小时保温 #保温杯# #通勤好物#", 0.21),  # the same topics
    ("每天早上装满热水，到下班还是烫的，316不锈钢内胆很放心\n#保温杯 #通勤好物 #冬日好物",
     "他总说办公室冷，这只保温杯12小时保温，316不锈钢，他天天带着\n#保温杯 #通勤好物 #冬日好物", 0.22),  # the same tags
]  # fmt: skip


@pytest.mark.parametrize(("a", "b", "measured"), NEAR + DISTINCT)
def test_similarity_of_the_measured_pairs(a, b, measured):
    assert similarity(a, b) == pytest.approx(measured, abs=0.01)
    assert similarity(b, a) == similarity(a, b)


def test_the_threshold_lies_between_the_measured_near_duplicates_and_distinct_posts():
    assert max(m for *_, m in DISTINCT) < NEAR_DUPLICATE <= min(m for *_, m in NEAR)
    for a, b, _ in NEAR:
        assert near_duplicate(b, [a]) is not None
    for a, b, _ in DISTINCT:
        assert near_duplicate(b, [a]) is None


def test_similarity_folds_width_case_and_spaces():
    assert similarity("ＡＢＣ 保温杯 好用", "abc保温杯好用") == 1.0
    assert similarity("好", "好！") == 1.0 and similarity("好", "坏") == 0.0  # shorter than a shingle
    assert similarity("👍", "👍") == 1.0 and similarity("👍", "🎁") == 0.0  # nothing but symbols


def test_near_duplicate_names_the_most_similar_earlier_post():
    problem = near_duplicate("保温杯，陪你暖一整天", ["完全不同的一句话", None, "保温杯，陪你暖一整天吧", "保温杯，陪你暖一整天"])
    assert problem.kind == "duplicate" and problem.similar_to == 4 and problem.similarity == 1.0
    assert problem.flag == "duplicate_of:4~1.00"
    assert near_duplicate("保温杯", []) is None
