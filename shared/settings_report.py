"""The effective settings of this process, one line per key, as `hermes config check` prints
them: the value, where it came from (an environment variable, config.yaml or the default) and,
for a secret, never the secret — only a short fingerprint, so two hosts can still be compared.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, SecretStr

from shared.settings import ENV_PREFIX, NESTED, Settings

MASK = "***"
SECRET_NAME = re.compile(r"token|secret|password|api_key|private_key", re.IGNORECASE)


@dataclass(frozen=True)
class Line:
    key: str
    value: str
    source: str


def fingerprint(secret: str) -> str:
    """`*** (sha256:1a2b3c4d)`: equal secrets show equal fingerprints, and nothing of them."""
    return f"{MASK} (sha256:{hashlib.sha256(secret.encode()).hexdigest()[:8]})"


def masked_url(url: str) -> str:
    """A URL with its password replaced by a fingerprint of it (the rest stays comparable)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = parts.username or ""
    netloc = f"{user}:{fingerprint(parts.password).replace(' ', '')}@{host}"
    return urlunsplit(parts._replace(netloc=netloc))


def effective(
    settings: Settings, environ: Mapping[str, str], config: Mapping[str, Any]
) -> list[Line]:
    """Every setting's value and source, secrets masked; keys in the order Settings names them."""
    env_names = {name.upper(): name for name in environ if name.startswith(ENV_PREFIX)}
    lines = []
    for key, value in _leaves(settings, ()):
        dotted = ".".join(key)
        wanted = ENV_PREFIX + NESTED.join(key).upper()
        if wanted in env_names:
            source = env_names[wanted]
        elif _in(config, key):
            source = "config.yaml"
        else:
            source = "default"
        lines.append(Line(dotted, _shown(key[-1], value), source))
    return lines


def _leaves(model: BaseModel, prefix: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    names = [*type(model).model_fields, *(model.model_extra or {})]  # platforms are extras
    for name in names:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            yield from _leaves(value, (*prefix, name))
        else:
            yield (*prefix, name), value


def _in(config: Mapping[str, Any], key: tuple[str, ...]) -> bool:
    node: Any = config
    for part in key:
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def _shown(name: str, value: Any) -> str:
    if value is None:
        return "(not set)"
    if isinstance(value, SecretStr):
        return fingerprint(value.get_secret_value())
    if isinstance(value, str) and SECRET_NAME.search(name):  # a secret kept as plain text
        return fingerprint(value)
    if isinstance(value, str) and "://" in value:
        return masked_url(value)
    if isinstance(value, dict):
        return _mapping(value)
    return str(value)


def _mapping(value: dict[str, Any]) -> str:
    shown = {
        k: (v.model_dump(mode="json") if isinstance(v, BaseModel) else v) for k, v in value.items()
    }
    return str(shown) if shown else "{}"
