#!/usr/bin/env python3
"""What clients that stop reading make the gateway hold: a measurement, not a test.

Starts the gateway binary with the fixture's `big` tool (a text of a given size) as its backend:
a stdio child (the `legacy-server` subcommand of a gateway binary) or a Streamable HTTP server.
It reads `--warm` calls in full (the backend's sessions exist before the baseline), then opens
N client connections with a small receive buffer, sends one `tools/call` of `big` on each and
never reads. Once the gateway's metrics count every reply made and its resident size has
settled (the plateau), the clients close. It prints the gateway's VmRSS, RssAnon and VmHWM
(/proc/PID/status) before, at the plateau and after, the growth per client, what the kernel
holds for the gateway's sockets (`ss -tm`: the Send-Q, bytes queued to send, and skmem `w`, what
the socket is charged for them) and the machine's TCP memory (/proc/net/sockstat). With
`--hold`, the clients stay stalled that much longer and the sockets are counted again. The
backend runs in its own process: its memory is not in the gateway's figures.

    cargo build --bin mrtr-gateway
    python3 benches/stalled_clients.py --gateway target/debug/mrtr-gateway
    python3 benches/stalled_clients.py --gateway OLD/mrtr-gateway --backend NEW/mrtr-gateway

`--backend` is the binary whose `legacy-server` runs the backend (default: the gateway's own),
for a gateway built before the fixture had `big`. Environment variables (MIMALLOC_*) pass
through to the gateway. Linux only (/proc, ss). benches/FINDINGS.md (e) has the figures.
"""

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

