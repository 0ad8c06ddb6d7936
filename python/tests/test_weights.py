"""Managed weight revisions from Python: safetensors files published, loaded byte-identical."""

import json
import struct

import pytest

import crescent


def safetensors(tensors: dict[str, list[float]]) -> bytes:
    """A safetensors file of F32 vectors (the format: u64 LE header length, JSON header,
    data)."""
    header, data = {}, b""
    for name, values in tensors.items():
        raw = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": [len(values)],
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def test_publish_and_load_a_revision(server, prefix):
    store = crescent.Store(server, tenant="wtenant")
    files = {
        "model-00001.safetensors": safetensors({"a": [1.0, 2.0, 3.0], "b": [4.0]}),
        "model-00002.safetensors": safetensors({"c": [5.0] * 100}),
    }
    resource = prefix.rstrip("/")
    meta = store.weights_publish("ns", resource, "r1", files)
    assert meta["availability"] == "READY"
    assert meta["id"]["tenant"] == "wtenant" and meta["id"]["generation"] == 1
    assert store.weights_load("ns", resource, "r1") == files
    assert store.weights_metadata("ns", resource, "r1")["manifest_key"] == meta["manifest_key"]
    # Another tenant does not see it.
    with pytest.raises(crescent.NotFoundError):
        crescent.Store(server).weights_metadata("ns", resource, "r1")


def test_a_file_that_is_not_safetensors_is_refused(server, prefix):
    store = crescent.Store(server)
    with pytest.raises(crescent.InvalidArgumentError):
        store.weights_publish("ns", prefix.rstrip("/"), "bad", {"x.safetensors": b"not one"})
    with pytest.raises(crescent.InvalidArgumentError):
        store.weights_publish("ns", prefix.rstrip("/"), "r", {}, residency="lukewarm")
