# An ExceptionGroup (with a nested group) that escapes the script: its tree of tracebacks must
# render identically in both hosts.
import asyncio


async def job(i):
    await asyncio.sleep(0)
    if i in (1, 3):
        raise RuntimeError(f"job {i} failed")
    if i == 2:
        raise ExceptionGroup("job 2 had two problems", [KeyError("config"), OSError(5, "disk")])
    return i


results = await asyncio.gather(*(job(i) for i in range(4)), return_exceptions=True)
print([type(r).__name__ for r in results])
raise ExceptionGroup("some jobs failed", [r for r in results if isinstance(r, BaseException)])
