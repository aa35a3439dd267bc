import bs4, soupsieve
soup = bs4.BeautifulSoup("<ul><li class='x'>one</li><li>two</li></ul>", "html.parser")
print([li.text for li in soup.select("li.x")], len(soup.find_all("li")))
import html5lib, webencodings
print(html5lib.parse("<p>a<b>b</p>", namespaceHTMLElements=False).find(".//b").text)
import markdown
print(markdown.markdown("# T\n\n*x*"))
import networkx as nx
g = nx.path_graph(5)
print(nx.shortest_path(g, 0, 4), nx.number_of_edges(g))
import more_itertools, toolz, tlz
print(list(more_itertools.chunked(range(5), 2)), toolz.pipe(3, lambda x: x * 2, str), tlz.first([9]))
import six, pyparsing, cachetools, idna
print(six.PY3, pyparsing.Word(pyparsing.nums).parse_string("42")[0], cachetools.LRUCache(2).maxsize, idna.encode("bücher.de"))
