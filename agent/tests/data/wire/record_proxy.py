#!/usr/bin/env python3
"""A recording TCP proxy: writes what one side of each connection sends and receives
as a `profiler wire capture v1` file (the format read by `profiler::wire::capture`).

Usage:
    record_proxy.py LISTEN_PORT UPSTREAM_PORT PROTOCOL TARGET_SIDE OUT_FILE

PROTOCOL is `pg` or `http`; TARGET_SIDE is `client` (the profiled process is the client,
as an app talking to PostgreSQL: what the client sends is `tx`) or `server` (the profiled
process is the server, as an HTTP service: what the client sends is `rx`).

Every successful recv() of the proxy becomes one line (one "syscall"): the proxy reads
with a 64 KiB buffer, so a line holds what the kernel had ready at that moment, as a
read of the profiled process would. Bytes are recorded in full (total_len = head length,
empty tail); tests apply the capture bound themselves. The socket id is the proxy's
connection number (1, 2, ...); pid and tid are 0 (the proxy is not the profiled process).
Timestamps are time.monotonic_ns() at the return of recv(). Stop with SIGINT/SIGTERM:
the file is written (sorted by timestamp) on exit.
"""
import signal
import socket
import sys
import threading
import time

records = []
lock = threading.Lock()


def pump(src, dst, conn_id, direction, proto):
    try:
        while True:
            data = src.recv(65536)
            ts = time.monotonic_ns()
            if not data:
                break
            with lock:
                records.append((ts, conn_id, proto, direction, data))
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def main():
    listen_port, upstream_port, proto, side, out = sys.argv[1:6]
    client_dir, server_dir = ("tx", "rx") if side == "client" else ("rx", "tx")
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", int(listen_port)))
    ls.listen(64)

    def finish(*_):
        with lock:
            recs = sorted(records, key=lambda r: r[0])
        with open(out, "w") as f:
            f.write("# profiler wire capture v1\n")
            f.write(f"# recorded by record_proxy.py, protocol {proto}, target side {side}\n")
            f.write("# ts_ns pid tid socket protocol direction total_len head_hex tail_hex\n")
            for ts, cid, p, d, data in recs:
                f.write(f"{ts} 0 0 {cid} {p} {d} {len(data)} {data.hex()} -\n")
        sys.exit(0)

    signal.signal(signal.SIGINT, finish)
    signal.signal(signal.SIGTERM, finish)
    n = 0
    while True:
        c, _ = ls.accept()
        n += 1
        u = socket.create_connection(("127.0.0.1", int(upstream_port)))
        for s in (c, u):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=pump, args=(c, u, n, client_dir, proto), daemon=True).start()
        threading.Thread(target=pump, args=(u, c, n, server_dir, proto), daemon=True).start()


if __name__ == "__main__":
    main()
