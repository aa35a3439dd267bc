# Build a small knowledge graph through the memory server and query it back.
mem = tools.memory
people = [("Ada Lovelace", "person", ["wrote the first program", "born 1815"]),
          ("Charles Babbage", "person", ["designed the Analytical Engine"]),
          ("Analytical Engine", "machine", ["never completed"])]
created = mem.create_entities(entities=[{"name": n, "entityType": t, "observations": o} for n, t, o in people])
print(len(created["entities"]), "entities created")
mem.create_relations(relations=[
    {"from": "Ada Lovelace", "to": "Analytical Engine", "relationType": "programmed"},
    {"from": "Charles Babbage", "to": "Analytical Engine", "relationType": "designed"},
])
print(mem.add_observations(observations=[{"entityName": "Ada Lovelace", "contents": ["Countess of Lovelace"]}]))
hits = mem.search_nodes(query="Engine")
print(sorted(e["name"] for e in hits["entities"]), [(r["from"], r["relationType"]) for r in hits["relations"]])
mem.delete_observations(deletions=[{"entityName": "Ada Lovelace", "observations": ["born 1815"]}])
node = mem.open_nodes(names=["Ada Lovelace"])
print(node["entities"][0]["observations"])
graph = mem.read_graph()
{"entities": sorted(e["name"] for e in graph["entities"]), "relations": len(graph["relations"])}
