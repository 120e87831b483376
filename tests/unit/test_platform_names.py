"""The set of known platform names, cached for the hot path, follows the registry."""

from __future__ import annotations

from shared.platforms import known_platforms, registry
from shared.platforms.descriptor import Platform
from shared.settings import PlatformSettings
from shared.turns import InboundTurn, validate_turn


def test_known_platforms_follow_register_and_unregister() -> None:
    name = "namecachechat"
    turn = InboundTurn(name, "c1", "dm", "e1", "hello", user_id="u1")
    assert name not in known_platforms()  # asked once: the set is cached now
    registry.register(
        Platform(
            name=name,
            title="NameCacheChat",
            order=98,
            settings=PlatformSettings,
            receiver="nowhere:PLUGIN",
            sender="nowhere:build_sender",
        )
    )
    try:
        assert name in known_platforms()
        validate_turn(turn)  # a turn of the new platform passes
    finally:
        registry.unregister(name)
    assert name not in known_platforms()
