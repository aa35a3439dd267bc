# Chained exceptions (raise ... from ..., and during handling), a custom class, and notes.
class ConfigError(Exception):
    def __init__(self, key, problem):
        super().__init__(f"{key}: {problem}")
        self.key = key


def parse_port(value):
    try:
        return int(value)
    except ValueError as e:
        raise ConfigError("port", f"not a number: {value!r}") from e


def settings():
    try:
        return {"port": parse_port("80a")}
    except ConfigError as e:
        e.add_note("hint: ports are whole numbers from 1 to 65535")
        try:
            {}["fallback"]
        except KeyError:
            raise e


try:
    settings()
except ConfigError as e:
    print("caught:", e, "| cause:", repr(e.__cause__), "| notes:", e.__notes__)
settings()
