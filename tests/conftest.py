"""Shared fixtures: a private HERMES_HOME per test, its settings and store, and service probes."""

from __future__ import annotations

import os
import signal
import socket
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

from shared.db import Store, open_store
from shared.settings import Settings, load_settings
from tests import parallel, store_template

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

# No example database written into the checkout, and no per-example deadline: tests never
# assert on timing (a slow CI machine must not turn into a failure).
hypothesis_settings.register_profile("hermes", database=None, deadline=None)
hypothesis_settings.load_profile("hermes")

# Started in the background by a non-interactive shell (`nohup … &`, some CI runners), this
# process and every child would inherit SIGINT *ignored*: Python then installs no Ctrl-C
# handler, and the tests that stop `hermes up` or the terminal with SIGINT would wait for a
# process that never hears it. A handler of our own is reset to the default in each child.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fuzz-long",
        action="store_true",
        help="run the fuzz tests with 20x their examples (tests/fuzzing.py)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--fuzz-long"):
        os.environ["HERMES_FUZZ_LONG"] = "1"


DIALECTS = ("sqlite", "postgresql")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """In a parallel run, the tests that build clusters of their own run one after another on
    one worker (tests/parallel.py)."""
    for item in items:
        if any(item.get_closest_marker(name) for name in parallel.SERIAL_MARKERS):
            item.add_marker(pytest.mark.xdist_group("serial"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test marked `both_databases` (usually a whole module: `pytestmark`) that reaches the
    store through `store`, `settings` or `hermes_env` runs once per dialect:
    test_x[sqlite] and test_x[postgresql]."""
    if metafunc.definition.get_closest_marker("both_databases") is None:
        return
    if "database_url" not in metafunc.fixturenames:
        return  # reaches no store (a pure function, or one opening its own URL): runs once
    metafunc.parametrize("database_url", DIALECTS, indirect=True)


def service_or_skip(name: str, host: str, port: int) -> None:
    """Skip (outside CI) or fail (in CI) when a service the test needs is not listening."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return
    except OSError:
        message = f"{name} is not reachable at {host}:{port}"
        if IN_CI:
            pytest.fail(f"{message}; CI=true requires it (.ci/run starts it)")
        pytest.skip(message)


@pytest.fixture(autouse=True)
def _renewers_closed() -> Iterator[None]:
    """Stop the lease renewers `tests.pipeline_helpers.make_runtime` built in this test."""
    yield
    helpers = sys.modules.get("tests.pipeline_helpers")
    if helpers is not None:
        helpers.close_renewers()


@pytest.fixture
def hermes_home(tmp_path: Path) -> Path:
    home = tmp_path / "hermes"
    home.mkdir()
    return home


@pytest.fixture
def database_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """The store this test runs on: None for the default (state.db in HERMES_HOME), or, for a
    test marked `both_databases` in its postgresql run, a fresh schema of its own on the local
    PostgreSQL, dropped afterwards. Everything reading `hermes_env`/`settings` (the `store`
    fixture, CLI subprocesses, workers) follows it."""
    if getattr(request, "param", "sqlite") == "sqlite":
        yield None
        return
    schema = f"t_{uuid.uuid4().hex[:16]}"
    admin = _contract_database()
    with _connect(admin) as db:
        _clear_public(db)
        db.execute(f'CREATE SCHEMA "{schema}"')
    # The contract database's public schema holds only extensions (shared by every schema),
    # never our tables: each test's tables, alembic_version included, are in its own schema.
    yield f"{admin}?options=-csearch_path%3D{schema},public"
    with _connect(admin) as db:
        db.execute("SET lock_timeout = '30s'")
        db.execute(f'DROP SCHEMA "{schema}" CASCADE')


def _clear_public(db) -> None:  # type: ignore[no-untyped-def]
    """Drop tables a process that outlived its test wrote into `public`: with its schema
    dropped, the first schema of its search_path that exists is public, and every later test
    would then find a store there at head (alembic_version) and share its rows instead of
    making its own (one CI run's terminal tests left their stacks running that way, and every
    PostgreSQL test after them failed)."""
    leftover = db.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    for (name,) in leftover.fetchall():
        db.execute(f'DROP TABLE IF EXISTS public."{name}" CASCADE')


def _connect(url: str):  # type: ignore[no-untyped-def]
    import psycopg

    return psycopg.connect(url, autocommit=True)


_CONTRACT_READY: list[str] = []


def _contract_database() -> str:
    """The checkout's database for schema-per-test runs (`<db>_contract`), made when missing."""
    name = f"{POSTGRES_DB}_contract"
    url = f"postgresql://postgres@127.0.0.1:5432/{name}"
    if _CONTRACT_READY:
        return url
    service_or_skip("PostgreSQL", "127.0.0.1", 5432)
    with _connect("postgresql://postgres@127.0.0.1:5432/postgres") as db:
        found = db.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        if found.fetchone() is None:
            db.execute(f'CREATE DATABASE "{name}"')
    with _connect(url) as db:
        db.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public")
    _CONTRACT_READY.append(url)
    return url


@pytest.fixture
def hermes_env(hermes_home: Path, database_url: str | None) -> dict[str, str]:
    """An environment for subprocesses and settings: this test's HERMES_HOME, nothing inherited.
    Nor COLUMNS and LINES, which a pytest-xdist worker sets (80x24): a `hermes` in a pty of 200
    columns would wrap every line at 80, as it never does in a serial run."""
    inherited = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env = {k: v for k, v in inherited.items() if not k.startswith("HERMES_")}
    env["HERMES_HOME"] = str(hermes_home)
    if database_url is not None:
        env["HERMES_DATABASE_URL"] = database_url
    return env


@pytest.fixture
def settings(hermes_env: dict[str, str]) -> Settings:
    return load_settings(hermes_env)


@pytest.fixture
def store(
    settings: Settings, database_url: str | None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Store]:
    """The test's store, opened at head. A store not there yet starts as a copy of one migrated
    once per session (tests/store_template.py: the same schema, without migrating it again)."""
    url = settings.resolved_database_url
    if settings.state_db_path is not None and database_url is None:
        template_dir = tmp_path_factory.getbasetemp() / "store-template"
        template_dir.mkdir(exist_ok=True)
        store_template.prime_sqlite(settings.state_db_path, template_dir)
    elif url == database_url and (schema := store_template.schema_of(url)) is not None:
        store_template.prime_postgresql(_contract_database(), schema)
    opened = open_store(url)
    yield opened
    opened.close()


# The services the integration tests use. A developer running two checkouts' suites at once
# points each at its own Redis port and PostgreSQL database (tests flush their Redis dbs); in a
# parallel run each worker has its own (tests/parallel.py).
REDIS_BASE_PORT = int(os.environ.get("HERMES_TEST_REDIS_PORT", "6379"))
POSTGRES_DB = parallel.postgres_db(os.environ.get("HERMES_TEST_POSTGRES_DB", "test"))


REDIS_DBS = 16  # redis-server's default `databases`


@pytest.fixture
def redis_url() -> str:
    """The test Redis, with no fleet on it. Each test makes fresh databases (a fresh fleet id
    each) and points processes at numbered Redis dbs (tests/fakes/stack.redis_db_url flushes
    the one it hands out): a fleet id an earlier test left in any db would make this test's
    processes refuse to start (shared/fleet_registry.py), so every db's fleet keys go first.
    Tests run one at a time per checkout (and per worker of a parallel run), and each has its
    own Redis port."""
    service_or_skip("Redis", "127.0.0.1", REDIS_BASE_PORT)
    port = parallel.redis_port(REDIS_BASE_PORT)
    _forget_fleets(port)
    return f"redis://127.0.0.1:{port}/0"


def _forget_fleets(port: int) -> None:
    import redis

    from shared.fleet_registry import FLEET_ID_KEY, PROCESS_PREFIX

    for db in range(REDIS_DBS):
        client = redis.Redis(port=port, db=db)
        try:
            stale = [FLEET_ID_KEY, *client.scan_iter(match=PROCESS_PREFIX + "*", count=1000)]
            client.delete(*stale)
        finally:
            client.close()


@pytest.fixture
def postgres_url() -> str:
    """This checkout's database on the local PostgreSQL, created when it is missing."""
    service_or_skip("PostgreSQL", "127.0.0.1", 5432)
    import psycopg

    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as db:
        found = db.execute("SELECT 1 FROM pg_database WHERE datname = %s", (POSTGRES_DB,))
        if found.fetchone() is None:
            db.execute(f'CREATE DATABASE "{POSTGRES_DB}"')
    return f"postgresql://postgres@127.0.0.1:5432/{POSTGRES_DB}"
