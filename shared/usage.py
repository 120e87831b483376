"""What one model call used: the record a worker keeps for the usage ledger, and its buckets.

Tokens are what the endpoint reported (`estimated` False). Only when it reported none are they
estimated from the text, and the call says so. Cached input tokens are part of `input_tokens`
(as OpenAI-compatible endpoints report them), reasoning tokens part of `output_tokens`; None
means the endpoint did not say. Latency is one successful request's wall time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

REPLY = "reply"  # the model's answer that ends a turn
TOOL_ROUND = "tool_round"  # an answer asking for tool calls
TITLE = "title"
SUMMARY = "summary"  # compression
IMAGE = "image"  # an image described for a model without vision
TRANSCRIPTION = "transcription"
KINDS = (REPLY, TOOL_ROUND, TITLE, SUMMARY, IMAGE, TRANSCRIPTION)

DAY_SECONDS = 86_400
HOUR_SECONDS = 3_600
# Latency histogram: bucket 0 is under 10 ms; bucket k (1..30) is [10·2^((k-1)/2), 10·2^(k/2))
# ms, each √2 wide; the last holds everything from 10·2^15 ms (~5.5 minutes) on.
LATENCY_BUCKETS = 32
LATENCY_FLOOR_MS = 10.0


@dataclass(frozen=True, slots=True)
class ToolUse:
    """One tool call a model asked for, and whether it failed (an error went back)."""

    name: str
    failed: bool = False


@dataclass(frozen=True, slots=True)
class ModelCall:
    kind: str
    model: str
    at: float  # when the call finished (epoch seconds)
    input_tokens: int
    output_tokens: int
    latency_ms: float
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    estimated: bool = False  # the endpoint reported no usage: tokens are estimates
    tools: tuple[ToolUse, ...] = field(default_factory=tuple)


def day_of(at: float) -> int:
    """Days since 1970-01-01 UTC."""
    return int(at // DAY_SECONDS)


def hour_of_day(at: float) -> int:
    """0..23, UTC."""
    return int(at % DAY_SECONDS // HOUR_SECONDS)


def weekday_of(day: int) -> int:
    """0 = Monday … 6 = Sunday for a day number (1970-01-01 was a Thursday)."""
    return (day + 3) % 7


def latency_bucket(ms: float) -> int:
    if ms < LATENCY_FLOOR_MS:
        return 0
    return min(LATENCY_BUCKETS - 1, 1 + int(2 * math.log2(ms / LATENCY_FLOOR_MS)))


def bucket_bounds(bucket: int) -> tuple[float, float]:
    """(low, high) milliseconds of a histogram bucket (the last one's high is its low × √2)."""
    if bucket <= 0:
        return 0.0, LATENCY_FLOOR_MS
    low = LATENCY_FLOOR_MS * 2 ** ((bucket - 1) / 2)
    return low, low * math.sqrt(2)


def percentile(counts: list[int], q: float) -> float | None:
    """The q-quantile (0..1) in ms of a latency histogram, interpolated geometrically within its
    bucket (within the bucket's √2 width of the true value); None when it is empty."""
    total = sum(counts)
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for bucket, count in enumerate(counts):
        if count and seen + count >= rank:
            low, high = bucket_bounds(bucket)
            share = (rank - seen) / count
            if low <= 0:
                return high * share
            return float(low * (high / low) ** share)
        seen += count
    return bucket_bounds(len(counts) - 1)[1]
