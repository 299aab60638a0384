"""mesh-echo's server, client and command line, on 127.0.0.1 with a free port."""

import socket
import threading
from collections.abc import Iterator

import pytest
from meshecho import EchoError, EchoServer, send
from meshecho.main import main


@pytest.fixture
def server() -> Iterator[EchoServer]:
    server = EchoServer("127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        thread.join(10)
        server.server_close()


def _closed_port() -> int:
    """A loopback port with (almost certainly) nothing listening on it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_port_is_the_real_bound_port(server: EchoServer) -> None:
    assert server.port != 0
    assert server.port == server.socket.getsockname()[1]


@pytest.mark.parametrize("message", ["hello", "", "héllo wörld ✓", "line\n" * 4_000])
def test_send_returns_exactly_what_was_sent(server: EchoServer, message: str) -> None:
    assert send(message, "127.0.0.1", server.port, timeout=10) == message


def test_send_to_a_closed_port_raises_echo_error() -> None:
    port = _closed_port()
    with pytest.raises(EchoError, match=f"echo exchange with 127.0.0.1:{port} failed"):
        send("hello", "127.0.0.1", port, timeout=5)


def test_main_send_prints_the_reply(server: EchoServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["send", "ping", "--port", str(server.port), "--timeout", "10"]) == 0
    assert capsys.readouterr().out == "ping\n"


def test_main_send_exits_1_when_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["send", "ping", "--port", str(_closed_port()), "--timeout", "5"]) == 1
    assert capsys.readouterr().err.startswith("mesh-echo: echo exchange with 127.0.0.1:")


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["send", "x", "--port", "65536"], "port must be an integer 0-65535"),
        (["send", "x", "--port", "1", "--timeout", "0"], "expected a positive number"),
        (["send", "x"], "--port"),
    ],
)
def test_main_rejects_bad_arguments(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert error in capsys.readouterr().err
