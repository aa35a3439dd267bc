# An ExceptionGroup that escapes the script: its nested traceback must render identically.
import asyncio


async def job(i):
    await asyncio.sleep(0.001 * i)
    if i in (1, 3):
        raise RuntimeError(f"job {i} failed")
    return i


async with asyncio.TaskGroup() as tg:
    for i in range(4):
        tg.create_task(job(i))
