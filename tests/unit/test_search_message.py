"""Search reads messages as `shared.search.reads.Message` (a tuple: cheap to build ~50 times a
call) rather than `shared.model.MessageRecord`: the two must stay the same fields, in the same
order (the order of the columns search selects), and show tool calls alike."""

from __future__ import annotations

from dataclasses import fields

import pytest

from shared.model import MessageRecord
from shared.search.reads import MESSAGE_COLUMNS, Message
from shared.search.views import message_dict


def test_a_search_message_has_the_records_fields_in_the_selected_order() -> None:
    names = tuple(f.name for f in fields(MessageRecord))
    assert Message._fields == names
    assert tuple(column.strip() for column in MESSAGE_COLUMNS.split(",")) == names


@pytest.mark.parametrize(
    "tool_calls",
    [
        None,
        "",
        "not json",
        '{"name": "a dict, not a list"}',
        '[{"function": {"name": "search"}}, {"name": "bare"}, {}]',
    ],
)
def test_tool_calls_decode_and_show_as_on_the_record(tool_calls: str | None) -> None:
    row = (7, "s1", "assistant", "text", 1_700_000_000.5, tool_calls, None, "tool", 3, None)
    record, message = MessageRecord(*row), Message(*row)
    assert message.tool_call_list == record.tool_call_list
    shown = message_dict(message, 10)
    assert shown == {
        "id": 7,
        "role": "assistant",
        "when": "2023-11-14T22:13:20Z",
        "content": "text",
        "tool_name": "tool",
        **({"tool_calls": ["search", "bare", "?"]} if tool_calls and "[" in tool_calls else {}),
    }
