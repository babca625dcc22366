"""The `chat:` section of the config: defaults, and every bad value named with file, line, field and value."""

from __future__ import annotations

import string

import pytest

from ernie_ops import cli, config
from ernie_ops.chat.scenarios import BUILTIN
from ernie_ops.errors import ConfigError


def problems(text: str) -> dict[str, object]:
    with pytest.raises(ConfigError) as info:
        config.parse(text, "ernie.yaml")
    return {p.field: p for p in info.value.problems}


def test_defaults_match_the_fixed_interfaces():
    chat = config.parse("", "ernie.yaml").chat
    assert (chat.host, chat.port, chat.root_path) == ("127.0.0.1", 8500, "")
    assert chat.users_file == "/etc/ernie-ops/chat-users.yaml"
    assert config.parse("gateway:\n  url: http://127.0.0.1:8080/\n").chat_gateway_url() == "http://127.0.0.1:8080"
    assert config.parse("chat:\n  gateway_url: http://gw:81\n").chat_gateway_url() == "http://gw:81"


def test_builtin_scenarios_are_the_articles_and_valid():
    scenarios = config.parse("").chat.effective_scenarios()
    names = [s.name for s in scenarios]
    assert len(names) == len(set(names)) == len(BUILTIN) == 5
    for s in scenarios:
        used = {f for _, f, _, _ in string.Formatter().parse(s.prompt_template or "") if f}
        assert used <= {"request", *(f.name for f in s.fields)}, s.name
        assert s.source_field in (None, *(f.name for f in s.fields))
    support = next(s for s in scenarios if "Support" in s.name)
    assert [f.name for f in support.fields] == ["phone", "address"]  # the built-in support scenario: 电话 + 地址


def test_bad_values_name_line_field_and_value():
    text = (
        "chat:\n"
        "  port: 80\n"  # 2
        "  root_path: chat\n"  # 3: must start with /
        "  gateway_url: 127.0.0.1:80\n"  # 4: no scheme
        "  temperature: 3\n"  # 5
        "  extra_body: {stream: false, top_p: 0.9}\n"  # 6: owned key
        "  max_tokenz: 5\n"  # 7: typo
    )
    found = problems(text)
    assert set(found) == {"chat.port", "chat.root_path", "chat.gateway_url", "chat.temperature", "chat.extra_body", "chat.max_tokenz"}
    assert found["chat.port"].line == 2 and found["chat.port"].value == 80 and "1024" in found["chat.port"].message
    assert found["chat.root_path"].line == 3 and found["chat.root_path"].value == "chat"
    assert found["chat.gateway_url"].line == 4 and "http" in found["chat.gateway_url"].message
    assert found["chat.extra_body"].line == 6 and "stream is set by the chat app" in found["chat.extra_body"].message
    assert "did you mean 'max_tokens'" in found["chat.max_tokenz"].message


def test_reply_budget_must_leave_room_for_a_prompt():
    (p,) = problems("vllm:\n  max_model_len: 2048\nchat:\n  max_tokens: 2040\n  margin_tokens: 0\n").values()
    assert p.field == "chat.max_tokens" and p.line == 4 and p.value == 2040
    assert "leave 8 tokens for the prompt within vllm.max_model_len 2048" in p.message


def test_scenario_problems_are_located():
    text = (
        "chat:\n"
        "  default_scenario: nope\n"  # 2
        "  scenarios:\n"
        "    - name: A\n"
        "      system_prompt: be nice\n"
        "      prompt_template: 'about {topic}'\n"  # 6: unknown placeholder
        "      source_field: doc\n"  # 7: not a field
        "    - name: B\n"
        "      system_prompt: x\n"
        "      fields:\n"
        "        - {name: phone, label: p, pattern: '[0-9'}\n"  # 11: bad regex
        "        - {name: phone, label: q}\n"  # duplicate field
        "      prompt_template: '{phone'\n"
    )
    # Schema problems come first (the second pass checks rules that span fields): the regex ...
    found = problems(text)
    pattern = found["chat.scenarios[1].fields[0].pattern"]
    assert pattern.line == 11 and pattern.value == "[0-9" and "not a valid regular expression" in pattern.message
    # ... then, with a valid regex, the duplicate field ...
    found = problems(text.replace("pattern: '[0-9'}", "pattern: '[0-9]+'}"))
    assert "field 'phone' is listed more than once" in found["chat.scenarios[1].fields"].message
    # ... and with that fixed, the cross-field rules, all at once.
    found = problems(text.replace("pattern: '[0-9'}", "pattern: '[0-9]+'}").replace("        - {name: phone, label: q}\n", ""))
    assert found["chat.default_scenario"].line == 2 and "scenarios: A, B" in found["chat.default_scenario"].message
    assert found["chat.scenarios[0].prompt_template"].line == 6
    assert "{topic} is not a field of this scenario; known: request" in found["chat.scenarios[0].prompt_template"].message
    assert found["chat.scenarios[0].source_field"].line == 7 and found["chat.scenarios[0].source_field"].value == "doc"
    assert "not a valid template" in found["chat.scenarios[1].prompt_template"].message


def test_duplicate_scenario_names_and_empty_list():
    found = problems("chat:\n  scenarios:\n    - {name: A, system_prompt: x}\n    - {name: A, system_prompt: y}\n")
    assert "scenario 'A' is listed more than once" in found["chat.scenarios"].message
    found = problems("chat:\n  scenarios: []\n")
    assert found["chat.scenarios"].line == 2


def test_config_check_prints_chat_problems_without_traceback(tmp_path, capsys):
    bad = tmp_path / "c.yaml"
    bad.write_text("chat:\n  port: '8500'\n")
    assert cli.main(["--config", str(bad), "config", "check"]) == 2
    err = capsys.readouterr().err
    assert "c.yaml:2: chat.port = '8500'" in err and "Traceback" not in err
