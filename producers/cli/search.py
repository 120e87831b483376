"""`hermes sessions search`: full-text search over every stored conversation, people and scripts."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from producers.cli.app import App, pass_app
from shared.search import SearchRequest
from shared.search import search as run_search
from shared.search.request import DEFAULT_LIMIT, DEFAULT_WINDOW, MAX_LIMIT, MAX_WINDOW
from shared.search.views import MARK_CLOSE, MARK_OPEN

ROLE_STYLE = {"user": "bold cyan", "assistant": "green", "tool": "magenta", "system": "dim"}


@click.command("search")
@click.argument("query", nargs=-1, required=True)
@click.option(
    "--limit", "-n", default=DEFAULT_LIMIT, show_default=True, type=click.IntRange(1, MAX_LIMIT)
)
@click.option("--source", "-s", help="Only sessions from this source (cli, telegram, slack, ...).")
@click.option(
    "--sort",
    type=click.Choice(["relevance", "newest", "oldest"]),
    default="relevance",
    show_default=True,
)
@click.option(
    "--role",
    "role_filter",
    default="user,assistant",
    show_default=True,
    help="Comma list of roles to search: user, assistant, tool, system.",
)
@click.option(
    "--window",
    "-w",
    default=DEFAULT_WINDOW,
    show_default=True,
    type=click.IntRange(0, MAX_WINDOW),
    help="Messages shown on each side of the match.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (for scripts).")
@pass_app
def search(
    app: App,
    query: tuple[str, ...],
    limit: int,
    source: str | None,
    sort: str,
    role_filter: str,
    window: int,
    as_json: bool,
) -> None:
    """Find past conversations: words AND by default, "phrases", OR, NOT, prefix*.

    Chinese, Japanese and similar text is matched as a substring. One result per
    conversation lineage (a compressed session and its continuations count once).
    """
    request = SearchRequest(
        query=" ".join(query),
        limit=limit,
        source=source,
        sort=None if sort == "relevance" else sort,
        role_filter=role_filter,
        window=window,
    )
    result = run_search(app.store(), request)
    if as_json:
        click.echo(json.dumps(result, ensure_ascii=False, indent=2))
        if "error" in result:
            raise SystemExit(1)
        return
    if "error" in result:
        click.echo(f"hermes: {result['error']}", err=True)
        raise SystemExit(1)
    _show(result)


def _marked(snippet: str) -> Text:
    """The snippet with its ⟦marks⟧ turned into bold yellow."""
    text = Text()
    rest = snippet
    while MARK_OPEN in rest:
        before, _, after = rest.partition(MARK_OPEN)
        hit, _, rest = after.partition(MARK_CLOSE)
        text.append(before)
        text.append(hit, style="bold yellow")
    text.append(rest)
    return text


def _show(result: dict[str, Any]) -> None:
    console = Console(highlight=False, soft_wrap=True)
    results = result["results"]
    if not results:
        console.print(f"No matches for {escape(result['query'])}.")
        if result.get("note"):
            console.print(f"[dim]{escape(result['note'])}[/]")
        return
    for number, item in enumerate(results, 1):
        title = escape(item["title"] or "(untitled)")
        console.print(
            f"[bold]{number}. {title}[/]  [dim]{item['session_id']} · {item['source']} · "
            f"{item['when']}[/]"
        )
        console.print(Text("   ").append_text(_marked(item["snippet"])))
        for message in item["messages"]:
            arrow = "▶" if message.get("anchor") else " "
            style = ROLE_STYLE.get(message["role"], "")
            line = " ".join(str(message["content"]).split())[:160]
            console.print(
                f"   {arrow} [dim]#{message['id']}[/] [{style}]{message['role']}[/]: {escape(line)}"
            )
        console.print()
    if result.get("note"):
        console.print(f"[dim]{escape(result['note'])}[/]")
