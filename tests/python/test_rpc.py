"""RPC from Python: disco.rpc.connect(address, ...) to a disco-rpc-server,
the C RPC session's calls (get a function, call it, copy to and from remote
memory), authentication by the token file ($DISCO_TOKEN_FILE, as the C
client), and the server's session timeout as SessionTimeoutError."""

import os
import select
import subprocess
import time

import pytest

import disco
import disco.rpc
from conftest import BIN, CODE, TESTLIB, error_class


@pytest.fixture
def server(tmp_path, monkeypatch):
    """A disco-rpc-server on a Unix socket, serving the test library, whose
    sessions expire after 400 ms of one call; yields its address."""
    token = tmp_path / "token"
    p = subprocess.Popen(
        [str(BIN / "disco-rpc-server"), "--listen", f"unix:{tmp_path}/rpc.sock",
         "--load", TESTLIB, "--token-file", str(token), "--session-timeout", "400"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # It prints "listening ADDRESS" and "token PATH" once it listens.
        out, deadline = b"", time.monotonic() + 10
        while b"token" not in out or not out.endswith(b"\n"):
            left = deadline - time.monotonic()
            assert left > 0 and select.select([p.stdout], [], [], left)[0], f"server said {out!r}"
            chunk = os.read(p.stdout.fileno(), 4096)
            assert chunk, f"server exited: {out!r} {p.stderr.read()!r}"
            out += chunk
        words = out.split()
        address = words[words.index(b"listening") + 1].decode()
        monkeypatch.setenv("DISCO_TOKEN_FILE", words[words.index(b"token") + 1].decode())
        yield address
    finally:
        p.kill()
        p.wait()


# A call through the server: a function by name, called with arguments, the
# result as a Python value; remote memory written and read back.
def test_rpc_call(server):
    with disco.rpc.connect(server) as c:
        add = c.get_function("test.add")
        assert add(40, 2) == 42
        assert c.get_function("test.concat")("ab", "cd") == "abcd"
        with pytest.raises(error_class(CODE["E_NO_FUNC"])):
            c.get_function("no.such.function")
        mem = c.alloc(4096)
        c.copy_to_remote(bytes(range(256)) * 16, mem)
        assert bytes(c.copy_from_remote(mem, 4096)) == bytes(range(256)) * 16
        c.free(mem)


# A wrong token is refused (AuthError), not served.
def test_rpc_bad_token(server, tmp_path, monkeypatch):
    bad = tmp_path / "bad.token"
    bad.write_text("00" * 32 + "\n")  # the format: 32 bytes in hex
    bad.chmod(0o600)
    monkeypatch.setenv("DISCO_TOKEN_FILE", str(bad))
    with pytest.raises(error_class(CODE["E_AUTH"])):
        disco.rpc.connect(server)


# A call that outlives the server's --session-timeout: SessionTimeoutError,
# within a bound, not a hang.
def test_rpc_session_timeout(server):
    with disco.rpc.connect(server) as c:
        spin = c.get_function("test.spin_ms")
        t0 = time.monotonic()
        with pytest.raises(disco.SessionTimeoutError) as ei:
            spin(5000)
        assert time.monotonic() - t0 < 4.0
        assert ei.value.code == CODE["E_SESSION_TIMEOUT"]
