# Async generators, async comprehensions, TaskGroup, semaphores and except* on ExceptionGroups.
# Ordering comes from the event loop (sleep(0) steps), never from racing timers.
import asyncio


async def ticker(n):
    for i in range(n):
        await asyncio.sleep(0)
        yield i * i


async def steps(i, fail_at=None, error=ValueError):
    for _ in range(i):
        await asyncio.sleep(0)
    if i == fail_at:
        raise error(f"bad item {i}")
    return i


squares = [x async for x in ticker(6) if x % 2 == 0]
print(squares)
async with asyncio.TaskGroup() as tg:
    tasks = [tg.create_task(steps(i)) for i in range(5)]
print([t.result() for t in tasks])
try:
    async with asyncio.TaskGroup() as tg:
        group_tasks = [tg.create_task(steps(i, fail_at=4)) for i in range(1, 7)]
except* ValueError as group:
    print("ValueErrors:", [str(e) for e in group.exceptions])


def state(task):
    if task.cancelled():
        return "cancelled"
    return "failed" if task.exception() else task.result()


print([state(t) for t in group_tasks])
results = await asyncio.gather(*(steps(i, fail_at=i if i % 2 else None, error=[KeyError, ValueError][i % 4 == 1])
                                 for i in range(6)), return_exceptions=True)
print([type(r).__name__ for r in results])
try:
    raise ExceptionGroup("batch", [r for r in results if isinstance(r, Exception)])
except* ValueError as group:
    print("ValueErrors:", [e.args for e in group.exceptions])
except* KeyError as group:
    print("KeyErrors:", [e.args for e in group.exceptions])
sem = asyncio.Semaphore(2)


async def limited(i):
    async with sem:
        await asyncio.sleep(0)
        return i


print(await asyncio.gather(*(limited(i) for i in range(6))))
