"""chat/drain.py: a stop lets the answers in flight finish within the bound, cancels the rest as cut, takes no new one."""

from __future__ import annotations

import asyncio

from ernie_ops.chat.drain import Replies


def test_answers_in_flight_finish_within_the_bound_and_one_past_it_is_cut():
    async def scenario() -> tuple:
        replies, events = Replies(), []

        async def answer(name: str, seconds: float) -> None:
            async with replies.reply():
                try:
                    await asyncio.sleep(seconds)
                    events.append(f"{name} finished")
                except asyncio.CancelledError:
                    events.append(f"{name} cut={replies.cut}")  # what the sink marks the stored answer by
                    raise

        quick, slow = asyncio.create_task(answer("quick", 0.2)), asyncio.create_task(answer("slow", 10))
        await asyncio.sleep(0.05)
        result = await replies.drain(bound=0.5, grace=1)
        return result, events, replies.draining, replies.tasks, quick.done() and slow.cancelled()

    (finished, cut), events, draining, left, done = asyncio.run(scenario())
    assert (finished, cut) == (1, 1) and events == ["quick finished", "slow cut=True"] and draining and not left and done


def test_a_stop_with_nothing_in_flight_returns_at_once_and_cuts_nothing():
    async def scenario() -> tuple:
        replies = Replies()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        result = await replies.drain(bound=20)
        return result, loop.time() - t0, replies.cut

    result, took, cut = asyncio.run(scenario())
    assert result == (0, 0) and took < 0.5 and not cut


def test_the_stop_waits_for_the_history_write_an_answer_left_behind():
    """Chainlit stores a finished message by a task of its own (asyncio.create_task(data_layer.create_step(...))): the
    answer's handler returns first. The stop waits for that write too (a fresh clone's restart lost an answer so)."""

    async def scenario() -> list[str]:
        replies, events = Replies(), []

        async def store() -> None:
            async with replies.writing():
                await asyncio.sleep(0.3)
                events.append("stored")

        async def answer() -> None:
            async with replies.reply():
                await asyncio.sleep(0.1)
                asyncio.create_task(store())  # noqa: RUF006 (as Chainlit's Message.send does: nobody keeps it)
                events.append("answered")

        task = asyncio.create_task(answer())
        await asyncio.sleep(0.01)
        await replies.drain(bound=5)
        events.append("stopping")
        await task
        return events

    assert asyncio.run(scenario()) == ["answered", "stored", "stopping"]
