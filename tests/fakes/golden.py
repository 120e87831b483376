"""Golden fixtures: a real payload (`<name>.json`) and what it must become (`.expected.json`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from shared.session_key import derive_session_key
from shared.turns import InboundTurn, validate_turn

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def cases(platform: str) -> list[str]:
    folder = FIXTURES / platform
    return sorted(
        p.name.removesuffix(".json") for p in folder.glob("*.json") if ".expected" not in p.name
    )


def load(platform: str, name: str) -> tuple[Any, dict[str, Any]]:
    folder = FIXTURES / platform
    payload = json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
    expected = json.loads((folder / f"{name}.expected.json").read_text(encoding="utf-8"))
    return payload, expected


def as_dict(turn: InboundTurn) -> dict[str, Any]:
    data = dataclasses.asdict(turn)
    data["attachments"] = [a.as_dict() for a in turn.attachments]
    return data


def check(result: Any, expected: dict[str, Any]) -> None:
    """`result` (an InboundTurn or an Ignored) is what the golden file says."""
    if "ignored" in expected:
        assert not isinstance(result, InboundTurn), as_dict(result)
        assert result.reason == expected["ignored"]
        return
    assert isinstance(result, InboundTurn), result
    validate_turn(result)
    assert as_dict(result) == expected["turn"]
    assert derive_session_key(result).key == expected["session_key"]
