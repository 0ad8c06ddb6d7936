"""crescent.mooncake.MooncakeDistributedStore: Mooncake's method names, arguments and return
codes (as the mooncake-transfer-engine 0.3.13 wheel answers them, docs/python.md), on crescentd."""

import ctypes
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from crescent import mooncake
from crescent.mooncake import MooncakeDistributedStore

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def mc(server):
    s = MooncakeDistributedStore()
    # Mooncake's seven setup arguments; master_server_addr names crescentd.
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 64 << 20, 16 << 20, "tcp", "", server) == 0
    yield s
    assert s.close() == 0


def test_bytes_api_and_codes(mc, prefix):
    k = prefix + "a"
    assert mc.put(k, b"hello") == 0
    assert mc.put(k, b"hello") == 0
    assert mc.put(k, b"other") == 0  # an existing key: 0, the first value stays (as Mooncake)
    assert mc.get(k) == b"hello"
    assert mc.get(prefix + "missing") == b""
    assert mc.get_size(k) == 5
    assert mc.get_size(prefix + "missing") == mooncake.OBJECT_NOT_FOUND == -704
    assert mc.is_exist(k) == 1 and mc.is_exist(prefix + "missing") == 0
    assert mc.batch_is_exist([k, prefix + "missing"]) == [1, 0]
    assert mc.put(prefix + "empty", b"") == mooncake.INVALID_PARAMS == -600
    assert mc.put("", b"x") == -600
    assert mc.remove(prefix + "missing") == -704
    assert mc.remove(k) == 0
    assert mc.remove(k) == -704
    assert mc.upsert(k, b"v1") == 0 and mc.upsert(k, b"v2") == 0
    assert mc.get(k) == b"v2"
    config = mooncake.ReplicateConfig()
    config.replica_num = 2
    assert mc.put(prefix + "two", b"twice", config) == 0
    assert mc.get(prefix + "two") == b"twice"
    assert mc.get_hostname() == "127.0.0.1"
    assert mc.health_check() == 0


def test_batches(mc, prefix):
    keys = [f"{prefix}b{i}" for i in range(1100)]
    values = [f"value {i}".encode() for i in range(1100)]
    assert mc.put_batch(keys, values) == 0
    got = mc.get_batch(keys + [prefix + "missing"])
    assert got[:-1] == values and got[-1] == b""
    assert mc.batch_is_exist(keys[:3] + [prefix + "missing"]) == [1, 1, 1, 0]
    assert mc.batch_remove([keys[0], prefix + "missing"]) == [0, -704]
    assert mc.put_batch(keys[:2], values[:1]) == -600


def test_registered_buffers(mc, prefix):
    raw = ctypes.create_string_buffer(1 << 20)
    addr = ctypes.addressof(raw)
    assert mc.register_buffer(addr, 1 << 20) == 0
    ctypes.memmove(addr, b"zerocopy", 8)
    assert mc.put_from(prefix + "z", addr, 8) == 0
    assert mc.get_into(prefix + "z", addr + 100, 1000) == 8
    assert raw.raw[100:108] == b"zerocopy"
    assert mc.get_into(prefix + "missing", addr, 1000) == -704
    assert mc.get_into(prefix + "z", addr + 200, 4) == -600  # 8 bytes do not fit in 4
    assert raw.raw[200:204] == b"\0" * 4  # and nothing was written
    keys = [prefix + "p1", prefix + "p2"]
    assert mc.batch_put_from(keys, [addr, addr + 4], [4, 4]) == [0, 0]
    assert mc.batch_get_into(keys + [prefix + "missing", prefix + "z"],
                             [addr + 300, addr + 310, addr + 320, addr + 330],
                             [8, 8, 8, 4]) == [4, 4, -704, -600]
    assert raw.raw[300:304] == b"zero" and raw.raw[310:314] == b"copy"
    assert mc.unregister_buffer(addr) == 0
    assert mc.unregister_buffer(addr) == -600


def test_remove_by_regex_and_remove_all(server, prefix):
    mc = MooncakeDistributedStore()
    assert mc.setup({"local_hostname": "127.0.0.1", "master_server_addr": server,
                     "global_segment_size": 16 << 20, "tenant_id": "mc-" + prefix[1:9]}) == 0
    for k in ("x1", "x2", "y1"):
        assert mc.put(prefix + k, b"v") == 0
    assert mc.remove_by_regex("^" + re.escape(prefix) + "x") == 2
    assert mc.is_exist(prefix + "y1") == 1
    assert mc.remove_all() == 1  # this tenant holds only y1 now
    assert mc.is_exist(prefix + "y1") == 0
    assert mc.close() == 0 and mc.close() == 0


def test_failures_are_negative_codes(prefix):
    mc = MooncakeDistributedStore()
    assert mc.get(prefix + "k") == b""  # not set up: no exception
    assert mc.put(prefix + "k", b"v") < 0
    assert mc.health_check() == 1
    # A segment needs crescentd: with nothing listening, setup fails with RPC_FAIL.
    assert mc.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 0, "tcp", "", "127.0.0.1:1") == -900


def test_every_wire_code_has_a_mooncake_code():
    source = (REPO / "error-class" / "src" / "code.rs").read_text()
    wire_codes = set(re.findall(r'ErrorCode::\w+ => "([A-Z_]+)"', source))
    assert len(wire_codes) >= 19
    assert wire_codes <= set(mooncake.CODE_MAP), wire_codes - set(mooncake.CODE_MAP)
    assert all(v < 0 for v in mooncake.CODE_MAP.values())


def test_the_reference_benchmark_script_runs_with_only_its_import_changed(server, tmp_path):
    # shared/anchors/mooncake_bench.py, written for Mooncake, beside the repository.
    anchor = REPO.parent / "shared" / "anchors" / "mooncake_bench.py"
    if not anchor.exists():
        pytest.skip(f"{anchor} is not here")
    original = anchor.read_text()
    old = "from mooncake.store import MooncakeDistributedStore"
    assert old in original
    script = tmp_path / "bench.py"
    script.write_text(original.replace(old, "from crescent.mooncake import MooncakeDistributedStore"))
    env = {**os.environ, "MOONCAKE_MASTER": server}
    out = subprocess.run([sys.executable, str(script), "256", "1024"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert re.match(r"mooncake n=256 size=1024: put \d+/s get \d+/s put_batch \d+/s "
                    r"get_batch \d+/s exist \d+/s", out.stdout), out.stdout
