# A tool error the script does not catch: a ToolError with a traceback into the script.
def load_settings(name):
    text = tools.filesystem.read_text_file(path=f"/nowhere/{name}.json")["content"]
    return text


print("loading")
load_settings("production")
