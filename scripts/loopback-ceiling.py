#!/usr/bin/env python3
"""The loopback TCP ceiling of this host, for reading the remote restore figures.

A forked sender `sendall`s one 4 MiB buffer 300 times; the receiver `recv_into`s a reused
4 MiB buffer: no file, no checksum, no protocol. Prints the time per 4 MiB and the
throughput. docs/performance.md ("Why the remote restore stays below 0.5 here") compares the
remote restore with it.
"""
import os
import socket
import time

SIZE = 4 << 20
REPS = 300

srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
port = srv.getsockname()[1]
pid = os.fork()
if pid == 0:
    conn = socket.create_connection(("127.0.0.1", port))
    data = os.urandom(SIZE)
    for _ in range(REPS):
        conn.sendall(data)
    conn.close()
    os._exit(0)
conn, _ = srv.accept()
buf = bytearray(SIZE)
view = memoryview(buf)
started = time.perf_counter()
for _ in range(REPS):
    got = 0
    while got < SIZE:
        n = conn.recv_into(view[got:], SIZE - got)
        if n == 0:
            raise SystemExit("the sender closed early")
        got += n
elapsed = time.perf_counter() - started
os.waitpid(pid, 0)
print("loopback TCP, 4 MiB messages: %.0f us each, %.2f GiB/s"
      % (elapsed / REPS * 1e6, SIZE * REPS / elapsed / (1 << 30)))
