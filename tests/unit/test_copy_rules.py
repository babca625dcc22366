"""ernie_ops.copy.rules: counting as a person counts, the length and forbidden-word checks, parsing posts."""

from __future__ import annotations

import pytest

from ernie_ops.copy.rules import DEFAULT_FORBIDDEN_WORDS, PostsFormatError, Rules, check, count_chars, parse_posts
from ernie_ops.errors import ErnieOpsError


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
