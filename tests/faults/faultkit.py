"""Fixtures for the fault tests: a private temporary directory, small filesystems made for the test (tmpfs, so
root is needed; the simulated tests run everywhere), and object stores that fail or stop answering.

Test modules import the fixtures by name (no conftest.py here: ``tests/conftest.py`` is imported by name).
"""

import errno
import os
import subprocess
import tempfile
import threading

import pytest
from fsspec.implementations.memory import MemoryFileSystem
from fsspec.registry import register_implementation


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """The temporary directory of this test (where Kineto's traces are saved before export)."""
    path = tmp_path / "tmp"
    path.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    return path


def leftovers(*roots):
    """Temporary files anywhere under ``roots``: Kineto saves and ``.tmp-`` write names."""
    found = []
    for root in roots:
        for dirpath, _, files in os.walk(root):
            found += [os.path.join(dirpath, f) for f in files if f.startswith("streamprof-") or ".tmp-" in f]
    return found


def held_open(root):
    """Files under ``root`` that this process holds open (a removed file held open keeps its space taken)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (the listing's own descriptor)
            continue
        if target.startswith(str(root)):
            found.append(target)
    return found


def free_bytes(directory):
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


@pytest.fixture
def small_fs(tmp_path):
    """``make(name, kib)``: a tmpfs of ``kib`` KiB mounted at ``tmp_path/name`` (skips where mounting is not
    allowed); unmounted after the test."""
    mounts = []

    def make(name, kib):
        path = tmp_path / name
        path.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(path)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
        mounts.append(path)
        return path

    yield make
    for path in reversed(mounts):
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(directory):
    """Fill the filesystem of ``directory`` up to the last byte."""
    with open(os.path.join(directory, "filler"), "wb", buffering=0) as f:
        for size in (65536, 4096, 1):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError as err:
                assert err.errno == errno.ENOSPC


def remount_read_only(directory):
    subprocess.run(["mount", "-o", "remount,ro", str(directory)], check=True)


class _Store(MemoryFileSystem):
    """An in-memory object store whose writes can be made to fail or hang."""

    protocol = "faultmem"
    store: dict = {}
    pseudo_dirs = [""]
    writes_allowed = 10**9
    failure: OSError | None = None
    gate = threading.Event()

    @classmethod
    def _strip_protocol(cls, path):
        return super()._strip_protocol(path.replace("faultmem://", "memory://", 1))

    def _open(self, path, mode="rb", **kwargs):
        if "w" in mode:
            if type(self).writes_allowed <= 0:
                if type(self).failure is not None:
                    super()._open(path, mode, **kwargs).close()  # the object exists, empty, as on a full disk
                    raise type(self).failure
                type(self).gate.wait()  # the store stops answering
            type(self).writes_allowed -= 1
        return super()._open(path, mode, **kwargs)


@pytest.fixture
def fault_store():
    """The ``faultmem://`` store: set ``writes_allowed`` and ``failure`` (raised by later writes) or leave
    ``failure`` None to make later writes hang until the test ends."""
    register_implementation("faultmem", _Store, clobber=True)
    _Store.store = {}
    _Store.pseudo_dirs = [""]
    _Store.writes_allowed = 10**9
    _Store.failure = None
    _Store.gate = threading.Event()
    yield _Store
    _Store.gate.set()