MODERN = "2026-07-28"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status(pid):
    """VmRSS, RssAnon and VmHWM (the peak VmRSS so far) of a process, in bytes."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
    return out


def tcp_mem():
    """What every TCP socket of the machine is charged for, in bytes (/proc/net/sockstat)."""
    with open("/proc/net/sockstat") as f:
        for line in f:
            if line.startswith("TCP:"):
                return int(line.split("mem ")[1].split()[0]) * os.sysconf("SC_PAGE_SIZE")
    return 0


def children(pid):
    """The processes any thread of `pid` started."""
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(p) for p in f.read().split()]
        except OSError:
            pass
    return out


def kernel_send(port, state="established"):
    """The gateway's client sockets with bytes queued to send: how many, the bytes queued (the
    Send-Q: sent but not acknowledged, or not sent yet) and what they are charged for them
    (skmem `w`, with the kernel's buffer overhead)."""
    out = subprocess.run(
        ["ss", "-tmnH", "state", state, f"( sport = :{port} )"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    sockets, queued, charged = 0, 0, 0
    for m in re.finditer(r"^\s*\d+\s+(\d+)\s.*?skmem:\(([^)]*)\)", out, re.M | re.S):
        fields = dict(re.match(r"([a-z]+)(\d+)", f).groups() for f in m.group(2).split(","))
        if int(m.group(1)) > 0:
            sockets += 1
        queued += int(m.group(1))
        charged += int(fields.get("w", 0))
    return {"sockets_with_queue": sockets, "queued_bytes": queued, "charged_bytes": charged}


def replies_made(admin):
    """tools/call replies the gateway has made, whatever their outcome (its metrics)."""
    try:
        text = urllib.request.urlopen(f"http://{admin}/metrics", timeout=5).read().decode()
    except OSError:
        return 0
    total = 0.0
    for line in text.splitlines():
        if line.startswith("mrtr_downstream_requests_total{") and 'method="tools/call"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def request(port, i, size, notes=0):
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": i,
            "method": "tools/call",
            "params": {
                "name": "big",
                "arguments": {"bytes": size, "notes": notes},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": MODERN,
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        }
    ).encode()
    head = (
        f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
        f"accept: application/json, text/event-stream\r\nmcp-protocol-version: {MODERN}\r\n"
        f"mcp-method: tools/call\r\nmcp-name: big\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


def wait_ready(admin, gw):
    for _ in range(300):
        if gw.poll() is not None:
            sys.exit("the gateway exited; see its log")
        try:
            urllib.request.urlopen(f"http://{admin}/readyz", timeout=2)
            return
        except OSError:
            time.sleep(0.1)
    sys.exit("the gateway was not ready within 30 s")


def read_reply(s):
    got = b""
    while True:
        head, sep, body = got.partition(b"\r\n\r\n")
        length = re.search(rb"(?i)content-length: *(\d+)", head)
        if sep and length and len(body) >= int(length.group(1)):
            return body
        chunk = s.recv(1 << 16)
        if not chunk:
            sys.exit("the warm-up call's connection closed early")
        got += chunk


def settle(pid, seconds, step=0.5, within=1 << 20):
    """Samples VmRSS until it moved less than `within` over `seconds`; the last sample."""
    samples = [status(pid)]
    while True:
        time.sleep(step)
        samples.append(status(pid))
        window = samples[-int(seconds / step) - 1 :]
        if len(window) > seconds / step:
            rss = [s["VmRSS"] for s in window]
            if max(rss) - min(rss) < within:
                return samples[-1]


def backend_config(transport, binary, port):
    if transport == "stdio":
        return f'command = {json.dumps(binary)}\nargs = ["legacy-server"]'
    return f'kind = "http"\nurl = "http://127.0.0.1:{port}/mcp"'


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gateway", required=True, help="the mrtr-gateway binary to measure")
    p.add_argument("--backend", help="binary whose `legacy-server` is the backend")
    p.add_argument("--clients", type=int, default=200)
    p.add_argument("--bytes", type=int, default=900_000, help="length of the `big` text")
    p.add_argument(
        "--rcvbuf", type=int, default=4096, help="clients' SO_RCVBUF (0: the kernel's default)"
    )
    p.add_argument(
        "--transport",
        choices=["stdio", "http", "http-json"],
        default="stdio",
        help="the backend: a stdio child, or a Streamable HTTP server answering with an event "
        "stream (http) or a JSON body (http-json)",
    )
    p.add_argument("--write-timeout", default="60s", help="server.write_timeout")
    p.add_argument("--workers", type=int, help="server.worker_threads (default: one per CPU)")
    p.add_argument(
        "--hold",
        type=float,
        default=0,
        help="seconds the clients stay stalled after the plateau, then the sockets are counted "
        "again (an idle connection is closed after server.header_timeout, 30 s)",
    )
    p.add_argument(
        "--notes",
        type=int,
        default=0,
        help="log messages before the result: the reply is then an event stream",
    )
    p.add_argument("--warm", type=int, default=16, help="calls read in full before the baseline")
    p.add_argument(
        "--extra",
        default="",
        help="more [limits] lines, e.g. 'max_line_bytes = 16777216' (\\n between lines)",
    )
    args = p.parse_args()

    port, admin_port, server_port = free_port(), free_port(), free_port()
    admin = f"127.0.0.1:{admin_port}"
    backend = os.path.abspath(args.backend or args.gateway)
    limits_extra = args.extra.replace("\\n", "\n")
    config = f"""
[server]
listen = "127.0.0.1:{port}"
max_connections = 1024
max_connections_per_address = 1024
write_timeout = "{args.write_timeout}"
{f"worker_threads = {args.workers}" if args.workers else ""}
[admin]
listen = "{admin}"
[limits]
queue_wait = "60s"
{limits_extra}
[[backend]]
name = "fixture"
{backend_config(args.transport, backend, server_port)}
"""
    work = tempfile.mkdtemp(prefix="stalled-")
    path = os.path.join(work, "gateway.toml")
    with open(path, "w") as f:
        f.write(config)
    log = open(os.path.join(work, "gateway.log"), "w")
    env = dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "warn"))
    server = None
    if args.transport != "stdio":
        flags = ["--json-response"] if args.transport == "http-json" else []
        server = subprocess.Popen(
            [backend, "legacy-server", "--http", f"127.0.0.1:{server_port}", *flags],
            stdout=log,
            stderr=log,
        )
        time.sleep(1)
    gw = subprocess.Popen(
        [args.gateway, "serve", "--config", path], stdout=log, stderr=log, env=env
    )
    clients = []
    try:
        wait_ready(admin, gw)
        # Calls first, as many at once as a backend has sessions (pool_max, 16 by default),
        # read to the end: the backend's sessions, and their read buffers (each keeps the room
        # of its longest message), exist before the baseline.
        warm = [socket.create_connection(("127.0.0.1", port)) for _ in range(args.warm)]
        for i, s in enumerate(warm):
            s.sendall(request(port, -1 - i, args.bytes))
        for s in warm:
            read_reply(s)
            s.close()
        before = settle(gw.pid, 2)
        before_tcp = tcp_mem()

        for i in range(args.clients):
            s = socket.socket()
            if args.rcvbuf:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, args.rcvbuf)
            s.connect(("127.0.0.1", port))
            s.sendall(request(port, i + 1, args.bytes, args.notes))
            clients.append(s)
        deadline = time.time() + 100
        while replies_made(admin) < args.clients + args.warm:
            if time.time() > deadline:
                sys.exit("the gateway did not make every reply within 100 s")
            time.sleep(0.2)
        plateau = settle(gw.pid, 3)
        plateau_tcp = tcp_mem()
        kernel = kernel_send(port)
        backend_rss = {c: status(c)["VmRSS"] for c in children(gw.pid)}
        held = None
        if args.hold:
            time.sleep(args.hold)
            held = {
                "status": status(gw.pid),
                "tcp_mem": tcp_mem(),
                "established": kernel_send(port),
                "fin_wait_1": kernel_send(port, "fin-wait-1"),
            }

        for s in clients:
            s.close()
        clients = []
        deadline = time.time() + 30
        while kernel_send(port)["sockets_with_queue"] and time.time() < deadline:
            time.sleep(0.2)
        after = settle(gw.pid, 3)
        after_tcp = tcp_mem()
    finally:
        for s in clients:
            s.close()
        gw.terminate()
        gw.wait(timeout=30)
        if server:
            server.terminate()
            server.wait(timeout=30)

    n, mib = args.clients, 1 << 20
    result = {
        "gateway": args.gateway,
        "clients": n,
        "reply_text_bytes": args.bytes,
        "before": before,
        "plateau": plateau,
        "after": after,
        "per_client_rss": (plateau["VmRSS"] - before["VmRSS"]) // n,
        "per_client_anon": (plateau["RssAnon"] - before["RssAnon"]) // n,
        "kernel": kernel,
        "tcp_mem": [before_tcp, plateau_tcp, after_tcp],
        "backend_rss": backend_rss,
        "held": held,
    }
    print(json.dumps(result))
    if held:
        print(f"after {args.hold} s more: {json.dumps(held)}")

    def three(key):
        return " -> ".join(f"{x[key] / mib:.1f}" for x in (before, plateau, after))

    print(
        f"{n} clients x {args.bytes} B, before -> plateau -> after (MiB): VmRSS {three('VmRSS')}, "
        f"RssAnon {three('RssAnon')}, peak {plateau['VmHWM'] / mib:.1f}; per client "
        f"{result['per_client_rss'] / 1024:.0f} KiB (anon {result['per_client_anon'] / 1024:.0f} "
        f"KiB). Kernel: {kernel['queued_bytes'] / mib:.1f} MiB queued to send on "
        f"{kernel['sockets_with_queue']} sockets, charged {kernel['charged_bytes'] / mib:.1f} MiB "
        f"({kernel['charged_bytes'] / n / 1024:.0f} KiB per client); all TCP memory "
        + " -> ".join(f"{x / mib:.1f}" for x in result["tcp_mem"])
    )


if __name__ == "__main__":
    main()
