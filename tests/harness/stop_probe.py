"""Run in the chat venv: stop replies the way Chainlit does, while the page is busy, and report what leaked.

Chainlit applies nest_asyncio when it starts (chainlit.cli), and under it a stop that lands while the
stream waits at `yield` once left httpx/httpcore generators to be finalised in another task on an open
connection. This reproduces that setting: nest_asyncio applied, a sink that takes 20 ms per token,
three stops at different moments (the replies held to word tokens, one piece each, so the 10th piece comes
long before the end). Prints JSON: {"stopped": N, "unraisable": [...]}.
Usage: python -m tests.harness.stop_probe GATEWAY_URL MODEL MODEL_DIR
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
from pathlib import Path

import nest_asyncio

from ernie_ops.chat import history
from ernie_ops.chat.config import ChatConfig
from ernie_ops.chat.conversation import Conversation
from ernie_ops.client.gateway import GatewayClient, Timeouts
from tests.harness import tiny_model


class SlowSink:
    def __init__(self) -> None:
        self.tokens = 0

    async def token(self, piece: str) -> None:
        self.tokens += 1
        await asyncio.sleep(0.02)

    async def finish(self, text: str, sources: list) -> None:
        pass

    async def say(self, text: str) -> None:
        pass

    async def fail(self, text: str) -> None:
        raise AssertionError(f"the reply failed: {text}")

    async def stopped(self) -> None:
        await asyncio.sleep(0)


async def probe(url: str, model: str, model_dir: Path) -> int:
    chat = ChatConfig.model_validate({"max_tokens": 300})
    words = {"ignore_eos": True, "allowed_token_ids": tiny_model.word_token_ids(model_dir)}
    client = GatewayClient(url, model, Timeouts(), extra_body=words)
    conv = Conversation(chat.effective_scenarios()[0], chat, history.Budget(2048, 300, 16), client,
                        history.TokenizeCounter(client.http, url, model))  # fmt: skip
    stopped = 0
    for after in (1, 3, 10):
        sink = SlowSink()
        task = asyncio.create_task(conv.on_user_message("story", sink))
        while sink.tokens < after:
            await asyncio.sleep(0.001)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            stopped += 1
        gc.collect()
        await asyncio.sleep(0.2)  # finalizer tasks run here
    await client.aclose()
    return stopped


def main() -> None:
    nest_asyncio.apply()  # what chainlit.cli does on import
    unraisable: list[str] = []
    sys.unraisablehook = lambda u: unraisable.append(f"{u.err_msg}: {u.exc_type.__name__}: {u.exc_value}")
    stopped = asyncio.run(probe(sys.argv[1], sys.argv[2], Path(sys.argv[3])))
    gc.collect()
    print(json.dumps({"stopped": stopped, "unraisable": unraisable}))


if __name__ == "__main__":
    main()
