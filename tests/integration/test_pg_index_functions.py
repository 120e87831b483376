"""PostgreSQL's search index functions are plpgsql (revision 0023): the server keeps their plan
for the connection instead of planning each body again in every INSERT of a message. Their
results are those of the sql functions revisions 0013-0022 made, so the indexes built on those
stay valid; the downgrade puts the sql ones back."""

from __future__ import annotations

import random

import pytest
from alembic import command
from sqlalchemy import text

from shared.db import Connection, Store
from shared.db.migrate import HEAD, alembic_config
from shared.search.postgresql import ddl
from tests.integration.search_kit import Log, call, ids

pytestmark = pytest.mark.both_databases

NAMES = ("hermes_search_grams", "hermes_search_pairs", "hermes_search_prefixes")
LANGUAGES = (
    "SELECT p.proname, l.lanname FROM pg_proc AS p JOIN pg_language AS l ON l.oid = p.prolang"
    " WHERE p.proname = ANY(:names) ORDER BY p.proname"
)


def _languages(conn: Connection) -> dict[str, str]:
    return {
        name: language for name, language in conn.execute(text(LANGUAGES), {"names": list(NAMES)})
    }


def _postgresql(store: Store) -> None:
    if store.dialect != "postgresql":
        pytest.skip("revision 0023 is PostgreSQL's only (SQLite searches with FTS5)")


def test_the_index_functions_are_plpgsql(store: Store) -> None:
    _postgresql(store)
    with store.read() as conn:
        assert _languages(conn) == dict.fromkeys(NAMES, "plpgsql")


def _texts(count: int) -> list[str]:
    rng = random.Random(20261207)
    words = ["the", "config", "file", "x1", "σοφια", "中文字", "naïve", "b", "ピザ", "ok-go"]
    texts = ["", " ", "中", "a"]
    for _ in range(count):
        texts.append(
            rng.choice([" ", ", ", "", "\n"]).join(
                rng.choice(words) for _ in range(rng.randint(1, 30))
            )
        )
    return texts


def test_the_plpgsql_functions_give_what_the_sql_ones_gave(store: Store) -> None:
    """Each function beside its revision-0022 sql body (made in pg_temp) on 500 texts, words
    and unsegmented scripts: the same value every time."""
    _postgresql(store)
    texts = _texts(500)
    compare = (
        "SELECT count(*) FILTER (WHERE hermes_search_grams(t) IS DISTINCT FROM pg_temp.g(t)),"
        " count(*) FILTER (WHERE hermes_search_pairs(v) IS DISTINCT FROM pg_temp.p(v)),"
        " count(*) FILTER (WHERE hermes_search_prefixes(v, i) IS DISTINCT FROM pg_temp.x(v, i)),"
        " count(*) FILTER (WHERE cardinality(pg_temp.g(t)) > 0 AND length(pg_temp.p(v)) > 0),"
        " count(*)"
        " FROM (SELECT t, to_tsvector('simple', hermes_search_words(t)) AS v,"
        " CAST(n AS integer) * 4099 AS i"
        " FROM unnest(CAST(:t AS text[])) WITH ORDINALITY AS c(t, n)) AS cases"
    )
    temp = {"hermes_search_grams": "pg_temp.g", "hermes_search_pairs": "pg_temp.p"}
    temp["hermes_search_prefixes"] = "pg_temp.x"
    with store.write() as conn:
        for statement in ddl.SQL:
            name = statement.split("FUNCTION ", 1)[1].split("(", 1)[0]
            conn.exec_driver_sql(statement.replace(f"FUNCTION {name}(", f"FUNCTION {temp[name]}("))
        differ_grams, differ_pairs, differ_prefixes, both, total = conn.execute(
            text(compare), {"t": texts}
        ).one()
    assert (differ_grams, differ_pairs, differ_prefixes) == (0, 0, 0)
    assert total == len(texts) and both > 100  # the texts give keys of both kinds


def test_the_downgrade_puts_the_sql_functions_back_and_search_works_either_way(
    store: Store, log: Log
) -> None:
    _postgresql(store)
    log.session("pizza", ["the config file is read at start", "ピザを食べた"])
    with store.write() as conn:
        command.downgrade(alembic_config(conn), "0022")
        assert _languages(conn) == dict.fromkeys(NAMES, "sql")
    assert ids(call(store, query='"config file"')) == ["pizza"]
    with store.write() as conn:
        command.upgrade(alembic_config(conn), HEAD)
        assert _languages(conn) == dict.fromkeys(NAMES, "plpgsql")
    log.session("later", ["another config file here", "ピザ屋"])
    assert ids(call(store, query='"config file"')) == ["later", "pizza"]
    assert ids(call(store, query="ピザ")) == ["later", "pizza"]
    assert ids(call(store, query="conf*")) == ["later", "pizza"]
