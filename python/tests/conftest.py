"""A real crescentd per test session (two: one open, one with [auth] on), on a fresh data dir
and a free loopback port. The binaries: $CRESCENTD_BIN (and `crescent` beside it), else
$CRESCENT_BIN_DIR, else the workspace's target/debug (scripts/test.sh builds them)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

import crescent

REPO = Path(__file__).resolve().parents[2]


def _bin_dir() -> Path:
    if os.environ.get("CRESCENTD_BIN"):
        return Path(os.environ["CRESCENTD_BIN"]).parent
    if os.environ.get("CRESCENT_BIN_DIR"):
        return Path(os.environ["CRESCENT_BIN_DIR"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return target / "debug"


def binary(name: str) -> Path:
    path = _bin_dir() / name
    if name == "crescentd" and os.environ.get("CRESCENTD_BIN"):
        path = Path(os.environ["CRESCENTD_BIN"])
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is missing: build it (cargo build --bin {name}) or set CRESCENTD_BIN")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Crescentd:
    def __init__(self, extra_args: list[str] | None = None, env: dict | None = None):
        self.work = Path(tempfile.mkdtemp(prefix="crescent-pytest."))
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.log = open(self.work / "crescentd.log", "wb")
        args = [str(binary("crescentd")), "--data-dir", str(self.work / "data"),
                "--listen", self.addr, "--log", "warn", *(extra_args or [])]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})})
        self._wait_healthy()

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"crescentd exited: {(self.work / 'crescentd.log').read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("crescentd did not start listening within 30 s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.work, ignore_errors=True)


@pytest.fixture(scope="session")
def server() -> str:
    d = Crescentd()
    yield d.addr
    d.stop()


@pytest.fixture(scope="session")
def auth_server():
    """crescentd with [auth] on; yields (address, issue) where issue(role, tenant=None) mints a
    token with the `crescent token issue` CLI."""
    key = Path(tempfile.mkdtemp(prefix="crescent-pytest-key.")) / "auth.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    d = Crescentd(["--auth-secret-file", str(key)])

    def issue(role: str, tenant: str | None = None, owner: str | None = None) -> str:
        args = [str(binary("crescent"))]
        if tenant:
            args += ["--tenant", tenant]
        args += ["token", "issue", "--secret-file", str(key), "--role", role]
        if owner:
            args += ["--owner", owner]
        return subprocess.run(args, check=True, capture_output=True, text=True).stdout.strip()

    yield d.addr, issue
    d.stop()
    shutil.rmtree(key.parent, ignore_errors=True)


@pytest.fixture
def prefix() -> str:
    """A key prefix of this test's own."""
    return f"t{uuid.uuid4().hex[:12]}/"


@pytest.fixture
def store(server):
    """A client that is also a storage owner (a 64 MiB segment), closed after the test."""
    s = crescent.Store(server, segment_size=64 << 20)
    yield s
    s.close()
