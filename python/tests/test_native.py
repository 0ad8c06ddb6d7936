"""The native API against a real crescentd: bytes in, bytes out, errors with stable codes."""

from array import array

import pytest

import crescent


def test_put_get_exists_size_remove(store, prefix):
    k = prefix + "a"
    assert not store.exists(k)
    store.put(k, b"hello")
    assert store.get(k) == b"hello"
    assert isinstance(store.get(k), bytes)
    assert store.exists(k) and store.exist(k)
    assert store.get_size(k) == 5
    store.remove(k)
    assert not store.exists(k)


def test_any_contiguous_buffer_is_a_value(store, prefix):
    store.put(prefix + "ba", bytearray(b"from bytearray"))
    store.put(prefix + "mv", memoryview(b"xxfrom memoryview")[2:])
    doubles = array("d", [1.5, 2.5, 3.5])
    store.put(prefix + "arr", doubles)
    assert store.get(prefix + "ba") == b"from bytearray"
    assert store.get(prefix + "mv") == b"from memoryview"
    assert store.get(prefix + "arr") == doubles.tobytes()


def test_a_large_value_round_trips(store, prefix):
    value = bytes(range(256)) * (3 << 12)  # 3 MiB
    store.put(prefix + "big", value)
    assert store.get(prefix + "big") == value


def test_a_missing_key_is_not_found(store, prefix):
    with pytest.raises(crescent.NotFoundError) as e:
        store.get(prefix + "missing")
    assert e.value.code == "NOT_FOUND"
    assert isinstance(e.value, crescent.CrescentError)
    with pytest.raises(crescent.NotFoundError):
        store.get_size(prefix + "missing")
    with pytest.raises(crescent.NotFoundError):
        store.remove(prefix + "missing")


def test_other_bytes_under_a_key_conflict_unless_upsert(store, prefix):
    k = prefix + "c"
    store.put(k, b"one")
    store.put(k, b"one")  # the same bytes again: idempotent
    with pytest.raises(crescent.ConflictError) as e:
        store.put(k, b"two")
    assert e.value.code == "CONFLICT"
    assert store.get(k) == b"one"
    store.put(k, b"two", upsert=True)
    assert store.get(k) == b"two"


def test_bad_arguments_are_invalid_argument(store, prefix):
    with pytest.raises(crescent.InvalidArgumentError) as e:
        store.put("", b"x")
    assert e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(crescent.InvalidArgumentError):
        store.put(prefix + "r", b"x", replicas=0)
    with pytest.raises(crescent.InvalidArgumentError):
        crescent.Store("127.0.0.1:1", etcd="http://127.0.0.1:2")  # etcd without a cluster
    with pytest.raises(TypeError):
        store.put(prefix + "s", "a str is not bytes")


def test_an_unreachable_server_is_unavailable(prefix):
    dead = crescent.Store("127.0.0.1:1", failover_timeout=0.5)
    with pytest.raises(crescent.UnavailableError) as e:
        dead.get(prefix + "k")
    assert e.value.code in ("UNAVAILABLE", "NO_LEADER")


def test_list_and_remove_prefix(store, prefix):
    for i in range(5):
        store.put(f"{prefix}k{i}", b"v" * i or b"-")
    listed = store.list(prefix)
    assert [k for k, _, _ in listed] == [f"{prefix}k{i}" for i in range(5)]
    assert listed[3] == (f"{prefix}k3", 3, True)
    assert store.remove_prefix(prefix) == (5, 0)
    assert store.list(prefix) == []


def test_a_plain_client_works_without_a_segment(server, prefix):
    s = crescent.Store(server)
    assert s.segment is None
    s.put(prefix + "p", b"no segment of mine")
    assert s.get(prefix + "p") == b"no segment of mine"
    s.close()


def test_close_is_idempotent_and_a_context_manager(server, prefix):
    with crescent.Store(server, segment_size=16 << 20) as s:
        assert s.segment
        s.put(prefix + "x", b"1")
    s.close()
    assert "Store(" in repr(s)
