# Result shapes from the reference server: text, structured content, images, annotated content.
ev = tools.everything
print(ev.echo(message="héllo wörld ✓"))
print(ev.get_sum(a=2, b=40), ev.get_sum(a=0.1, b=0.2))
print(ev.get_structured_content(location="Chicago"))
image = ev.get_tiny_image()
print(type(image).__name__, len(image), [type(part).__name__ for part in image])
print([part["mimeType"] for part in image if isinstance(part, dict)], len(image[1]["data"]))
print(ev.get_annotated_message(messageType="success", includeImage=False))
links = ev.get_resource_links(count=2)
print(type(links).__name__, str(links)[:120])
{"sum": ev.get_sum(a=-1, b=1)}
