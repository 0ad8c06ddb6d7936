"""Registered buffers: put_from / get_into move bytes straight out of and into Python memory."""

import ctypes
from array import array

import pytest

import crescent


def test_put_from_and_get_into_a_bytearray(store, prefix):
    memory = bytearray(1 << 20)
    buf = store.register_buffer(memory)
    assert len(buf) == 1 << 20
    assert buf.address == ctypes.addressof((ctypes.c_char * len(memory)).from_buffer(memory))
    memory[0:8] = b"zerocopy"
    store.put_from(prefix + "z", buf, 0, 8)
    assert store.get(prefix + "z") == b"zerocopy"
    assert store.get_into(prefix + "z", buf, 4096) == 8
    assert memory[4096:4104] == b"zerocopy"
    store.unregister_buffer(buf)
    with pytest.raises(crescent.InvalidArgumentError):
        store.get_into(prefix + "z", buf, 0)


def test_a_typed_array_is_registered_as_its_bytes(store, prefix):
    src = array("f", [float(i) for i in range(1024)])
    dst = array("f", [0.0] * 1024)
    b_src, b_dst = store.register_buffer(src), store.register_buffer(dst)
    store.put_from(prefix + "floats", b_src)  # the whole buffer
    assert store.get_into(prefix + "floats", b_dst) == 4096
    assert dst == src


def test_ranges_outside_the_buffer_and_read_only_memory_are_refused(store, prefix):
    buf = store.register_buffer(bytearray(64))
    with pytest.raises(crescent.InvalidArgumentError):
        store.put_from(prefix + "x", buf, 60, 8)
    store.put(prefix + "big", b"x" * 128)
    with pytest.raises(crescent.InvalidArgumentError):
        store.get_into(prefix + "big", buf, 0)  # 128 bytes do not fit in 64
    with pytest.raises(crescent.InvalidArgumentError):
        store.register_buffer(b"bytes are read-only")


def test_batch_put_from_and_get_into(store, prefix):
    memory = bytearray(b"".join(bytes([i]) * 100 for i in range(10)) + bytes(1000))
    buf = store.register_buffer(memory)
    keys = [f"{prefix}{i}" for i in range(10)]
    results = store.batch_put_from(keys, [buf] * 10, [i * 100 for i in range(10)], [100] * 10)
    assert results == [None] * 10
    got = store.batch_get_into(keys + [prefix + "missing"], [buf] * 11,
                               [1000 + i * 10 for i in range(11)])
    assert got[:10] == [100] * 10
    assert isinstance(got[10], crescent.NotFoundError)
    # Each value landed at its offset (later ones overwrite the tails of earlier ones).
    assert memory[1090:1190] == bytes([9]) * 100
