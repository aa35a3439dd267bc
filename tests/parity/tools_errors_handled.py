# Tool failures an agent handles: missing files, denied paths, bad arguments, unknown tools.
import inspect

fs = tools.filesystem
root = fs.list_allowed_directories()["content"].splitlines()[1]
for path in [f"{root}/missing.txt", "/etc/passwd", f"{root}/../escape.txt"]:
    try:
        fs.read_text_file(path=path)
    except ToolError as e:
        print("ToolError", e.server, e.tool, "|", e.message.replace(root, "<root>")[:110])
try:
    tools.everything.get_sum(a="two", b=2)
except ToolError as e:
    print("invalid arguments:", e.message[:90])
try:
    tools.filesystem.read_text_file("positional.txt")
except TypeError as e:
    print("TypeError:", e)
try:
    tools.filesystem.read_text_file(pth="x")
except TypeError as e:
    print("TypeError:", e)
try:
    tools.filesystem.read_txt_file(path="x")
except AttributeError as e:
    print("AttributeError:", e)
try:
    tools.filesystm
except AttributeError as e:
    print("AttributeError:", e)
print(isinstance(ToolError("s", "t", "m"), Exception), inspect.signature(fs.read_text_file))
"handled"
