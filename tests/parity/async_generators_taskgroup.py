# Async generators, async comprehensions, TaskGroup and except* with an ExceptionGroup.
import asyncio


async def ticker(n):
    for i in range(n):
        await asyncio.sleep(0)
        yield i * i


async def may_fail(i):
    await asyncio.sleep(0.001 * i)
    if i % 3 == 0:
        raise ValueError(f"bad item {i}")
    if i == 4:
        raise KeyError(i)
    return i


squares = [x async for x in ticker(6) if x % 2 == 0]
print(squares)
async with asyncio.TaskGroup() as tg:
    tasks = [tg.create_task(asyncio.sleep(0.001 * i, result=i)) for i in range(5)]
print([t.result() for t in tasks])
try:
    async with asyncio.TaskGroup() as tg:
        for i in range(1, 7):
            tg.create_task(may_fail(i))
except* ValueError as group:
    print("ValueErrors:", sorted(str(e) for e in group.exceptions))
except* KeyError as group:
    print("KeyErrors:", [e.args for e in group.exceptions])
sem = asyncio.Semaphore(2)


async def limited(i):
    async with sem:
        await asyncio.sleep(0.002)
        return i


print(await asyncio.gather(*(limited(i) for i in range(6))))
