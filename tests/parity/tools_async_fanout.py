# Tool calls fanned out with asyncio: await, .aio() with gather, and plain calls in between.
import asyncio

ev, fs = tools.everything, tools.filesystem
root = (await fs.list_allowed_directories())["content"].splitlines()[1]
sums = await asyncio.gather(*(ev.get_sum.aio(a=i, b=i * i) for i in range(6)))
print(sums)


async def write_and_read(i):
    await fs.write_file.aio(path=f"{root}/part-{i}.txt", content=f"part {i}\n" * (i + 1))
    return (await fs.read_text_file.aio(path=f"{root}/part-{i}.txt"))["content"].count("\n")


print(await asyncio.gather(*(write_and_read(i) for i in range(4))))
echo = await ev.echo(message="awaited")
print(echo, ev.echo(message="plain call"))
results = await asyncio.gather(fs.read_text_file.aio(path=f"{root}/nope"), ev.get_sum.aio(a=1, b=1),
                               return_exceptions=True)
print([type(r).__name__ for r in results], results[1])
listing = fs.list_directory(path=root)["content"]
sorted(listing.splitlines())
