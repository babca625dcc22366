"""A golden set: YAML cases with the phrases their answers must (and must not) contain.

    defaults: {max_tokens: 64}
    cases:
      - id: capital-france
        messages: [{role: user, content: What is the capital of France?}]
        must_include: [Paris]
      - id: refund-days
        docs:
          question: How many days do customers have to return an item?
          passages: ["Customers may return an item within 30 days of delivery."]
        must_include: ["30"]

A case is `messages` (a chat request sent as it is), `docs` (a question answered by the document Q&A pipeline from
passages or files given in the set, or from a collection of the configured index), `copy` (a marketing request;
its posts must end within chat.marketing's rules, so its phrases are optional) or `onboarding` (an HR record's
facts, the start date as days from today: the welcome the model writes for them must pass the onboarding fact
check, so its phrases are optional too). Loading reports
every problem of the file at once, each with file:line, the field and what to do, like the config file.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from ernie_ops.config_section import Section
from ernie_ops.errors import MISSING, ConfigProblem, UsageError
from ernie_ops.files import yamlfile
from ernie_ops.marketing import channels


class GoldenSetError(UsageError):
    """The golden set cannot be used; carries every problem found, not only the first."""

    def __init__(self, problems: list[ConfigProblem]):
        self.problems = problems
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"{len(problems)} problem(s) in the golden set:\n{lines}")


Phrase = str


def _phrases(values: list[str]) -> list[str]:
    for v in values:
        if not v.strip():
            raise ValueError("an empty phrase matches every answer; remove it")
    return values


class Defaults(Section):
    """What every case of the set shares."""

    max_tokens: int = Field(
        96, ge=1, le=4096,
        description="the answer's token limit (greedy decoding: the same limit gives the same answer); 96 fits a "
        "sentence or two with a citation, the length the phrase checks look at",
    )  # fmt: skip
    system: str | None = Field(None, min_length=1, description="a system prompt for `messages` cases that have none")


class Message(Section):
    role: Literal["system", "user", "assistant"]
    content: str = Field(min_length=1)


class DocsInput(Section):
    """A question for the document Q&A pipeline and where its passages come from."""

    question: str = Field(min_length=1)
    passages: list[str] = Field(default_factory=list, description="texts indexed for this case only, each as its own document")
    files: list[str] = Field(default_factory=list, description="files indexed for this case only, relative to the set's file")
    collection: str | None = Field(None, min_length=1, description="a collection of the configured index (chat.docs.index_file)")
    citations: bool = Field(True, description="the answer must cite, and every passage it cites must contain an expected phrase")

    @field_validator("passages")
    @classmethod
    def _non_empty(cls, values: list[str]) -> list[str]:
        if any(not v.strip() for v in values):
            raise ValueError("an empty passage cannot answer anything; remove it")
        return values

    @model_validator(mode="after")
    def _one_source(self) -> DocsInput:
        inline = bool(self.passages or self.files)
        if inline == (self.collection is not None):
            raise ValueError("give the passages (`passages` and/or `files`) or a `collection` of the configured index, one of the two")
        return self


class CopyInput(Section):
    """A marketing-copy request, as the chat app's form takes it (chat.marketing gives what it leaves out)."""

    product: str = Field(min_length=1)
    selling_points: str = ""
    audience: str = ""
    tone: str = ""
    posts: int = Field(1, ge=1, le=10, description="posts asked for; each must be within the rules")
    max_chars: int | None = Field(None, ge=5, le=2000, description="null: the channel's limit (chat.marketing.channel_max_chars)")
    channel: str | None = Field(None, description="moments, weibo, xiaohongshu or an alias (朋友圈...); null: chat.marketing.channel")
    first_try: bool = Field(False, description="true: a post that needed a regeneration fails too")

    @field_validator("channel")
    @classmethod
    def _known_channel(cls, value: str | None) -> str | None:
        if value is not None:
            channels.get(value)  # ValueError naming the channels
        return value


class OnboardingInput(Section):
    """A new employee's HR record, as `onboarding.plan.Facts` holds it (the start date relative to the day the set runs)."""

    name: str = Field(min_length=1)
    department: str = Field(min_length=1)
    role: str = Field("", description="the title; empty: the record has none (the welcome must then name no role)")
    manager: str | None = Field(None, min_length=1, description="null: the record names no manager")
    start_in_days: int = Field(
        ge=-366, le=366,
        description="start date = the day the set runs + n (never a calendar date: a fixed one would drift past); "
        "within a year either way, the span an HR record of a current hire has",
    )  # fmt: skip
    employee: str | None = Field(None, min_length=1, description="the record's id (the model is not given it); null: the case id")

    @field_validator("name", "department", "role", "manager", "employee")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value and not value.strip():
            raise ValueError("blank; write the text (or leave the key out)")
        return value.strip() if value is not None else None


