"""loadtest.wan's command: where the bed cannot be made, one line and exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest import wan


def test_where_the_bed_cannot_be_made_it_says_why_in_one_line_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(
        wan, "unavailable", lambda delay: "no /dev/net/tun: the WAN delay line needs a TUN device"
    )
    assert wan.main(["--out", str(tmp_path)], "python -m loadtest wan") == 2
    said = capsys.readouterr()
    assert said.err == "loadtest wan: no /dev/net/tun: the WAN delay line needs a TUN device\n"
    assert said.out == "" and list(tmp_path.iterdir()) == []
