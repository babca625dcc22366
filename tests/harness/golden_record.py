"""A golden set recorded from a serving model: the answers it is known to give, captured at run time.

The model is asked each prompt through `ernie-ops eval` itself on the host (a draft set whose only check cannot
fail to pass), so the recording is made with the very request a quality gate sends (greedy, the set's
max_tokens); the set written from it expects the first words of each answer. A model that answers the same passes
every case; another model (other weights) misses them.
"""

from __future__ import annotations

import json

import yaml

from tests.harness import sandbox

# a phrase no answer holds: the draft's cases need a check, and this one passes whatever the model says
NEVER = "\u2063no-such-phrase\u2063"


def draft(prompts: dict[str, str], max_tokens: int) -> dict:
    """A set asking each prompt (case id: prompt), checked by nothing that can fail."""
    cases = [{"id": cid, "messages": [{"role": "user", "content": text}], "must_not_include": [NEVER]} for cid, text in prompts.items()]
    return {"defaults": {"max_tokens": max_tokens}, "cases": cases}


def expected_words(answer: str, words: int = 2, min_chars: int = 3) -> list[str]:
    """The first `words` words of an answer of at least `min_chars` characters (short ones match anything by chance)."""
    return [w for w in answer.split() if len(w) >= min_chars][:words]


def from_answers(prompts: dict[str, str], answers: dict[str, str], max_tokens: int) -> dict:
    """The set expecting each answer's first words; a prompt whose answer has no usable word is left out."""
    cases = [
        {"id": cid, "messages": [{"role": "user", "content": text}], "must_include": expected_words(answers[cid])}
        for cid, text in prompts.items()
        if expected_words(answers.get(cid, ""))
    ]
    if not cases:
        raise AssertionError(f"no answer had a word of 3+ characters to expect: {answers}")
    return {"defaults": {"max_tokens": max_tokens}, "cases": cases}


def record(sb: sandbox.Sandbox, cli: str, port: int, prompts: dict[str, str], max_tokens: int) -> tuple[str, dict[str, str]]:
    """Ask the instance on `port` of host `sb` each prompt with `ernie-ops eval`; the recorded set (YAML) and the answers."""
    path = "/tmp/golden-draft.yaml"
    sb.write(path, yaml.safe_dump(draft(prompts, max_tokens), allow_unicode=True, sort_keys=False))
    r = sb.run([cli, "eval", path, "--port", str(port), "--json"], check=False, timeout=300)
    assert r.returncode == 0, f"recording the golden set: eval exited {r.returncode}: {r.stdout[-2000:]} {r.stderr[-2000:]}"
    answers = {res["id"]: res["answer"] for res in json.loads(r.stdout)["results"]}
    return yaml.safe_dump(from_answers(prompts, answers, max_tokens), allow_unicode=True, sort_keys=False), answers
