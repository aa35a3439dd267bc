# Tools whose answers change on every live run (file times): comparable only against a cassette.
fs = tools.filesystem
root = fs.list_allowed_directories()["content"].splitlines()[1]
for name in ["a.txt", "b.txt"]:
    fs.write_file(path=f"{root}/{name}", content=name * 100)
info = fs.get_file_info(path=f"{root}/a.txt")["content"]
print(sorted(line.split(":", 1)[0] for line in info.splitlines()))
print([line for line in info.splitlines() if line.startswith(("modified", "size"))])
print(fs.list_directory_with_sizes(path=root, sortBy="size")["content"])
{"created": info.splitlines()[1]}
