"""
Driver for the Python memcache clients (tests/clients/README: the driver
protocol).  Reads one JSON request per line on stdin, runs it through the
client library and writes one JSON reply per line on stdout.

    py_driver.py LIB HOST:PORT [timeout_ms=N] [noreply=1]

LIB is pymemcache (Client with default_noreply=False unless noreply=1: the
library's default, True, makes set return before the server has answered)
or python-memcache (`import memcache`).  timeout_ms is the client's socket
timeout; omitted, the library's default is kept (pymemcache: none,
python-memcache: 3 s).
"""
import json
import sys


def make(lib, addr, timeout_ms, noreply):
    host, port = addr.rsplit(":", 1)
    if lib == "pymemcache":
        from pymemcache.client.base import Client
        kw = {"default_noreply": noreply}
        if timeout_ms is not None:
            kw["timeout"] = kw["connect_timeout"] = timeout_ms / 1000.0
        return PyMemcache(Client((host, int(port)), **kw))
    if lib == "python-memcache":
        import memcache
        kw = {}
        if timeout_ms is not None:
            kw["socket_timeout"] = timeout_ms / 1000.0
        return PythonMemcache(memcache.Client([addr], **kw))
    raise SystemExit("unknown library " + lib)


class PyMemcache:
    def __init__(self, c):
        self.c = c

    def set(self, key, data):
        return self.c.set(key, data)

    def get(self, key):
        return self.c.get(key)

    def mget(self, keys):
        return {k.decode() if isinstance(k, bytes) else k: v
                for k, v in self.c.get_many(keys).items()}

    def delete(self, key):
        return self.c.delete(key)

    def version(self):
        return self.c.version().decode()

    def stats(self):
        return {k.decode(): str(v) for k, v in self.c.stats().items()}

    def close(self):
        self.c.close()


class PythonMemcache:
    def __init__(self, c):
        self.c = c

    def set(self, key, data):
        return bool(self.c.set(key, data))

    def get(self, key):
        return self.c.get(key)

    def mget(self, keys):
        return self.c.get_multi(keys)

    def delete(self, key):
        return bool(self.c.delete(key))

    def version(self):
        raise RuntimeError("python-memcache has no version call")

    def stats(self):
        st = self.c.get_stats()
        if not st:
            raise RuntimeError("get_stats returned nothing")
        return {k if isinstance(k, str) else k.decode(): v if isinstance(v, str) else v.decode()
                for k, v in st[0][1].items()}

    def close(self):
        self.c.disconnect_all()


def hexof(v):
    if v is None:
        return None
    if isinstance(v, str):
        v = v.encode()
    return v.hex()


def run(c, req):
    op = req[0]
    if op == "set":
        return c.set(req[1], bytes.fromhex(req[2]))
    if op == "get":
        return hexof(c.get(req[1]))
    if op == "mget":
        return {k: hexof(v) for k, v in c.mget(req[1]).items()}
    if op == "delete":
        return c.delete(req[1])
    if op == "version":
        return c.version()
    if op == "stats":
        return c.stats()
    if op == "close":
        c.close()
        return True
    raise ValueError("unknown op %r" % op)


def main():
    lib, addr = sys.argv[1], sys.argv[2]
    opts = dict(a.split("=", 1) for a in sys.argv[3:])
    timeout_ms = int(opts["timeout_ms"]) if "timeout_ms" in opts else None
    c = make(lib, addr, timeout_ms, opts.get("noreply") == "1")
    for line in sys.stdin:
        try:
            out = {"r": run(c, json.loads(line))}
        except Exception as e:  # every failure is a reply, never a dead driver
            out = {"err": "%s: %s" % (type(e).__name__, e)}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
