"""One session's scenario flow on the session state machine: collect fields, then generate.

`Flow.on_user_message` turns what the user typed into the next step: `Ask` (stay in
collecting_info and ask for what is missing), `Generate` (the system prompt and user content to
send), or `Busy` (a message arrived while a reply is still generating). The app then reports how
the generation ended with `done` / `stopped` / `failed`. A resumed thread's flow is rebuilt by
`replay`ing its user messages: the state depends on nothing else.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ernie_ops.chat.config import ChatFieldConfig, ScenarioConfig
from ernie_ops.chat.machine import Machine

_TRAILING = " \t,，;；。.、"


@dataclass(frozen=True)
class Ask:
    text: str


@dataclass(frozen=True)
class Generate:
    system: str
    user: str


@dataclass(frozen=True)
class Busy:
    text: str = "上一条回复还在生成中，请稍候或点停止。 / A reply is still being generated: wait for it or press stop."


@dataclass(frozen=True)
class Extracted:
    values: dict[str, str]
    rejected: dict[str, str]  # field -> the value the user gave that does not match its pattern
    rest: str  # the text without the recognised "label: value" parts and pattern hits


def _labels(field: ChatFieldConfig) -> list[str]:
    return [field.label, *field.aliases]


def _name(field: ChatFieldConfig) -> str:
    return (field.aliases or [field.label])[0]


def extract(text: str, fields: list[ChatFieldConfig]) -> Extracted:
    """Values for `fields` found in `text`: "label: value" first, then unlabelled pattern matches.

    A labelled value runs to the next label; for a field without a pattern it is the rest of its line,
    or everything after "label:" when that is followed by a line break (a pasted document).
    """
    values: dict[str, str] = {}
    rejected: dict[str, str] = {}
    spans: list[tuple[int, int]] = []
    by_label = {label.lower(): f for f in fields for label in _labels(f)}
    if by_label:
        alternatives = "|".join(re.escape(label) for label in sorted(by_label, key=len, reverse=True))
        matches = list(re.finditer(rf"(?P<label>{alternatives})\s*[:：=]", text, re.IGNORECASE))
        for i, m in enumerate(matches):
            field = by_label[m.group("label").lower()]
            end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
            raw = text[m.end() : end]
            first_line, _, _ = raw.lstrip(" \t").partition("\n")
            value = raw.strip() if not first_line.strip() else first_line.strip().strip(_TRAILING).strip()
            if field.pattern:
                hit = re.search(field.pattern, value)
                if hit is None:
                    rejected[field.name] = value
                    spans.append((m.start(), end))
                    continue
                value = hit.group(0).strip()
            if value:
                values.setdefault(field.name, value)
                spans.append((m.start(), end if not field.pattern else m.end() + raw.find(value) + len(value)))
    rest = _cut(text, spans)
    for field in fields:
        if field.name in values or not field.pattern:
            continue
        hit = re.search(field.pattern, rest)
        if hit:
            values[field.name] = hit.group(0).strip()
            rejected.pop(field.name, None)
            rest = rest[: hit.start()] + rest[hit.end() :]
    return Extracted(values, rejected, rest.strip().strip(_TRAILING).strip())


def _cut(text: str, spans: list[tuple[int, int]]) -> str:
    out, pos = [], 0
    for start, end in sorted(spans):
        if start >= pos:
            out.append(text[pos:start])
            pos = end
    out.append(text[pos:])
    return " ".join(part.strip() for part in out if part.strip())


class Flow:
    """A scenario's conversation state: the machine, the collected fields, the original request."""

    def __init__(self, scenario: ScenarioConfig):
        self.scenario = scenario
        self.machine = Machine()
        self.values: dict[str, str] = {}
        self.request = ""
        self._template_sent = scenario.prompt_template is None

    @property
    def state(self) -> str:
        return self.machine.state

    def missing(self) -> list[ChatFieldConfig]:
        return [f for f in self.scenario.fields if f.name not in self.values]

    def system_prompt(self) -> str:
        """The scenario's prompt plus what the user told us, so follow-up turns keep the facts."""
        if not self.values:
            return self.scenario.system_prompt
        labels = {f.name: f.label for f in self.scenario.fields}
        facts = "\n".join(f"- {labels[name]}: {value}" for name, value in self.values.items())
        return f"{self.scenario.system_prompt}\n\n已知信息 / Known facts:\n{facts}"

    def on_user_message(self, text: str) -> Ask | Generate | Busy:
        if self.state == "generating":
            return Busy()
        collecting = self.state == "collecting_info"
        found = extract(text, self.missing())
        self.values.update(found.values)
        rest = found.rest
        missing = self.missing()
        answer = text.strip()
        if collecting and len(missing) == 1 and answer and not found.values and not found.rejected:
            # The answer to a one-field question needs no label ("北京市海淀区…" after "地址?").
            only = missing[0]
            if only.pattern is None or re.fullmatch(only.pattern, answer):
                self.values[only.name] = answer
                missing = []
        if not collecting:
            self.request = rest
        if missing:
            self.machine.fire("ask")
            return Ask(self._question(missing, found.rejected))
        self.machine.fire("generate")
        return Generate(self.system_prompt(), self._user_content(text))

    def _user_content(self, text: str) -> str:
        if self._template_sent:
            return text
        self._template_sent = True
        assert self.scenario.prompt_template is not None
        return self.scenario.prompt_template.format(request=self.request, **self.values).strip()

    def _question(self, missing: list[ChatFieldConfig], rejected: dict[str, str]) -> str:
        lines = [f"- {f.label}" for f in missing]
        bad = [f"「{rejected[f.name]}」不像是有效的{_name(f)} / does not look valid" for f in missing if f.name in rejected]
        example = "；".join(f"{_name(f)}: …" for f in missing)
        head = "\n".join([*bad, "请提供以下信息 / Please provide:"])
        return f"{head}\n" + "\n".join(lines) + f"\n\n可以一条消息写完，例如 / in one message, e.g.: `{example}`"

    def replay(self, texts: Iterable[str]) -> None:
        """A resumed thread's user messages, oldest first, through the flow again (pure: no model call), so it
        continues where the thread was left: the fields collected, the original request, the state (asking for
        what is still missing), whether the template was sent. Every generation of the thread ended (done,
        stopped or failed alike lead back to idle), so each replayed `Generate` is taken as ended."""
        for text in texts:
            if isinstance(self.on_user_message(text), Generate):
                self.finished("done")

    def finished(self, outcome: str) -> None:
        """`done`, `stopped` or `failed`: the reply is over, the session takes messages again."""
        self.machine.fire(outcome)
