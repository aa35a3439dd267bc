# A configured server that never started: how it looks, and what calling it raises.
print(sorted(dir(tools)))
print(repr(tools.broken).split(":", 2)[:2])
try:
    tools.broken.anything(x=1)
except ToolError as e:
    print("ToolError", e.server, e.tool, e.message[:60])
print(tools.everything.echo(message="the others still work"))
"done"