class Case(Section):
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", description="names the case in the report")
    messages: list[Message] | None = Field(None, min_length=1)
    docs: DocsInput | None = None
    copy_: CopyInput | None = Field(None, alias="copy")
    onboarding: OnboardingInput | None = None
    must_include: list[Phrase] = Field(default_factory=list)
    must_not_include: list[Phrase] = Field(default_factory=list)
    case_sensitive: bool = False
    weight: float = Field(1.0, gt=0.0, le=1000.0)

    _check_include = field_validator("must_include", "must_not_include")(classmethod(lambda cls, v: _phrases(v)))

    @model_validator(mode="after")
    def _kind_and_checks(self) -> Case:
        if [self.messages, self.docs, self.copy_, self.onboarding].count(None) != 3:
            raise ValueError(
                "a case is `messages` (a chat request), `docs` (a document question), `copy` (a marketing request) "
                "or `onboarding` (a new employee's welcome): give exactly one"
            )
        if self.messages is not None and self.messages[-1].role != "user":
            raise ValueError("the last of `messages` must be the user's, the one the model answers")
        # copy: its rules are the check; onboarding: the fact check (a welcome naming another department, date or
        # an invented number fails the case), so either can fail without a phrase
        if not self.must_include and not self.must_not_include and self.copy_ is None and self.onboarding is None:
            raise ValueError("give `must_include` and/or `must_not_include`: a case without phrases cannot fail")
        if self.docs is not None and self.docs.citations and not self.must_include:
            raise ValueError("a docs case checks its citations against `must_include`: give the expected phrase(s)")
        return self

    @property
    def kind(self) -> str:
        if self.messages is not None:
            return "messages"
        return "docs" if self.docs is not None else "copy" if self.copy_ is not None else "onboarding"


class GoldenSet(Section):
    defaults: Defaults = Field(default_factory=Defaults)
    cases: list[Case] = Field(min_length=1)


@dataclass(frozen=True)
class Loaded:
    """A parsed set and the directory its relative `files` are read from."""

    golden: GoldenSet
    base_dir: Path


def load(path: str | Path) -> Loaded:
    """Read and validate a golden set; GoldenSetError listing every problem (a missing file or data file too)."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise GoldenSetError([ConfigProblem(source, None, "(file)", MISSING, "not found; give the path of a golden set (YAML)")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise GoldenSetError([ConfigProblem(source, None, "(file)", MISSING, f"cannot be read: {exc}")]) from None
    golden, lines = _parse(text, source)
    base = Path(path).resolve().parent
    missing = [
        ConfigProblem(source, lines.get(("cases", i, "docs", "files", j)), f"cases[{i}].docs.files[{j}]", name,
                      f"no such file under {base}; paths are relative to the golden set's directory")
        for i, case in enumerate(golden.cases) if case.docs is not None
        for j, name in enumerate(case.docs.files) if not (base / name).is_file()
    ]  # fmt: skip
    if missing:
        raise GoldenSetError(missing)
    return Loaded(golden, base)


def parse(text: str, source: str = "<string>") -> GoldenSet:
    """Validate YAML text against the schema (the text-level half of `load`)."""
    return _parse(text, source)[0]


def _parse(text: str, source: str) -> tuple[GoldenSet, dict[tuple, int]]:
    try:
        doc = yamlfile.load(text)
    except yaml.YAMLError as exc:
        raise GoldenSetError(yamlfile.problems(exc, source)) from None
    if not isinstance(doc.data, dict):
        raise GoldenSetError([ConfigProblem(source, 1, "(top level)", doc.data, "must be a mapping: `cases` (and `defaults`)")])
    try:
        golden = GoldenSet.model_validate(doc.data)
    except ValidationError as exc:
        problems = [_problem(err, doc.data, doc.lines, source) for err in exc.errors()]
        raise GoldenSetError(sorted(problems, key=lambda p: p.line or 0)) from None
    seen: dict[str, int] = {}
    repeated = []
    for i, case in enumerate(golden.cases):
        if case.id in seen:
            first = doc.lines.get(("cases", seen[case.id], "id"))
            why = f"already the id of cases[{seen[case.id]}] (line {first}); ids name the cases in the report"
            repeated.append(ConfigProblem(source, doc.lines.get(("cases", i, "id")), f"cases[{i}].id", case.id, why))
        seen.setdefault(case.id, i)
    if repeated:
        raise GoldenSetError(repeated)
    return golden, doc.lines


_MODELS: dict[str, type[Section]] = {"defaults": Defaults, "cases": Case, "messages": Message, "docs": DocsInput, "copy": CopyInput,
                                  "onboarding": OnboardingInput}  # fmt: skip


def _owner(path: tuple) -> type[Section]:
    """The model holding the last key of `path` (for the allowed keys of an unknown one)."""
    names = [p for p in path[:-1] if isinstance(p, str)]
    return _MODELS.get(names[-1], GoldenSet) if names else GoldenSet


def _problem(err: dict, data: Any, lines: dict[tuple, int], source: str) -> ConfigProblem:
    path = yamlfile.data_path(tuple(err["loc"]))
    field = yamlfile.dotted(path) or "(top level)"
    line = next((lines[path[:n]] for n in range(len(path), -1, -1) if path[:n] in lines), None)
    value = yamlfile.lookup(data, path)
    if err["type"] == "extra_forbidden":
        keys = [f.alias or name for name, f in _owner(path).model_fields.items()]  # as written in the file (`copy`)
        close = difflib.get_close_matches(str(path[-1]), keys, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return ConfigProblem(source, line, field, value, f"unknown key{hint}; allowed here: {', '.join(keys)}")
    if err["type"] == "missing":
        return ConfigProblem(source, line, field, MISSING, "required; add it")
    message = err["msg"].removeprefix("Value error, ")
    shown = MISSING if isinstance(value, dict) else value  # a rule about a whole case: its line says which, not its dump
    return ConfigProblem(source, line, field, shown, message)
