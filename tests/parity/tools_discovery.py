# What an agent sees when it explores the tools: names, signatures, docstrings, reprs.
import inspect

print(tools)
print(dir(tools))
for server in dir(tools):
    s = getattr(tools, server)
    print(repr(s), s.__doc__)
fs = tools.filesystem
for name in ["read_text_file", "write_file", "edit_file", "search_files"]:
    fn = getattr(fs, name)
    print(f"{name}{inspect.signature(fn)}")
print(fs.read_text_file.__doc__)
print(tools.everything.get_sum.mcp_name, tools.everything.get_sum.__name__, tools.everything.get_sum.server)
print(inspect.signature(tools.memory.create_entities))
help(tools.everything.echo)
{server: len(dir(getattr(tools, server))) for server in dir(tools)}
