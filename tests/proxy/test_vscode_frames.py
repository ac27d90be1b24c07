"""VS Code's remote protocol read for activity: a real tab's frames (golden, captured from
code-server 4.100.3), and frames that do not decode (they count: the rule fails toward awake)."""

from __future__ import annotations

import json

import pytest

from userland.platform.model.models import Activity
from userland.proxy.activity import frame_counts
from userland.proxy.rules import vscode_frames

from .conftest import golden_vscode_frames

FRAMES = golden_vscode_frames()
VSCODE = Activity(quiet_frame_bytes=26, websocket_protocol="vscode")


def frame(what: str) -> bytes:
    return next(bytes.fromhex(f["hex"]) for f in FRAMES if f["what"] == what)


@pytest.mark.parametrize("golden", FRAMES, ids=[f["what"][:60] for f in FRAMES])
def test_a_real_tabs_frames(golden: dict[str, object]) -> None:
    data = bytes.fromhex(str(golden["hex"]))
    assert vscode_frames.counts_as_use(data) is golden["counts"], f"{golden['what']} ({golden['sent']})"
    assert frame_counts(data, VSCODE) is golden["counts"]


def test_the_golden_frames_cover_what_matters() -> None:
    """An idle tab, a terminal printing with nobody typing, and the student's own work: each
    kind is in the golden data (so the test above cannot pass on an empty file)."""
    sent = {str(f["sent"]).split(",")[0] for f in FRAMES}
    assert {"by an idle tab", "while a terminal printed and nobody typed", "while the student worked"} <= sent
    assert all(not f["counts"] for f in FRAMES if f["sent"] != "while the student worked")
    for action in ("remoteterminal.$input", "$acceptTerminalInteraction", "remoteFilesystem.writeFile"):
        assert vscode_frames.counts_as_use(frame(action)), action


def test_a_keystroke_batched_with_background_messages_counts() -> None:
    batched = frame("type9") + frame("$onFileEvent") + frame("remoteterminal.$input")
    assert vscode_frames.counts_as_use(batched)
    assert not vscode_frames.counts_as_use(frame("type9") + frame("$onFileEvent") + frame("telemetry.ping"))


@pytest.mark.parametrize("data", [
    b"",
    b"hello, this is not VS Code",
    frame("remoteterminal.$input")[:-3],                 # cut short
    frame("remoteterminal.$input") + b"\x01\x00",         # trailing bytes
    bytes(9) + (100).to_bytes(4, "big"),                   # a header claiming more than it holds
    b"\x01" + bytes(8) + (1).to_bytes(4, "big") + b"\x7f",  # a message type nobody defines
    b"\x01" + bytes(8) + (4).to_bytes(4, "big") + b"\x04\x03\x06\x64",  # a 3-part call header
], ids=["empty", "text", "truncated", "trailing", "header-only", "unknown-type", "odd-call"])
def test_what_does_not_decode_counts(data: bytes) -> None:
    assert vscode_frames.counts_as_use(data)


def test_the_size_rule_comes_first_and_text_frames_are_read_too() -> None:
    assert not frame_counts(frame("type9"), VSCODE)  # 13 bytes: quiet by size
    ping = frame("telemetry.ping")
    assert frame_counts(ping, Activity(quiet_frame_bytes=26))  # by size only, the ping counts
    assert not frame_counts(ping, VSCODE)
    assert frame_counts("x" * 40, VSCODE)  # a text frame that is not the protocol counts


def test_the_handshake_error_is_one_control_message_with_the_reason() -> None:
    """What a VS Code server sends to refuse a connection (the gateway's answer to a helper
    whose access ended): one control message (type 2, id and ack 0) holding the JSON."""
    data = vscode_frames.handshake_error("alice ended your access at 14:19 UTC.")
    [(kind, body)] = list(vscode_frames._messages(data))
    assert kind == vscode_frames.CONTROL and data[1:9] == bytes(8)
    assert json.loads(body) == {"type": "error", "reason": "alice ended your access at 14:19 UTC."}
