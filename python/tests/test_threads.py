"""The GIL is released while a call waits on the network, and one Store serves many threads."""

import subprocess
import sys
import threading
import time

import crescent


SILENT_SERVER = """
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(16)
print(s.getsockname()[1], flush=True)
held = []
while True:
    held.append(s.accept())
"""


def test_a_blocked_call_lets_other_threads_run(prefix):
    # A server (another process) that accepts and never answers: a call to it waits until
    # the server goes away. Were the GIL held meanwhile, this thread could not run at all.
    silent = subprocess.Popen([sys.executable, "-c", SILENT_SERVER], stdout=subprocess.PIPE,
                              text=True)
    try:
        addr = "127.0.0.1:%s" % silent.stdout.readline().strip()
        store = crescent.Store(addr, failover_timeout=1.0)
        took = {}

        def blocked():
            t = time.monotonic()
            try:
                store.get(prefix + "k")
            except crescent.CrescentError as e:
                took["code"] = e.code
            took["s"] = time.monotonic() - t

        worker = threading.Thread(target=blocked)
        worker.start()
        time.sleep(0.3)
        t, spins = time.monotonic(), 0
        while time.monotonic() - t < 0.3:
            spins += 1
        assert worker.is_alive(), f"the call returned early; nothing was blocked: {took}"
        assert spins > 1000
    finally:
        silent.kill()
        silent.wait()
    worker.join(timeout=60)
    assert not worker.is_alive()
    assert took["s"] >= 0.6 and took["code"] in ("UNAVAILABLE", "NO_LEADER"), took


def test_threads_share_one_store(store, prefix):
    errors = []

    def work(t):
        try:
            for i in range(100):
                k = f"{prefix}{t}/{i}"
                v = f"{t}:{i}".encode() * 50
                store.put(k, v)
                assert store.get(k) == v
            keys = [f"{prefix}{t}/{i}" for i in range(100)]
            assert all(store.batch_exists(keys))
        except Exception as e:  # reported below, with the thread's number
            errors.append((t, e))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert len(store.list(prefix)) == 800


def test_a_segment_is_served_between_calls(server, store, prefix):
    # The value lands on this process's own segment (local first); another process reads it
    # while this one makes no call: the extension's driver thread serves the transfer.
    value = bytes(range(256)) * 64
    store.put(prefix + "mine", value)
    reader = ("import crescent, sys; "
              "sys.stdout.buffer.write(crescent.Store(sys.argv[1]).get(sys.argv[2]))")
    out = subprocess.run([sys.executable, "-c", reader, server, prefix + "mine"],
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == value
    # The reader's store settled its lease release when it was collected: the key is free.
    store.remove(prefix + "mine")
