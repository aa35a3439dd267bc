# Wheelhouse packages: HTML and Markdown, a graph, and the wasm-backed msgpack and xxhash.
import bs4
import markdown
import msgpack
import networkx as nx
import xxhash

html = markdown.markdown("# Report\n\n- [one](https://a.example/1)\n- [two](https://a.example/2)\n")
links = [a["href"] for a in bs4.BeautifulSoup(html, "html.parser").find_all("a")]
print(links)
g = nx.DiGraph([("a", "b"), ("b", "c"), ("a", "c"), ("c", "d")])
print(list(nx.topological_sort(g)), nx.shortest_path_length(g, "a", "d"))
packed = msgpack.packb({"links": links, "order": list(nx.topological_sort(g))})
print(len(packed), xxhash.xxh3_64_hexdigest(packed), msgpack.unpackb(packed)["order"])
