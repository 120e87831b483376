"""Signal's receiving side: no HTTP routes, one polling loop against the local daemon."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from producers.gateway.deps import Gateway
from producers.gateway.plugin import Options, ReceiverPlugin
from shared.platforms.signal import DAEMON, SignalSettings


class SignalPlugin(ReceiverPlugin):
    def connection(
        self, gateway: Gateway, conf: SignalSettings, options: Options
    ) -> Coroutine[Any, Any, None] | None:
        from producers.signal.receiver import SignalReceiver

        assert conf.token is not None
        return SignalReceiver(
            gateway,
            account=conf.token.get_secret_value(),
            api_base=conf.api_base or DAEMON,
            poll_timeout=conf.poll_timeout,
            max_messages=conf.receive_max_messages,
        ).run()


PLUGIN = SignalPlugin()
