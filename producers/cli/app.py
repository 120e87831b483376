"""What every command shares: settings read once, the store opened on first use, error mapping."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

import click

from shared.db import AmbiguousSession, SessionNotFound, Store, StoreError, TitleInUse, open_store
from shared.media_objects import MediaObjects, MediaStorageError, from_settings
from shared.settings import Settings, SettingsError, load_settings
from shared.titles import TitleError


@dataclass
class App:
    """Per-invocation context, built in `main` and handed to commands through click."""

    settings_loader: Callable[[], Settings] = load_settings
    clock: Callable[[], float] = time.time
    _settings: Settings | None = None
    _store: Store | None = None
    _media: MediaObjects | None = None
    _closers: list[Callable[[], Any]] = field(default_factory=list)

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = self.settings_loader()
        return self._settings

    @property
    def loaded_settings(self) -> Settings | None:
        """The settings if a command loaded them (an error report must not load them)."""
        return self._settings

    def store(self) -> Store:
        if self._store is None:
            self._store = open_store(self.settings.resolved_database_url)
            self._closers.append(self._store.close)
        return self._store

    def media_objects(self) -> MediaObjects | None:
        """The object store `media.url` names (None: attachments' bytes in the database)."""
        if self._media is None:
            self._media = from_settings(self.settings.media)
        return self._media

    def close(self) -> None:
        while self._closers:
            self._closers.pop()()


pass_app = click.make_pass_decorator(App)


def fail(message: str, code: int = 1) -> NoReturn:
    """One clear line on stderr and a non-zero exit."""
    click.echo(message, err=True)
    sys.exit(code)


def is_terminal() -> bool:
    return sys.stdout.isatty()


# Problems with the environment (config, state.db): exit 2.
EXPECTED_ERRORS = (SettingsError, StoreError, MediaStorageError)
# Problems with what the user typed (unknown session, bad title): exit 1.
USER_ERRORS = (SessionNotFound, AmbiguousSession, TitleError, TitleInUse)
