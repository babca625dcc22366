"""Whether a sentence agrees with the passage it resembles: numbers, dates, amounts and negation, Chinese and English."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ernie_ops.docs.agree import Date, Quantity, agrees, contradicting_clause, facts, unsupported_facts
from ernie_ops.docs.chunk import split_sentences
from ernie_ops.docs.tokens import TOKENIZERS
from tests.harness.dates import day

CJK_AWARE = [t for t in TOKENIZERS if t != "whitespace"]

LEAVE = (
    "员工入职满一年后享有5天带薪年假，满十年后享有10天。年假需提前两周在OA系统中申请，经直属主管批准后生效。未休年假可顺延至次年3月31日。"
)
VPN = (
    "VPN 配置：首次使用公司VPN前，请在IT门户下载客户端，使用工号和域密码登录。"
    "服务器地址为 vpn.example.com，端口 443。如遇连接失败，请联系IT服务台分机8000。"
)
RULES = "员工不得使用个人邮箱发送客户资料。试用期员工不享有年假。"
EXPENSES = (
    "Expense reports must be submitted within 30 days of the purchase. Receipts over 100 USD need a scanned copy "
    "attached. Reports are approved by the finance team every Friday."
)
UPGRADE = (
    "To upgrade the inference server, stop the vllm service with systemctl stop vllm, replace the model directory, "
    "then start the service again. The health endpoint /health returns 200 when the model is loaded."
)

# (sentence, passage): paraphrases a small model writes, numbers written another way; each keeps its marker.
AGREEING = [
    ("工作满一年的员工每年有5天带薪年假。", LEAVE),
    ("员工入职满一年后享有五天带薪年假。", LEAVE),  # 5天 / 五天
    ("满十年的员工有十天年假。", LEAVE),
    ("年假要在OA系统里提前两周申请，主管批准后才生效。", LEAVE),
    ("年假要提前14天申请。", LEAVE),  # 两周 / 14天
    ("入职满12个月后有5天年假。", LEAVE),  # 一年 / 12个月
    ("未休年假可顺延至次年3月31日。", LEAVE),  # a copy, its 未 included
    ("剩余年假可以顺延到次年3月31日。", LEAVE),  # the passage's 未 is about 休, which this sentence does not say
    ("没休完的年假可以顺延到次年3月31日。", LEAVE),
    ("连接失败的话可以打电话给IT服务台，分机是8000。", VPN),
    ("服务器地址是vpn.example.com，端口是443。", VPN),
    ("你需要先从IT门户下载VPN客户端，然后用工号和域密码登录。", VPN),
    ("禁止用个人邮箱发送客户资料。", RULES),  # 禁止用 / 不得使用: both negate the same thing
    ("试用期员工没有年假。", RULES),
    ("You have 30 days after a purchase to submit the expense report.", EXPENSES),
    ("You have thirty days after a purchase to submit the expense report.", EXPENSES),  # 30 / thirty
    ("Receipts over $100 must have a scanned copy.", EXPENSES),  # 100 USD / $100
    ("Finance approves the reports each Friday.", EXPENSES),
    ("The health endpoint /health returns 200 when the model is loaded.", UPGRADE),
    ("First stop the vllm service using systemctl, swap in the new model directory and start it again.", UPGRADE),
]

# (sentence, passage): a number, date, amount or negation the passage contradicts.
CONTRADICTING = [
    ("员工入职满一年后享有15天带薪年假。", LEAVE),
    ("满十年后享有15天年假。", LEAVE),
    ("入职满5年后享有10天年假。", LEAVE),  # 5 and 10 are in the passage, but as 5天 and 十年
    ("年假需提前三周在OA系统中申请。", LEAVE),
    ("未休年假可顺延至次年4月30日。", LEAVE),
    ("年假不需要在OA系统中申请。", LEAVE),
    ("年假需提前两周申请，不需要主管批准。", LEAVE),
    ("未休年假不可顺延。", LEAVE),
    ("服务器端口是8443。", VPN),
    ("不需要下载客户端，直接用工号和域密码登录。", VPN),
    ("员工可以使用个人邮箱发送客户资料。", RULES),
    ("试用期员工享有年假。", RULES),
    ("You have 60 days after a purchase to submit the expense report.", EXPENSES),
    ("You have sixty days after a purchase to submit the expense report.", EXPENSES),
    ("Receipts over 500 USD need a scanned copy attached.", EXPENSES),
    ("Receipts over 100 USD do not need a scanned copy.", EXPENSES),
    ("Receipts over 100 USD don't need a scanned copy.", EXPENSES),
    ("A scanned copy is not required for receipts over 100 USD.", EXPENSES),
    ("Reports are never approved by the finance team on Friday.", EXPENSES),
    ("The health endpoint /health returns 503 when the model is loaded.", UPGRADE),
    ("You do not need to stop the vllm service before replacing the model directory.", UPGRADE),
]


@pytest.mark.parametrize("tokenizer", CJK_AWARE)
@pytest.mark.parametrize(("sentence", "passage"), AGREEING, ids=[s for s, _ in AGREEING])
def test_a_correct_paraphrase_agrees(sentence, passage, tokenizer):
    assert agrees(sentence, passage, tokenizer), (unsupported_facts(sentence, passage), contradicting_clause(sentence, passage, tokenizer))


@pytest.mark.parametrize("tokenizer", CJK_AWARE)
@pytest.mark.parametrize(("sentence", "passage"), CONTRADICTING, ids=[s for s, _ in CONTRADICTING])
def test_a_contradicting_sentence_disagrees(sentence, passage, tokenizer):
    assert not agrees(sentence, passage, tokenizer)


def test_what_disagrees_is_named():
    assert unsupported_facts("员工入职满一年后享有15天带薪年假。", LEAVE) == [Quantity(15, "day")]
    assert unsupported_facts("未休年假可顺延至次年4月30日。", LEAVE) == [Date(None, 4, 30)]
    assert contradicting_clause("年假不需要在OA系统中申请。", LEAVE, "bigram") == (
        "年假不需要在oa系统中申请",
        "年假需提前两周在oa系统中申请",
    )
    assert contradicting_clause("年假需要在OA系统中申请。", LEAVE, "bigram") is None


# --- numbers ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "quantities"),
    [
        ("１５天", [Quantity(15, "day")]),  # full-width digits
        ("十五天 15天 15 days fifteen days", [Quantity(15, "day")] * 4),
        ("两周 2 weeks two weeks 14天", [Quantity(14, "day")] * 4),
        ("1.5万元 15000元 15,000 yuan", [Quantity(15000, "yuan")] * 3),
        ("三千元", [Quantity(3000, "yuan")]),
        ("50% 百分之五十 50 percent", [Quantity(50, "%")] * 3),
        ("$100 100 USD 100美元", [Quantity(100, "usd")] * 3),
        ("2小时 120分钟 two hours", [Quantity(7200, "second")] * 3),
        ("一年 12个月 one year", [Quantity(12, "month")] * 3),
        ("9:00 九点 下午6点 6 pm 18:00", [Quantity(9, "oclock")] * 2 + [Quantity(18, "oclock")] * 3),
        ("3张发票 twenty-one receipts", [Quantity(3, "张"), Quantity(21, "")]),
    ],
)
def test_quantities_with_their_units(text, quantities):
    assert sorted(facts(text).quantities, key=repr) == sorted(quantities, key=repr)


def test_a_chinese_amount_with_yi_and_wan_is_the_same_amount_in_digits():
    assert facts("一亿五千万元").quantities == (Quantity(150_000_000, "yuan"),)
    assert unsupported_facts("预算为1.5亿元。", "项目预算一亿五千万元。") == []


@pytest.mark.parametrize(
    "text",
    [
        "请稍等一下，我们一起看看，十分简单，千万不要着急，万一失败请统一处理。",  # idioms with numeral characters
        "这是一个问题，再试一次，第三方系统，第2步，第一，先下载。",  # the article 一个, ordinals
        "Use v1.2.3 on ipv6, x86_64 or 10.0.0.1 at vpn2.example.com.",  # digits inside words
        "1. 下载客户端\n2) 登录\n① 打开\n- 3 steps? No: the one that works.",  # list markers; 'one' without a unit
    ],
)
def test_words_that_are_no_numbers(text):
    assert [q for q in facts(text).quantities if q.unit != ""] == []
    assert facts(text).quantities in ((), (Quantity(3, ""),))  # only the '3 steps'


# --- dates ------------------------------------------------------------------------------------------------------


def _formats(d) -> list[str]:
    return [
        d.isoformat(),
        f"{d.year}/{d.month}/{d.day}",
        f"{d.year}年{d.month}月{d.day}日",
        f"{d.month}月{d.day}号",
        d.strftime("%B %-d, %Y"),
        d.strftime("%-d %B"),
        d.strftime("%b %-d"),
    ]


@pytest.mark.parametrize("n", [30, 200])
def test_a_date_in_any_format_is_the_same_date(n):
    d = day(n)
    for text in _formats(d):
        [found] = facts(text).dates
        assert (found.month, found.day) == (d.month, d.day), text
        assert found.year in (None, d.year), text
        assert facts(text).quantities == (), text  # not also read as numbers
        assert unsupported_facts(f"截止日期是{text}。", f"The deadline is {d.isoformat()}.") == [], text


def test_another_date_or_year_disagrees():
    d, other = day(30), day(31)
    passage = f"申请截止日期为{d.year}年{d.month}月{d.day}日。"
    assert unsupported_facts(f"The deadline is {other.isoformat()}.", passage) == [Date(other.year, other.month, other.day)]
    assert unsupported_facts(f"The deadline is {d.replace(year=d.year + 1).isoformat()}.", passage) != []
    assert unsupported_facts(f"截止日期是{d.month}月{d.day}日。", passage) == []  # no year: the day still agrees


def test_a_calendar_year_is_a_year_not_a_number_of_months():
    d = day(40)
    passage = f"公司{d.year}年的年会定于{d.isoformat()}举行。"
    assert facts(f"{d.year}年").quantities == (Quantity(d.year, "year"),)
    assert unsupported_facts(f"{d.year}年的年会在{d.month}月{d.day}日。", passage) == []
    assert unsupported_facts(f"年会在{d.year}年举行。", f"The party is on {d.isoformat()}.") == []  # the date's year
    assert unsupported_facts(f"{d.year + 1}年的年会在{d.month}月{d.day}日。", passage) == [Quantity(d.year + 1, "year")]
    assert unsupported_facts("放假前15天提交申请。", "须在放假前 15 个自然日提交申请。") == []


# --- negation ---------------------------------------------------------------------------------------------------


def test_an_unrelated_negation_elsewhere_in_the_passage_does_not_count():
    passage = "年假需提前两周在OA系统中申请。请勿使用个人邮箱发送资料，禁止外传。"
    assert agrees("年假要提前两周在OA系统中申请。", passage, "bigram")
    assert not agrees("年假不用在OA系统中申请。", passage, "bigram")


@pytest.mark.parametrize(
    "sentence",
    ["年假申请流程不同于报销，需提前两周在OA系统中申请。", "无论如何，年假都需提前两周在OA系统中申请。",
     "年假需提前不超过两周在OA系统中申请。"],
)  # fmt: skip
def test_words_holding_a_negation_character_do_not_negate(sentence):
    assert agrees(sentence, LEAVE, "bigram")


def test_english_bounds_are_not_negations():
    assert agrees("Expense reports must be submitted no later than 30 days after the purchase.", EXPENSES, "bigram")


# --- the test corpus: no false rejections of copies, every changed amount caught -------------------------------

CORPUS = Path(__file__).resolve().parents[1] / "data" / "docs_corpus"
_AMOUNT = re.compile(r"(?<![\w.:/-])(\d+)(?=\s*(?:天|个工作日|小时|分钟|元|%|年|人|次|days?\b|hours?\b|minutes?\b))")


def _corpus_sentences() -> list[tuple[str, str]]:
    """(sentence, the paragraph it comes from) for every sentence of tests/data/docs_corpus."""
    out = []
    for path in sorted(CORPUS.iterdir()):
        for paragraph in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")):
            out += [(paragraph[a:b], paragraph) for a, b in split_sentences(paragraph)]
    return out


def test_every_sentence_of_the_corpus_agrees_with_its_own_paragraph():
    """Lists, tables, dates, amounts and several negations per paragraph (1,246 sentences): a copy always agrees."""
    sentences = _corpus_sentences()
    assert len(sentences) > 1000
    rejected = [s for s, paragraph in sentences if not agrees(s, paragraph, "unigram+bigram")]
    assert rejected == []


def test_every_changed_amount_in_the_corpus_disagrees():
    changed = []
    for sentence, paragraph in _corpus_sentences():
        if m := _AMOUNT.search(sentence):
            changed.append((sentence[: m.start(1)] + str(int(m.group(1)) * 10 + 7) + sentence[m.end(1) :], paragraph))
    assert len(changed) > 100
    assert [s for s, paragraph in changed if agrees(s, paragraph, "unigram+bigram")] == []


def test_table_rows_and_headings_have_no_polarity():
    passage = "### 调休上班日\n\n| 节日 | 天数 | 调休上班 |\n| --- | --- | --- |\n| 清明节 | 3 天 | 无 |\n"
    assert agrees("清明节不用调休上班，放假3天。", passage, "unigram+bigram")
    assert not agrees("清明节放假4天。", passage, "unigram+bigram")  # the numbers in a table are still compared


LEAVE_POLICY_REPLIES = [  # (what a small model might answer from tests/data/docs_corpus/leave_policy.md, agrees)
    ("工作满1年不满10年的员工每年有5天年假。", True),
    ("工龄满十年不满二十年的员工，每年有十天年假。", True),
    ("工作满二十年以上每年可以休15天年假。", True),
    ("没休完的年假可以延到第二年3月31日，过期作废。", True),
    ("年假不能预支。", True),
    ("请假需要在OA系统的假期管理模块提交申请。", True),
    ("请假时要写明假别、起止时间和工作交接人。", True),  # 假别 is a kind of leave, not a negation
    ("请假最小单位是半天，也就是4个小时。", True),
    ("病假前五天全额发工资，从第6天开始按基本工资的80%发放。", True),
    ("每年事假累计不能超过15天。", True),
    ("男员工享有十五天陪产假，须在孩子出生后三个月内休完。", True),
    ("突发情况要在当天上午10点前通过企业微信告诉直属主管。", True),
    ("实习生不适用带薪假期条款。", True),
    ("因工作需要无法安排休假的，按日工资的200%支付未休年假工资。", True),
    ("年假可以提前预支。", False),
    ("请假不需要在OA系统中提交申请。", False),
    ("请假最小单位是1小时。", False),
    ("病假期间工资按基本工资的70%发放。", False),
    ("每年事假累计可以超过15天。", False),
    ("女员工生育可以享受98天的产假。", False),
    ("突发情况要在当天上午10:00前通过企业微信告诉直属主管，不需要补提申请。", False),
    ("实习生和外包人员也适用本制度的带薪假期条款。", False),
]


@pytest.mark.parametrize("tokenizer", ["unigram+bigram", "bigram"])
def test_replies_about_a_whole_corpus_document(tokenizer):
    """A real policy with many numbers and several 不/无/未 in unrelated sentences, as one passage."""
    passage = (CORPUS / "leave_policy.md").read_text(encoding="utf-8")
    wrong = [(s, expected) for s, expected in LEAVE_POLICY_REPLIES if agrees(s, passage, tokenizer) != expected]
    assert wrong == []


SINGAPORE_REPLIES = [  # the same for tests/data/docs_corpus/singapore_office.md (English)
    ("Employees in Singapore get eighteen days of annual leave each calendar year.", True),
    ("You can carry forward up to five unused days, which must be used by 30 June.", True),
    ("Unused days can be carried forward and must be used by June 30.", True),
    ("Annual leave is not paid out in cash unless employment ends.", True),
    ("After 3 months of service you are entitled to 14 days of paid outpatient sick leave.", True),
    ("A medical certificate is required for every day of sick leave.", True),
    ("Claims above 1,000 SGD need approval from the department head.", True),
    ("Office hours are from 9am to 6pm, Monday to Friday.", True),
    ("Chinese mainland holiday shifts do not apply in Singapore.", True),
    ("The daily travel allowance is sixty dollars.", True),
    ("Economy class is used for flights under eight hours.", True),
    ("Annual leave can be paid out in cash at the end of the year.", False),
    ("Employees get 21 days of annual leave per year.", False),
    ("Up to 5 unused days can be carried forward and must be used by 31 March.", False),
    ("You don't need a medical certificate for sick leave.", False),
    ("Meals with customers are limited to 100 SGD per person.", False),
    ("Claims above 1000 SGD do not require approval.", False),
    ("Office hours are 9:00 to 17:00.", False),
    ("Chinese mainland holiday shifts apply in Singapore too.", False),
]


@pytest.mark.parametrize("tokenizer", ["unigram+bigram", "bigram"])
def test_english_replies_about_a_whole_corpus_document(tokenizer):
    passage = (CORPUS / "singapore_office.md").read_text(encoding="utf-8")
    wrong = [(s, expected) for s, expected in SINGAPORE_REPLIES if agrees(s, passage, tokenizer) != expected]
    assert wrong == []
