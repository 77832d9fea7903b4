"""What the benchmark scripts share: the release binary, a free port, a
daemon started and ready, its memory, a Redis and a Service's proxy on
loopback, and the kubelet's way of swapping a ConfigMap's files."""
import asyncio
import http.client
import os
import socket
import subprocess
import tempfile
import threading
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BINARY = os.path.join(ROOT, "target", "release", "stormguard")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_daemon(policy, *flags, tls=None, port=None):
    """The release daemon on `port` (a free loopback port if not given),
    once it answers /healthz (over HTTPS with `tls`, an SSL context that
    trusts its certificate): (process, port)."""
    port = port or free_port()
    daemon = subprocess.Popen([BINARY, "serve", "--listen", f"127.0.0.1:{port}", "--policy", policy, *flags],
                              stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            conn = connection(port, tls, timeout=1)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return daemon, port
        except OSError:
            time.sleep(0.05)
    daemon.kill()
    raise RuntimeError("the daemon did not start")


def connection(port, tls=None, timeout=None):
    """An HTTP connection to the daemon on `port`; HTTPS to `localhost` with `tls`."""
    if tls is None:
        return http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    return http.client.HTTPSConnection("localhost", port, timeout=timeout, context=tls)


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def kubelet_layout(root, name, text):
    """`name -> ..data/name`, `..data -> ..gen_0000000/` holding `text`, as the kubelet mounts a ConfigMap."""
    os.mkdir(os.path.join(root, "..gen_0000000"))
    with open(os.path.join(root, "..gen_0000000", name), "w") as f:
        f.write(text)
    os.symlink("..gen_0000000", os.path.join(root, "..data"))
    os.symlink(f"..data/{name}", os.path.join(root, name))
    return os.path.join(root, name)


def kubelet_swap(root, name, generation, text):
    """The kubelet's update: a new timestamped directory, `..data` swapped to it, the old one removed."""
    new = f"..gen_{generation:07d}"
    os.mkdir(os.path.join(root, new))
    with open(os.path.join(root, new, name), "w") as f:
        f.write(text)
    os.symlink(new, os.path.join(root, "..data_tmp"))
    old = os.readlink(os.path.join(root, "..data"))
    os.rename(os.path.join(root, "..data_tmp"), os.path.join(root, "..data"))
    for entry in os.listdir(os.path.join(root, old)):
        os.unlink(os.path.join(root, old, entry))
    os.rmdir(os.path.join(root, old))


def start_redis(port=None):
    """A redis-server of the bench's own on `port` (a free loopback port if
    not given), empty and not saving, once it answers: (process, port)."""
    port = port or free_port()
    redis = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                              "--dir", tempfile.mkdtemp(prefix="stormguard-redis-"),
                              "--appendonly", "no"], stdout=subprocess.DEVNULL)
    for _ in range(200):
        try:
            if redis_info(port, "server"):
                return redis, port
        except OSError:
            time.sleep(0.05)
    redis.kill()
    raise RuntimeError("redis-server did not start")


def redis_info(port, section):
    """Redis's INFO `section` as a dict of its fields."""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(f"INFO {section}\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            header, _, rest = data.partition(b"\r\n")
            if header.startswith(b"$") and len(rest) >= int(header[1:]):
                break
    fields = {}
    for line in data.decode().splitlines()[1:]:
        key, sep, value = line.partition(":")
        if sep:
            fields[key] = value
    return fields


class ServiceProxy:
    """A loopback TCP proxy that deals each new connection to the next of
    `ports` that accepts it, as a Kubernetes Service does: a replica that is
    gone is skipped, and the connections it held are cut. With `delay`
    (seconds), a link that slow: each byte arrives `delay / 2` after it
    was sent, each way, as across zones or regions, and bytes in flight do
    not wait for one another."""

    def __init__(self, ports, delay=0.0):
        self.ports, self.next, self.delay = list(ports), 0, delay
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run():
            asyncio.set_event_loop(self.loop)
            self.server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
            self.port = self.server.sockets[0].getsockname()[1]
            ready.set()
            self.loop.run_forever()

        threading.Thread(target=run, daemon=True).start()
        ready.wait()

    async def _serve(self, reader, writer):
        for i in range(len(self.ports)):
            port = self.ports[(self.next + i) % len(self.ports)]
            try:
                upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                continue
            self.next = (self.next + i + 1) % len(self.ports)
            one_way = self.delay / 2
            try:
                await asyncio.gather(_pipe(reader, upstream_writer, one_way), _pipe(upstream_reader, writer, one_way))
            except asyncio.CancelledError:
                pass  # stopped: the connection is cut
            return
        writer.close()

    def stop(self):
        """Closes every connection it holds, then stops."""

        async def close_all():
            self.server.close()
            held = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in held:
                task.cancel()
            await asyncio.gather(*held, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close_all(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)


async def _pipe(reader, writer, delay=0.0):
    """Copies `reader` to `writer`, each chunk `delay` seconds after it was
    read: reading goes on meanwhile, as bytes in flight on a link do."""
    loop = asyncio.get_running_loop()
    in_flight = asyncio.Queue()

    async def deliver():
        try:
            while (item := await in_flight.get()) is not None:
                due, chunk = item
                if due > loop.time():
                    await asyncio.sleep(due - loop.time())
                writer.write(chunk)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    delivering = asyncio.ensure_future(deliver())
    try:
        while chunk := await reader.read(65536):
            in_flight.put_nowait((loop.time() + delay, chunk))
    except OSError:
        pass
    in_flight.put_nowait(None)
    await delivering
