# A typical agent job: put data in files, read them back with tools, analyse in Python,
# record findings in the knowledge graph, and write a JSON report.
import json
import statistics

fs, mem = tools.filesystem, tools.memory
root = fs.list_allowed_directories()["content"].splitlines()[1]
fs.create_directory(path=f"{root}/metrics")
for host, values in {"web-1": [120, 135, 128, 900], "web-2": [98, 101, 97, 99], "db-1": [15, 18, 250, 17]}.items():
    fs.write_file(path=f"{root}/metrics/{host}.json", content=json.dumps({"host": host, "latency_ms": values}))
files = fs.read_multiple_files(paths=[f"{root}/metrics/{h}.json" for h in ["db-1", "web-1", "web-2"]])
text = files["content"] if isinstance(files, dict) else str(files)
print(text.replace(root, "<root>"))
findings = {}
for host in ["db-1", "web-1", "web-2"]:
    data = json.loads(fs.read_text_file(path=f"{root}/metrics/{host}.json")["content"])
    values = data["latency_ms"]
    med = statistics.median(values)
    outliers = [v for v in values if v > 3 * med]
    findings[host] = {"median": med, "outliers": outliers}
    if outliers:
        mem.create_entities(entities=[{"name": host, "entityType": "host", "observations": [f"latency spike {max(outliers)} ms"]}])
report = json.dumps(findings, indent=2, sort_keys=True)
print(fs.write_file(path=f"{root}/report.json", content=report)["content"].replace(root, "<root>"))
print(fs.list_directory_with_sizes(path=root, sortBy="name")["content"])
print(sorted(e["name"] for e in mem.read_graph()["entities"]))
findings
