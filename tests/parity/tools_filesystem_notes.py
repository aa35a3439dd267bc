# An agent's notes folder through the filesystem server: write, edit, list, search, read back.
fs = tools.filesystem
root = fs.list_allowed_directories()["content"].splitlines()[1]
fs.create_directory(path=f"{root}/notes/2026")
for day, text in [("01", "Kick-off ✓\nTODO: budget\n"), ("02", "Design review\nTODO: diagrams\nTODO: budget\n"),
                  ("03", "Ship it 🚀\n")]:
    print(fs.write_file(path=f"{root}/notes/2026/dec-{day}.md", content=text)["content"].replace(root, "<root>"))
edit = fs.edit_file(path=f"{root}/notes/2026/dec-02.md", edits=[{"oldText": "Design review", "newText": "Design review (done)"}])
print(edit["content"].replace(root, "<root>"))
print(fs.list_directory(path=f"{root}/notes/2026")["content"])
found = fs.search_files(path=root, pattern="**/*.md")["content"]
print(sorted(line.replace(root, "<root>") for line in found.splitlines()))
todos = {}
for line in found.splitlines():
    body = fs.read_text_file(path=line)["content"]
    todos[line.rsplit("/", 1)[1]] = [l[6:] for l in body.splitlines() if l.startswith("TODO: ")]
print(fs.read_text_file(path=f"{root}/notes/2026/dec-02.md", head=1))
print(fs.directory_tree(path=f"{root}/notes"))
{"todos": dict(sorted(todos.items()))}
