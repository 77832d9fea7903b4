"""What the benchmark scripts share: the release binary, a free port, a
daemon started and ready, its memory, and the kubelet's way of swapping a
ConfigMap's files."""
import http.client
import os
import socket
import subprocess
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BINARY = os.path.join(ROOT, "target", "release", "stormguard")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_daemon(policy, *flags, tls=None):
    """The release daemon on a free loopback port, once it answers /healthz
    (over HTTPS with `tls`, an SSL context that trusts its certificate):
    (process, port)."""
    port = free_port()
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
