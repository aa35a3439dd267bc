# Merge layered JSON configs, validate them, and emit a normalised document.
import json

defaults = json.loads('{"server": {"host": "0.0.0.0", "port": 8080, "tls": false}, "log": {"level": "info"}, "features": []}')
override = json.loads('{"server": {"port": 9443, "tls": true}, "log": {"level": "debug", "format": "json"}, "features": ["beta", "metrics"]}')


def merge(base, extra):
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


merged = merge(defaults, override)
problems = []
if not 1 <= merged["server"]["port"] <= 65535:
    problems.append("port out of range")
if merged["log"]["level"] not in {"debug", "info", "warning", "error"}:
    problems.append("bad log level")

print(json.dumps(merged, indent=2, sort_keys=True))
print(json.dumps({"café": "naïve ☕", "n": 1e-7, "big": 2**70, "neg0": -0.0}))
print(json.dumps({"café": "naïve ☕"}, ensure_ascii=False))
print(json.dumps([1.5, float("inf")], allow_nan=True))
try:
    json.loads('{"broken": [1, 2,}')
except json.JSONDecodeError as e:
    print("decode error:", e.msg, "at line", e.lineno, "column", e.colno)
{"merged": merged, "problems": problems}
