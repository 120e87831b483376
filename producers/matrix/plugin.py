"""Matrix's receiving side: no HTTP routes, one `/sync` long poll."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from producers.gateway.deps import Gateway
from producers.gateway.plugin import GatewayError, Options, ReceiverPlugin
from shared.platforms.matrix import MatrixSettings


class MatrixPlugin(ReceiverPlugin):
    def check(self, conf: MatrixSettings, options: Options) -> None:
        missing = [f"platforms.matrix.{key}" for key in ("homeserver", "user_id")
                   if getattr(conf, key) is None]  # fmt: skip
        if missing:
            raise GatewayError(f"the Matrix receiver needs {', '.join(missing)}")

    def connection(
        self, gateway: Gateway, conf: MatrixSettings, options: Options
    ) -> Coroutine[Any, Any, None] | None:
        from producers.matrix.receiver import MatrixReceiver

        assert conf.token is not None and conf.homeserver and conf.user_id
        return MatrixReceiver(
            gateway,
            homeserver=conf.homeserver,
            user_id=conf.user_id,
            token=conf.token.get_secret_value(),
            sync_timeout_ms=conf.sync_timeout_ms,
        ).run()


PLUGIN = MatrixPlugin()
