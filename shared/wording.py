"""How counts read in what people are shown: "1 message", "2 messages", "1.5 minutes"."""

from __future__ import annotations


def plural(count: float, noun: str, many: str | None = None, *, grouped: bool = True) -> str:
    """`count` and `noun`, the noun in the plural (`many`, else noun + "s") unless it is 1;
    whole numbers with thousands separators unless not `grouped`."""
    whole = float(count).is_integer()
    number = (f"{int(count):,}" if grouped else str(int(count))) if whole else f"{count:g}"
    return f"{number} {noun if count == 1 else (many or noun + 's')}"
