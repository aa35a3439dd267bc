# asyncio: a producer/consumer queue, gather, create_task, timeouts and cancellation.
import asyncio


async def fetch(name, delay):
    await asyncio.sleep(delay)
    return f"{name} after {delay}s"


async def worker(wid, queue, done):
    while True:
        job = await queue.get()
        await asyncio.sleep(0.001 * job)
        done.append((job, wid))
        queue.task_done()


async def main():
    print(await asyncio.gather(fetch("a", 0.03), fetch("b", 0.01), fetch("c", 0.02)))
    queue, done = asyncio.Queue(), []
    for job in range(12):
        queue.put_nowait(job)
    workers = [asyncio.create_task(worker(w, queue, done)) for w in range(3)]
    await queue.join()
    for w in workers:
        w.cancel()
    results = await asyncio.gather(*workers, return_exceptions=True)
    print(sorted(job for job, _ in done), [type(r).__name__ for r in results])
    try:
        async with asyncio.timeout(0.02):
            await asyncio.sleep(5)
    except TimeoutError:
        print("timed out as planned")
    first = None
    for coro in asyncio.as_completed([fetch("slow", 0.05), fetch("fast", 0.005)]):
        first = first or await coro
    print("first:", first)
    event = asyncio.Event()
    asyncio.get_running_loop().call_later(0.01, event.set)
    await event.wait()
    print("event set", event.is_set())
    return len(done)


await main()
