"""``python -m crescent.bench``: the five figures of ``crescent bench`` measured from Python.

The same shape as the reference store's benchmark (shared/anchors/mooncake_bench.py) and
``crescent bench``: one client that is itself the only storage owner of its data (a segment of
its own), single operations issued one at a time, batches of 128 keys, ops/s over N keys of
SIZE-byte values. ``--api mooncake`` runs the figures through
``crescent.mooncake.MooncakeDistributedStore`` (the reference script's own calls), ``--api
native`` (the default) through ``crescent.Store``. The keys are removed and the segment
unmounted afterwards.

    python -m crescent.bench [--server HOST:PORT] [--n N] [--size BYTES] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid

from . import Store
from .mooncake import MooncakeDistributedStore


def _segment_size(n: int, size: int) -> int:
    needed = 2 * n * size
    return needed + needed // 4 + (64 << 20)


def _native(server: str, n: int, size: int, batch: int, prefix: str) -> dict[str, float]:
    s = Store(server, segment_size=_segment_size(n, size), resident=True)
    val = os.urandom(size)
    keys = [f"{prefix}k{i}" for i in range(n)]
    bkeys = [f"{prefix}b{i}" for i in range(n)]
    out: dict[str, float] = {}
    try:
        t = time.perf_counter()
        for k in keys:
            s.put(k, val)
        out["put"] = n / (time.perf_counter() - t)
        t = time.perf_counter()
        for k in keys:
            if len(s.get(k)) != size:
                raise RuntimeError(f"get {k}: wrong size")
        out["get"] = n / (time.perf_counter() - t)
        t = time.perf_counter()
        for i in range(0, n, batch):
            chunk = bkeys[i : i + batch]
            if any(r is not None for r in s.put_batch(chunk, [val] * len(chunk))):
                raise RuntimeError("put_batch: an item failed")
        out["put_batch"] = n / (time.perf_counter() - t)
        t = time.perf_counter()
        for i in range(0, n, batch):
            if any(not isinstance(v, bytes) for v in s.get_batch(bkeys[i : i + batch])):
                raise RuntimeError("get_batch: an item failed")
        out["get_batch"] = n / (time.perf_counter() - t)
        t = time.perf_counter()
        for k in keys:
            if not s.exists(k):
                raise RuntimeError(f"{k} reported absent")
        out["exist"] = n / (time.perf_counter() - t)
    finally:
        s.remove_prefix(prefix)
        s.close()
    return out


def _mooncake(server: str, n: int, size: int, batch: int, prefix: str) -> dict[str, float]:
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", _segment_size(n, size), 512 << 20, "tcp", "",
                 server)
    if rc != 0:
        raise RuntimeError(f"setup answered {rc}")
    val = os.urandom(size)
    keys = [f"{prefix}k{i}" for i in range(n)]
    out: dict[str, float] = {}
    try:
        t = time.perf_counter()
        for k in keys:
            assert s.put(k, val) == 0
        out["put"] = n / (time.perf_counter() - t)
        t = time.perf_counter()
        for k in keys:
            assert len(s.get(k)) == size
        out["get"] = n / (time.perf_counter() - t)
        t = time.perf_counter()
        for i in range(0, n, batch):
            assert s.put_batch([f"{prefix}b{j}" for j in range(i, i + batch)], [val] * batch) == 0
        out["put_batch"] = n / (time.perf_counter() - t)
        t = time.perf_counter()
        for i in range(0, n, batch):
            s.get_batch([f"{prefix}b{j}" for j in range(i, i + batch)])
        out["get_batch"] = n / (time.perf_counter() - t)
        t = time.perf_counter()
        for k in keys:
            s.is_exist(k)
        out["exist"] = n / (time.perf_counter() - t)
    finally:
        s.remove_by_regex("^" + prefix)
        s.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m crescent.bench", description=__doc__.split("\n")[0])
    p.add_argument("--server", default=os.environ.get("CRESCENT_SERVER", "127.0.0.1:7480"))
    p.add_argument("--n", type=int, default=20000)
    p.add_argument("--size", type=int, default=4096)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--api", choices=["native", "mooncake"], default="native")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.n < 1 or a.size < 1 or a.batch < 1:
        p.error("--n, --size and --batch must be at least 1")
    prefix = f"pybench-{uuid.uuid4().hex[:8]}/"
    run = _native if a.api == "native" else _mooncake
    figures = run(a.server, a.n, a.size, a.batch, prefix)
    if a.json:
        print(json.dumps({**{k: round(v, 1) for k, v in figures.items()},
                          "n": a.n, "size": a.size, "api": a.api}))
    else:
        text = " ".join(f"{k} {v:.0f}/s" for k, v in figures.items())
        print(f"crescent-py({a.api}) n={a.n} size={a.size}: {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
