"""The query language: FTS5's syntax read leniently; what cannot mean anything is a QueryError."""

from __future__ import annotations

import pytest

from shared.search.query import All, Any, QueryError, Term, parse
from shared.search.sqlite.compiler import compile_words


def words(text: str) -> str:
    return compile_words(parse(text).tree)


@pytest.mark.parametrize(
    ("typed", "tree"),
    [
        ("deploy", Term("deploy")),
        ("deploy staging", All((Term("deploy"), Term("staging")))),
        ("deploy AND staging", All((Term("deploy"), Term("staging")))),
        ('"rate limit"', Term("rate limit", phrase=True)),
        ('"rate limit"*', Term("rate limit", prefix=True, phrase=True)),
        ("migrat*", Term("migrat", prefix=True)),
        ("postgres OR sqlite", Any((Term("postgres"), Term("sqlite")))),
        ("deploy NOT staging", All((Term("deploy"),), (Term("staging"),))),
        ("NOT staging deploy", All((Term("deploy"),), (Term("staging"),))),
        (
            "a (b OR c)",
            All((Term("a"), Any((Term("b"), Term("c"))))),
        ),
    ],
)
def test_the_language(typed: str, tree: object) -> None:
    assert parse(typed).tree == tree


@pytest.mark.parametrize(
    ("typed", "expr"),
    [
        ("chat-send", '"chat-send"'),  # FTS5 reads the quoted word as the phrase chat send
        ("foo(bar", '("foo" AND "bar")'),  # an unmatched parenthesis is dropped
        ("foo)bar", '("foo" AND "bar")'),
        ('"unbalanced', '"unbalanced"'),  # the quote runs to the end
        ('say "hello world', '("say" AND "hello world")'),
        ("a OR", '"a"'),  # an operator with nothing on one side is dropped
        ("OR a", '"a"'),
        ("a AND AND b", '("a" AND "b")'),
        ("TODO: fix", '("TODO:" AND "fix")'),  # not a column filter
        ("C++", '"C++"'),
        ("foo *", '"foo"'),  # a bare * has nothing to find
        ("🎉 party", '"party"'),  # emoji are not indexed
        ("^start", '"^start"'),  # not an FTS5 initial-token query
        ("NEAR(a b)", '("NEAR" AND "a" AND "b")'),
        ('say ""hi""', '("say" AND "hi")'),
        ("it's", '"it\'s"'),
    ],
)
def test_ordinary_typing_never_breaks_it(typed: str, expr: str) -> None:
    assert words(typed) == expr


def test_quotes_inside_terms_are_escaped() -> None:
    assert words('a"b') == '("a" AND "b")'
    assert compile_words(Term('x"y')) == '"x""y"'


@pytest.mark.parametrize(
    ("typed", "why"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("*", "nothing searchable"),
        ("🎉", "nothing searchable"),
        ("+ - :", "nothing searchable"),
        ("OR", "nothing searchable"),
        ("AND OR NOT", "nothing searchable"),
        ('""', "nothing searchable"),
        ("NOT deploy", "NOT only excludes"),
        ("a OR NOT b", "NOT only excludes"),
        ("x" * 600, "characters long"),
        (" ".join(f"w{i}" for i in range(40)), "more than"),
    ],
)
def test_a_query_that_means_nothing_says_why(typed: str, why: str) -> None:
    with pytest.raises(QueryError, match=why):
        parse(typed)


def test_dropped_bits_are_reported() -> None:
    query = parse("🎉 party *")
    assert query.dropped == ("🎉", "*")


def test_lowercase_operators_are_words_as_in_fts5() -> None:
    assert parse("this or that").tree == All((Term("this"), Term("or"), Term("that")))


def test_unsegmented_terms_are_recognised() -> None:
    assert parse("中文").unsegmented
    assert parse("カタカナ").unsegmented
    assert parse("ภาษาไทย").unsegmented
    assert parse("deploy OR 部署").unsegmented
    assert not parse("deploy café").unsegmented


def test_polarity_of_terms() -> None:
    query = parse("a (b OR c) NOT d")
    assert query.polarized() == [
        (Term("a"), True),
        (Term("b"), True),
        (Term("c"), True),
        (Term("d"), False),
    ]
    assert [t.text for t in query.terms()] == ["a", "b", "c"]


def test_render_is_the_same_language() -> None:
    for typed in ['a "b c" OR d*', "a NOT (b OR c)", "中文 python"]:
        again = parse(str(parse(typed)))
        assert again.tree == parse(typed).tree


def test_control_characters_are_spaces() -> None:
    assert parse("deploy\x00staging\nnow").tree == All(
        (Term("deploy"), Term("staging"), Term("now"))
    )
