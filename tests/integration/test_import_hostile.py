"""`hermes sessions import` against hostile lines (issue 21, items 3 and 4): each bad line is
reported and refused alone, the good lines around it are imported, and no id ever names a path
outside $HERMES_HOME."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shared.db import Store
from shared.ids import is_safe_session_id
from shared.settings import Settings
from tests.integration.test_cli_sessions_support import good, invoke, message_total, session_ids


def import_file(settings: Settings, tmp_path: Path, lines: list[str]) -> Any:
    path = tmp_path / "hostile.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return invoke(settings, ["sessions", "import", str(path)])


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ('"started_at": ' + "1" + "0" * 400, "started_at must be a finite number"),
        ('"ended_at": -' + "9" * 400, "ended_at must be a finite number"),
        ('"started_at": 1e400', "started_at must be a finite number"),
    ],
)
def test_a_number_too_big_for_a_float_is_one_bad_line(
    settings: Settings, store: Store, tmp_path: Path, bad: str, why: str
) -> None:
    hostile = good("huge")[:-1] + ", " + bad + "}"  # a repeated key: json takes the last one
    goods = [good(f"g{n}") for n in range(4)]
    result = import_file(settings, tmp_path, [goods[0], goods[1], hostile, goods[2], goods[3]])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"line 3: {why}")
    assert session_ids(store) == ["g0", "g1", "g2", "g3"] and message_total(store) == 4


@pytest.mark.parametrize(
    "bad_id",
    ["../../../../outside/pwned", "a/b", "..", ".hidden", "a\\b", "with space", "x" * 129, "é"],
)
def test_an_id_that_could_name_a_path_is_refused(
    settings: Settings, store: Store, tmp_path: Path, bad_id: str
) -> None:
    result = import_file(settings, tmp_path, [good("ok1"), good(bad_id), good("ok2")])
    assert result.exit_code == 1
    assert result.stderr.startswith("line 2: id ") and "is not a session id" in result.stderr
    assert session_ids(store) == ["ok1", "ok2"]
    assert not (settings.home.parent / "outside").exists()


def test_a_parent_id_that_could_name_a_path_is_refused(
    settings: Settings, store: Store, tmp_path: Path
) -> None:
    result = import_file(settings, tmp_path, [good("child", parent_session_id="../../etc")])
    assert result.exit_code == 1
    assert result.stderr.startswith("line 1: parent_session_id '../../etc' is not a session id")
    assert session_ids(store) == []


def test_ids_from_other_tools_still_import() -> None:
    for ok in ("20250615_000001_ffffff", "x1", "call_1", "team:chan.42", "user@host+1"):
        assert is_safe_session_id(ok), ok


def test_a_byte_order_mark_on_the_first_line_is_not_a_bad_line(
    settings: Settings, store: Store, tmp_path: Path
) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + good("bom1").encode() + b"\n" + good("bom2").encode())
    result = invoke(settings, ["sessions", "import", str(path)])
    assert (result.exit_code, result.stderr) == (0, "")
    assert session_ids(store) == ["bom1", "bom2"]


def test_a_session_already_present_with_other_content_is_reported_not_silently_skipped(
    settings: Settings, store: Store, tmp_path: Path
) -> None:
    assert import_file(settings, tmp_path, [good("same"), good("other")]).exit_code == 0
    again = import_file(
        settings, tmp_path, [good("same"), good("other", started_at=1_600_000_000.0)]
    )
    assert again.exit_code == 1
    assert again.stderr == (
        "line 2: session other is already in the store with other content; kept the stored one\n"
    )
    assert again.stdout.endswith("skipped 2 already present (1 with other content), 0 bad lines.\n")
    assert message_total(store) == 2
