"""bench/fleet.py's figures: the ideal, efficiency and scaling against linear, and its chart."""

from __future__ import annotations

import pytest

from bench.fleet import chart, ideal_turns_per_s, parse_args, scaling


def point(workers: int, turns_per_s: float) -> dict[str, float]:
    return {
        "workers": workers,
        "turns_per_s": turns_per_s,
        "ideal_turns_per_s": ideal_turns_per_s(workers, 16, 2.0),
    }


def test_the_ideal_is_every_thread_busy_with_the_model() -> None:
    assert ideal_turns_per_s(4, 16, 2.0) == 32.0


def test_scaling_is_against_the_smallest_fleet_measured() -> None:
    curve = scaling([point(4, 28.8), point(1, 8.0), point(2, 12.0)])
    by = {p["workers"]: p for p in curve}
    assert by[1]["vs_linear"] == 1.0 and by[1]["efficiency"] == 1.0
    assert by[2]["vs_linear"] == 0.75
    assert by[4]["vs_linear"] == 0.9 and by[4]["efficiency"] == 0.9


def test_the_chart_has_a_bar_per_fleet_size_with_the_ideal_marked() -> None:
    text = chart(scaling([point(1, 8.0), point(2, 12.0)]))
    lines = text.splitlines()
    assert len(lines) == 3
    assert lines[1].startswith(" 1 worker ") and "×1.0 linear" in lines[1]
    assert lines[2].count("█") < lines[1].count("█") * 2  # 12 is under twice 8
    assert all("|" in line for line in lines[1:])


@pytest.mark.parametrize(
    "argv",
    [
        ["--workers", "one"],
        ["--workers", "0,2"],
        ["--database-url", "sqlite:///x.db"],
        ["--threads", "0"],
    ],
)
def test_bad_options_exit_with_a_message(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(argv)
    assert exit_.value.code == 2
    assert "error:" in capsys.readouterr().err
