"""A deterministic synthetic fleet: sessions and messages shaped like real chat-agent traffic.

Entry points (same arguments → the same corpus on any machine; only seeded `random.Random`):

- `plan_corpus(sessions=, messages=, seed=)` → one `SessionPlan` per session: id, source, chat,
  lineage (compression chains "x", "x #2"), title, language, time window, message count.
- `iter_corpus(sessions=, messages=, seed=)` → `(session_row, message_rows)` per session, plain
  dicts keyed by the columns of `sessions` / `messages` (no `id` on messages), no database.
- `generate_session(plan, seed)` → the same pair for one planned session (independent of the
  others, so a search benchmark can regenerate any session to know what it holds).
- `build_store(path, sessions=, messages=, seed=)` → writes the corpus into a fresh state.db
  through the real schema (`open_store`: Alembic migrations, the FTS5 table and its triggers,
  the counter triggers) with large `executemany` transactions, and returns `BuildStats`.
- `vocabulary()` → the ranked word list, for picking common / rare query terms.
- `build_store(..., ledger_until=T)` also writes one usage-ledger row per assistant message
  (through shared.store.usage, rollups included), the corpus's 180 days stretched over the
  year before T: the session's model, reply or tool round, input tokens the conversation so
  far, tool outcomes, seeded latencies; about half the models have a price.

What the text looks like: a ~40k-word Zipf vocabulary (real English function and technical
words at the head, so "the", "to", "and" occur in nearly every session; pseudo-words in the
tail) plus a stream of one-off tokens (numbers, hex ids, paths, versions). User messages have a
median of ~80 characters, assistant replies ~400 with a long tail to several KB (markdown lists,
code blocks); about a quarter of turns call tools (assistant `tool_calls` JSON, then JSON tool
results of a few KB). About 5% of sessions are in Chinese or Japanese and other sessions quote
CJK now and then: 5–8% of messages contain CJK. Sources cli / telegram / slack / discord;
most sessions ended; ~6% of lineages are compression chains; about half are titled.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import random
import struct
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

BASE_TIME = 1_767_225_600.0  # 2026-01-01T00:00:00Z: the corpus's newest activity is before this
SPAN_SECONDS = 180 * 86_400  # sessions start over the 180 days before BASE_TIME
VOCAB_SIZE = 40_000
VOCAB_SEED = 20_240_917
CHARS_PER_WORD = 7.4  # mean word length plus its space and punctuation
CHUNK_SESSIONS = 256  # sessions generated, time-interleaved and inserted together

SOURCES = (("cli", 0.40), ("telegram", 0.25), ("slack", 0.20), ("discord", 0.15))
MODELS = (
    ("anthropic/claude-sonnet-4", 0.35),
    ("openai/gpt-4.1", 0.20),
    ("openai/gpt-4o-mini", 0.15),
    ("nousresearch/hermes-4-70b", 0.15),
    ("qwen/qwen3-coder", 0.10),
    ("local/llama-3.1-8b-instruct", 0.05),
)
TOOLS = ("terminal", "read_file", "web_search", "write_file", "patch", "session_search")
SESSION_COLUMNS = (
    "id", "source", "user_id", "session_key", "chat_id", "chat_type", "thread_id", "title",
    "title_source", "model", "model_config", "system_prompt", "parent_session_id", "started_at",
    "ended_at", "end_reason", "last_active_at", "input_tokens", "output_tokens",
)  # fmt: skip
MESSAGE_COLUMNS = (
    "session_id", "role", "content", "tool_calls", "tool_call_id", "tool_name", "token_count",
    "timestamp", "platform_message_id",
)  # fmt: skip

_COMMON_TEXT = (
    "the to and of a i you is it that in for this be on with can not are have do what your as "
    "but at or if so we my me was just from will an all how there about by get use one like "
    "would they it's don't should need want also make which when some then out up now here "
    "more any no yes could see think know try new first other only way them into than been "
    "has had were because where why who over after thanks please ok sure right let's still "
    "again same each much well time work working something thing good better best fine"
)
_TECH_TEXT = (
    "python error file function code server docker config database test api request token "
    "session model query json install version build deploy git commit branch log logs debug "
    "memory cpu thread process queue worker cache redis sqlite postgres http url key value "
    "string list dict class method return import module package script command terminal output "
    "input message user assistant bot telegram slack discord channel chat reply send webhook "
    "timeout retry failed success run running start stop restart update upgrade fix bug issue "
    "change add remove delete create data table index search result results page date day week "
    "month year today tomorrow yesterday local remote path directory folder line lines number "
    "type types field fields schema migration sql column row rows null default option options "
    "setting settings environment variable variables port host network proxy ssl certificate "
    "auth login password secret permission access user's image images upload download link "
    "prompt context summary title name names project repo pull push merge review ci pipeline "
    "job jobs task tasks schedule cron backup restore disk space size limit rate latency speed "
    "slow fast performance benchmark profile trace stack exception traceback warning info "
    "print call calls loop async await event events handler client library framework docs "
    "example examples question answer explain help idea plan draft email meeting notes"
)
_COMMON = tuple(_COMMON_TEXT.split())
_TECH = tuple(_TECH_TEXT.split())
_ONSETS = (
    "", "", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v",
    "w", "z", "br", "cr", "dr", "fl", "gr", "pl", "pr", "sh", "st", "th", "tr", "ch", "sp", "bl",
    "cl", "sl", "sn", "sw", "qu",
)  # fmt: skip
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "i", "o", "ai", "ea", "ee", "ie", "oo", "ou", "y")
_CODAS = ("", "", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ng", "ck", "rt", "nt", "x", "th")
_SUFFIXES = ("", "", "", "", "ing", "ed", "er", "ly", "tion", "ness", "able", "s", "ment", "ist")

_HANZI = (
    "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家"
    "学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经"
    "头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者"
    "向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气"
    "信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活"
    "难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清"
    "物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功"
    "指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强"
    "步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版"
    "双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志"
)
_JA_NOUNS_TEXT = (
    "設定 問題 確認 実行 方法 時間 会議 資料 開発 環境 仕様 変更 対応 作業 結果 原因 "
    "修正 追加 削除 検索 表示 画面 入力 出力 処理 接続 認証 権限 予定 明日 今日 昨日 "
    "来週 報告 質問 回答 説明 理由 最新 版本 機能 部分 全体 手順 準備 完了 失敗 成功 "
    "注意 必要 可能 簡単 大丈夫 本当 自分 会社 サーバー データベース エラー ファイル "
    "テスト ログ メモリ キャッシュ ボット チャンネル メッセージ ユーザー パスワード "
    "ダウンロード アップロード コマンド ターミナル スクリプト バックアップ デプロイ "
    "ブランチ コミット レビュー プロジェクト タスク スケジュール ネットワーク"
)
_JA_NOUNS = tuple(_JA_NOUNS_TEXT.split())
_JA_PARTICLES = ("は", "が", "を", "に", "で", "と", "の", "も", "から", "まで", "について")
_JA_ENDINGS = (
    "します", "しました", "してください", "できますか", "です", "でした", "ですね", "ません",
    "ありますか", "お願いします", "と思います", "かもしれません", "になりました",
)  # fmt: skip
_SENTENCE_ENDS = ".........?!"


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """Words by rank (most common first), their Zipf–Mandelbrot weights, and a sampling table.

    `table` holds 2**20 slots, each word in proportion to its weight (at least one slot), so a
    sample is one table lookup per word instead of a bisection.
    """

    words: tuple[str, ...]
    weights: tuple[float, ...]
    table: tuple[str, ...]

    def sample(self, rng: random.Random, k: int) -> list[str]:
        table = self.table
        shift = 32 - _TABLE_BITS
        return [table[x >> shift] for x in struct.unpack(f"<{k}I", rng.randbytes(4 * k))]


_TABLE_BITS = 20


@lru_cache(maxsize=1)
def vocabulary() -> Vocabulary:
    """The fixed ~40k-word vocabulary (independent of the corpus seed)."""
    rng = random.Random(VOCAB_SEED)
    words: list[str] = []
    seen: set[str] = set()
    for word in (*_COMMON, *_TECH):
        if word not in seen:
            seen.add(word)
            words.append(word)
    while len(words) < VOCAB_SIZE:
        depth = len(words) / VOCAB_SIZE  # rarer words are longer
        syllables = 1 + min(3, int(depth * 2.5 + rng.random() * 1.6))
        word = "".join(
            rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables)
        ) + rng.choice(_SUFFIXES)
        if len(word) >= 2 and word not in seen:
            seen.add(word)
            words.append(word)
    weights = [1.0 / (rank + 2.7) ** 1.02 for rank in range(1, len(words) + 1)]
    size = 1 << _TABLE_BITS
    total = sum(weights)
    slots = [max(1, round(w / total * size)) for w in weights]
    slots[0] -= sum(slots) - size  # the commonest word absorbs the rounding
    table: list[str] = []
    for word, count in zip(words, slots, strict=True):
        table.extend([word] * count)
    return Vocabulary(tuple(words), tuple(weights), tuple(table))


@dataclass(frozen=True, slots=True)
class Chat:
    chat_type: str | None
    chat_id: str | None
    thread_id: str | None
    user_id: str | None
    session_key: str | None


@dataclass(frozen=True, slots=True)
class SessionPlan:
    """Everything about a session that is decided before its messages are written."""

    index: int
    id: str
    source: str
    chat: Chat
    n_messages: int
    started_at: float
    window: float  # the messages fit in [started_at, started_at + window]
    parent_id: str | None
    lineage_position: int  # 0 for a root, 1 for "x #2", ...
    title: str | None
    title_source: str | None
    language: str  # "en", "zh" or "ja"
    model: str
    prompt_variant: int
    end_reason: str | None  # None: still open


@dataclass(slots=True)
class BuildStats:
    """What `build_store` wrote and how long it took."""

    path: Path
    sessions: int
    messages: int
    seconds: float
    content_bytes: int = 0  # UTF-8 bytes of content + tool_calls over all messages
    cjk_messages: int = 0
    by_role: dict[str, int] = field(default_factory=dict)
    by_source: dict[str, int] = field(default_factory=dict)

    def add(self, other: ChunkStats) -> None:
        self.content_bytes += other.content_bytes
        self.cjk_messages += other.cjk_messages
        for role, count in other.by_role.items():
            self.by_role[role] = self.by_role.get(role, 0) + count
        for source, count in other.by_source.items():
            self.by_source[source] = self.by_source.get(source, 0) + count


@dataclass(slots=True)
class ChunkStats:
    content_bytes: int = 0
    cjk_messages: int = 0
    by_role: Counter[str] = field(default_factory=Counter)
    by_source: Counter[str] = field(default_factory=Counter)


# --- the plan -------------------------------------------------------------------------------


def _weighted(rng: random.Random, table: Sequence[tuple[str, float]]) -> str:
    return rng.choices([name for name, _ in table], weights=[w for _, w in table])[0]


def _message_counts(rng: random.Random, sessions: int, messages: int) -> list[int]:
    """Heavy-tailed (lognormal) counts, at least 2 each, summing to exactly `messages`."""
    if sessions < 1 or messages < 2 * sessions:
        raise ValueError("need at least one session and two messages per session")
    weights = [rng.lognormvariate(0.0, 1.1) for _ in range(sessions)]
    spare = messages - 2 * sessions
    scale = spare / sum(weights)
    shares = [w * scale for w in weights]
    counts = [2 + int(s) for s in shares]
    short = messages - sum(counts)
    by_fraction = sorted(range(sessions), key=lambda i: shares[i] - int(shares[i]), reverse=True)
    for i in by_fraction[:short]:
        counts[i] += 1
    return counts


def _new_chat(rng: random.Random, source: str) -> Chat:
    if source == "cli":
        return Chat(None, None, None, None, None)
    user = {
        "telegram": lambda: str(rng.randint(10_000_000, 7_999_999_999)),
        "slack": lambda: "U" + f"{rng.getrandbits(40):010X}",
        "discord": lambda: str(rng.getrandbits(60) | (1 << 59)),
    }[source]()
    chat_type = rng.choices(["dm", "group", "thread"], weights=[0.6, 0.3, 0.1])[0]
    if source == "telegram":
        chat_id = user if chat_type == "dm" else f"-100{rng.randint(10**9, 10**10 - 1)}"
    elif source == "slack":
        chat_id = ("D" if chat_type == "dm" else "C") + f"{rng.getrandbits(40):010X}"
    else:
        chat_id = str(rng.getrandbits(60) | (1 << 59))
    thread_id = None
    if chat_type == "thread":
        thread_id = (
            f"{BASE_TIME - rng.random() * SPAN_SECONDS:.6f}"
            if source == "slack"
            else (str(rng.randint(1, 99_999)))
        )
    parts = ["agent:main", source, chat_type, chat_id]
    if thread_id:
        parts.append(thread_id)
    if chat_type == "group":
        parts.append(user)
    return Chat(chat_type, chat_id, thread_id, user, ":".join(parts))


def _session_id(rng: random.Random, started_at: float, source: str, taken: set[str]) -> str:
    stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime(started_at))
    digits = 6 if source == "cli" else 8
    while True:
        candidate = f"{stamp}_{rng.getrandbits(digits * 4):0{digits}x}"
        if candidate not in taken:
            taken.add(candidate)
            return candidate


def _title_words(rng: random.Random, language: str, count: int) -> str:
    if language == "zh":
        return "".join(rng.choices(_HANZI[:400], k=count * 2))
    if language == "ja":
        return "".join(rng.choices(_JA_NOUNS, k=max(1, count // 2)))
    words = vocabulary().sample(rng, count)
    return " ".join(words).capitalize()


def _free_title(rng: random.Random, language: str, count: int, taken: set[str]) -> str:
    title = _title_words(rng, language, count)[:80]
    while title in taken:
        title = f"{title} {vocabulary().sample(rng, 1)[0]}"[-90:]
    taken.add(title)
    return title


def plan_corpus(*, sessions: int, messages: int, seed: int = 1) -> list[SessionPlan]:
    """The sessions of the corpus in start order (parents before their continuations)."""
    rng = random.Random(f"hermes-corpus-plan:{seed}")
    counts = _message_counts(rng, sessions, messages)
    chats: dict[str, list[Chat]] = {name: [] for name, _ in SOURCES}
    ids: set[str] = set()
    titles: set[str] = set()
    plans: list[SessionPlan] = []
    index = 0
    while index < sessions:
        length = 1
        if rng.random() < 0.06:
            while length < 4 and rng.random() < 0.55:
                length += 1
            length = max(2, length)
        length = min(length, sessions - index)
        source = _weighted(rng, SOURCES)
        pool = chats[source]
        if pool and rng.random() < 0.7:
            chat = rng.choice(pool)  # the same chat again, after a reset
        else:
            chat = _new_chat(rng, source)
            pool.append(chat)
        roll = rng.random()
        language = "zh" if roll < 0.035 else "ja" if roll < 0.06 else "en"
        model = _weighted(rng, MODELS)
        variant = rng.randrange(8)
        roll = rng.random()
        base_title, base_source = None, None
        if roll < 0.45:
            base_title, base_source = _free_title(rng, language, rng.randint(3, 7), titles), "auto"
        elif roll < 0.55:
            base_title, base_source = _free_title(rng, language, rng.randint(1, 4), titles), "user"
        start = BASE_TIME - SPAN_SECONDS + SPAN_SECONDS * (index + rng.random()) / sessions
        parent_id: str | None = None
        for position in range(length):
            n = counts[index]
            window = n * 75.0 * rng.lognormvariate(0.0, 0.5)
            start = min(start, BASE_TIME - window - 60.0)
            session_id = _session_id(rng, start, source, ids)
            title, title_source = base_title, base_source
            if base_title is not None and position > 0:
                title, title_source = f"{base_title} #{position + 1}", "derived"
                titles.add(title)
            if position < length - 1:
                end_reason: str | None = "compression"
            elif index >= sessions * 0.97 and rng.random() < 0.8:
                end_reason = None  # the newest sessions are mostly still open
            elif rng.random() < 0.9:
                end_reason = (
                    rng.choice(["cli_exit", "cli_exit", "new_session"])
                    if source == "cli"
                    else rng.choice(["idle", "idle", "daily", "new_session", "user_reset"])
                )
            else:
                end_reason = None
            plans.append(
                SessionPlan(
                    index=index,
                    id=session_id,
                    source=source,
                    chat=chat,
                    n_messages=n,
                    started_at=start,
                    window=window,
                    parent_id=parent_id,
                    lineage_position=position,
                    title=title,
                    title_source=title_source,
                    language=language,
                    model=model,
                    prompt_variant=variant,
                    end_reason=end_reason,
                )
            )
            parent_id = session_id
            start = start + window + rng.uniform(5.0, 120.0)
            index += 1
    return plans


# --- text -----------------------------------------------------------------------------------


def _rare_token(rng: random.Random, words: Sequence[str]) -> str:
    kind = rng.randrange(6)
    if kind == 0:
        return str(rng.randint(0, 99_999))
    if kind == 1:
        return f"{rng.getrandbits(28):07x}"
    if kind == 2:
        return f"v{rng.randint(0, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 99)}"
    if kind == 3:
        return f"{rng.choice(words)}_{rng.choice(words)}_{rng.randint(1, 999)}"
    if kind == 4:
        return f"src/{rng.choice(words)}/{rng.choice(words)}.py:{rng.randint(1, 900)}"
    return f"{rng.choice(words).upper()}-{rng.randint(100, 9999)}"


def prose(rng: random.Random, chars: int) -> str:
    """English-like sentences of roughly `chars` characters from the Zipf vocabulary."""
    n = max(1, round(chars / CHARS_PER_WORD))
    words = vocabulary().sample(rng, n)
    r = rng.random
    for _ in range(int(n * 0.02 + r())):
        words[int(r() * n)] = _rare_token(rng, words)
    i = 0
    while i < n:
        words[i] = words[i].capitalize()
        step = 4 + int(r() * 17)
        last = min(i + step, n) - 1
        if last - i > 8 and r() < 0.4:
            words[(i + last) // 2] += ","
        words[last] += _SENTENCE_ENDS[int(r() * len(_SENTENCE_ENDS))]
        i += step
    return " ".join(words)


def chinese(rng: random.Random, chars: int) -> str:
    """Chinese clauses of roughly `chars` characters, with the odd English technical word."""
    out: list[str] = []
    total = 0
    while total < chars:
        clause = "".join(rng.choices(_HANZI, k=rng.randint(4, 16)))
        if rng.random() < 0.15:
            clause += " " + rng.choice(_TECH) + " "
        out.append(clause + rng.choice("，，，。。？"))
        total += len(clause) + 1
    return "".join(out)


def japanese(rng: random.Random, chars: int) -> str:
    """Japanese sentences (kanji and katakana nouns, particles, verb endings) of ~`chars`."""
    out: list[str] = []
    total = 0
    while total < chars:
        pieces = [
            rng.choice(_JA_NOUNS) + rng.choice(_JA_PARTICLES) for _ in range(rng.randint(2, 5))
        ]
        sentence = "".join(pieces) + rng.choice(_JA_ENDINGS) + rng.choice("。。。？")
        out.append(sentence)
        total += len(sentence)
    return "".join(out)


def _cjk(rng: random.Random, language: str, chars: int) -> str:
    return japanese(rng, chars) if language == "ja" else chinese(rng, chars)


def _picker(rng: random.Random) -> Callable[[Sequence[str]], str]:
    """`rng.choice` without its overhead (the hot loops pick millions of words)."""
    r = rng.random
    return lambda seq: seq[int(r() * len(seq))]


def _code_block(rng: random.Random, lines: int) -> str:
    pick = _picker(rng)
    words = vocabulary().words[150:3000]
    out = []
    for _ in range(lines):
        a, b, c = pick(words), pick(words), pick(words)
        out.append(
            pick(
                (
                    f"def {a}_{b}({c}, {b}=None):",
                    f"    return {a}.{b}({c}, {len(a) * 7})",
                    f"    if {a} is None:",
                    f'        raise {b.capitalize()}Error(f"no {c}")',
                    f"import {a}.{b}",
                    f"    {a} = {b}[{c!r}]",
                    f"    for {a} in {b}.{c}():",
                    f"        {a}.append({b})",
                    f"{a}_{b} = {len(c) * 131}",
                )
            )
        )
    return "```" + pick(("python", "bash", "", "yaml")) + "\n" + "\n".join(out) + "\n```"


def _lognormal_chars(rng: random.Random, median: float, sigma: float, cap: int) -> int:
    return max(2, min(cap, int(rng.lognormvariate(math.log(median), sigma))))


def user_text(rng: random.Random, language: str) -> str:
    """A user's message: median ~80 characters; sometimes a pasted log or code (KBs)."""
    if rng.random() < 0.03:
        return prose(rng, 60) + "\n\n" + _log_lines(rng, _lognormal_chars(rng, 900, 0.8, 6000))
    chars = _lognormal_chars(rng, 80, 0.85, 4000)
    if language != "en" and rng.random() < 0.9:
        return _cjk(rng, language, max(4, chars // 2))
    text = prose(rng, chars)
    if rng.random() < 0.05:
        text += " " + _cjk(rng, rng.choice(("zh", "ja")), rng.randint(6, 40))
    return text


def assistant_text(rng: random.Random, language: str) -> str:
    """An assistant's reply: median ~400 characters, long tail to ~12 KB, some markdown."""
    chars = _lognormal_chars(rng, 250, 0.9, 12_000)
    if language != "en" and rng.random() < 0.85:
        body = _cjk(rng, language, max(8, chars // 2))
    else:
        body = prose(rng, chars)
        if rng.random() < 0.05:
            body += "\n\n" + _cjk(rng, rng.choice(("zh", "ja")), rng.randint(10, 80))
    roll = rng.random()
    if roll < 0.30:
        items = "\n".join(f"- {prose(rng, rng.randint(30, 100))}" for _ in range(rng.randint(2, 5)))
        body = f"{body}\n\n{items}"
    elif roll < 0.45:
        body = f"{body}\n\n{_code_block(rng, rng.randint(3, 25))}"
    return body


def _log_lines(rng: random.Random, chars: int) -> str:
    pick = _picker(rng)
    r = rng.random
    words = vocabulary().words[:2000]
    lines: list[str] = []
    total = 0
    while total < chars:
        kind = int(r() * 5)
        if kind <= 1:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(BASE_TIME - r() * SPAN_SECONDS))
            level = pick(("INFO", "INFO", "INFO", "DEBUG", "WARNING", "ERROR"))
            line = f"{when},{int(r() * 1000):03d} {level} {pick(words)}.{pick(words)}: " + prose(
                rng, 20 + int(r() * 50)
            )
        elif kind == 2:
            line = (
                f"drwxr-xr-x  {1 + int(r() * 9)} hermes staff {int(r() * 99999):>6} "
                f"{pick(words)}_{pick(words)}"
            )
        elif kind == 3:
            line = (
                f"src/{pick(words)}/{pick(words)}.py:{int(r() * 800)}: "
                f"{pick(words)} {pick(words)} {pick(words)}"
            )
        else:
            outcome = pick(("PASSED", "PASSED", "PASSED", "FAILED", "SKIPPED"))
            line = f"tests/test_{pick(words)}.py::test_{pick(words)}_{pick(words)} {outcome}"
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines)


def tool_call(rng: random.Random, tool: str) -> dict[str, Any]:
    """One OpenAI-style tool call (its `arguments` is itself a JSON string)."""
    words = vocabulary().words[:3000]
    args: dict[str, Any]
    if tool == "terminal":
        args = {"command": f"{rng.choice(('ls -la', 'grep -rn', 'pytest -q', 'cat', 'git log'))} "
                f"{rng.choice(words)}/{rng.choice(words)}"}  # fmt: skip
    elif tool in ("read_file", "write_file", "patch"):
        args = {"path": f"src/{rng.choice(words)}/{rng.choice(words)}.py"}
        if tool != "read_file":
            args["content"] = _code_block(rng, rng.randint(2, 8))
    elif tool == "web_search":
        args = {"query": prose(rng, rng.randint(20, 60)).rstrip(".?!")}
    else:
        args = {"query": " ".join(vocabulary().sample(rng, rng.randint(1, 3))), "limit": 5}
    return {
        "id": f"call_{rng.getrandbits(96):024x}",
        "type": "function",
        "function": {"name": tool, "arguments": json.dumps(args, ensure_ascii=False)},
    }


def tool_result(rng: random.Random, tool: str, language: str) -> str:
    """A tool's JSON result: median ~1.4 KB, up to ~16 KB."""
    chars = _lognormal_chars(rng, 1400, 0.9, 16_000)
    words = vocabulary().words[:5000]
    result: dict[str, Any]
    if tool == "terminal":
        result = {"output": _log_lines(rng, chars), "exit_code": rng.choice((0, 0, 0, 1))}
    elif tool == "read_file":
        lines = _code_block(rng, max(3, chars // 38)).split("\n")[1:-1]
        numbered = "\n".join(f"{i + 1:>5}|{line}" for i, line in enumerate(lines))
        result = {"content": numbered, "total_lines": len(lines)}
    elif tool == "web_search":
        hits: list[dict[str, str]] = []
        while sum(len(h["description"]) + 60 for h in hits) < chars:
            snippet = (
                _cjk(rng, language, rng.randint(30, 120))
                if language != "en" and rng.random() < 0.5
                else prose(rng, rng.randint(80, 300))
            )
            hits.append(
                {
                    "title": prose(rng, rng.randint(20, 60)).rstrip(".?!"),
                    "url": f"https://www.{rng.choice(words)}.com/{rng.choice(words)}/"
                    f"{rng.choice(words)}-{rng.randint(1, 9999)}",
                    "description": snippet,
                }
            )
        result = {"success": True, "results": hits}
    else:
        result = {"success": True, "message": prose(rng, min(chars, 600))}
    return json.dumps(result, ensure_ascii=False)


def _system_prompt(seed: int, variant: int) -> str:
    rng = random.Random(f"hermes-corpus-prompt:{seed}:{variant}")
    return (
        "You are Hermes, an agent with tools. "
        + prose(rng, rng.randint(600, 2800))
        + "\n\n## Memory\n"
        + "\n".join(f"- {prose(rng, rng.randint(40, 120))}" for _ in range(rng.randint(2, 8)))
    )


# --- sessions -------------------------------------------------------------------------------


def _has_cjk(text: str | None) -> bool:
    return text is not None and any("\u3040" <= ch <= "\u9fff" for ch in text)


def _platform_id(rng: random.Random, source: str, ts: float, serial: int) -> str | None:
    if source == "telegram":
        return str(1000 + serial)
    if source == "slack":
        return f"{ts:.6f}"
    if source == "discord":
        return str(((int(ts * 1000) - 1_420_070_400_000) << 22) | rng.getrandbits(22))
    return None


def _tokens(text: str | None) -> int:
    return max(1, len(text.encode("utf-8")) // 4) if text else 0


class _Transcript:
    """Accumulates one session's message rows and its token totals."""

    def __init__(self, plan: SessionPlan, rng: random.Random) -> None:
        self.plan, self.rng = plan, rng
        self.rows: list[dict[str, Any]] = []
        self.ts = plan.started_at
        self.context = 0
        self.input_tokens = 0
        self.output_tokens = 0

    def add(self, role: str, content: str | None, gap: float, **extra: Any) -> None:
        self.ts += gap
        tokens = _tokens(content) + _tokens(extra.get("tool_calls"))
        if role == "assistant":
            self.input_tokens += self.context
            self.output_tokens += tokens
        self.context = min(self.context + tokens, 120_000)
        self.rows.append(
            {
                "session_id": self.plan.id,
                "role": role,
                "content": content,
                "tool_calls": extra.get("tool_calls"),
                "tool_call_id": extra.get("tool_call_id"),
                "tool_name": extra.get("tool_name"),
                "token_count": tokens,
                "timestamp": self.ts,
                "platform_message_id": extra.get("platform_message_id"),
            }
        )

    def full(self) -> bool:
        return len(self.rows) >= self.plan.n_messages

    def turn(self) -> None:
        rng, plan = self.rng, self.plan
        serial = len(self.rows)
        gap = rng.expovariate(1 / 60.0) + (rng.uniform(600, 20_000) if rng.random() < 0.05 else 0)
        self.add(
            "user",
            user_text(rng, plan.language),
            gap,
            platform_message_id=_platform_id(rng, plan.source, self.ts + gap, serial),
        )
        if rng.random() < 0.27:
            while not self.full():
                calls = [
                    tool_call(rng, rng.choice(TOOLS)) for _ in range(1 + (rng.random() < 0.15))
                ]
                words = None if rng.random() < 0.5 else prose(rng, rng.randint(20, 120))
                self.add(
                    "assistant",
                    words,
                    rng.uniform(1.5, 15.0),
                    tool_calls=json.dumps(calls, ensure_ascii=False, separators=(",", ":")),
                )
                for call in calls:
                    if self.full():
                        return
                    name = call["function"]["name"]
                    self.add(
                        "tool",
                        tool_result(rng, name, plan.language),
                        rng.uniform(0.2, 8.0),
                        tool_call_id=call["id"],
                        tool_name=name,
                    )
                if rng.random() < 0.55:
                    break
        if not self.full():
            self.add(
                "assistant",
                assistant_text(rng, plan.language),
                rng.uniform(2.0, 40.0),
                platform_message_id=_platform_id(rng, plan.source, self.ts, serial + 1),
            )


def generate_session(plan: SessionPlan, seed: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One session's row and its message rows (in order), determined by (plan, seed) alone."""
    rng = random.Random(f"hermes-corpus:{seed}:{plan.index}")
    transcript = _Transcript(plan, rng)
    while not transcript.full():
        transcript.turn()
    rows = transcript.rows[: plan.n_messages]
    # Squeeze the conversation into its planned window (continuations start after it).
    span = rows[-1]["timestamp"] - plan.started_at
    if span > plan.window:
        factor = plan.window / span
        for row in rows:
            row["timestamp"] = plan.started_at + (row["timestamp"] - plan.started_at) * factor
    last = rows[-1]["timestamp"]
    ended_at = None
    if plan.end_reason == "compression":
        ended_at = last
    elif plan.end_reason is not None:
        ended_at = min(last + rng.uniform(60.0, 3600.0), BASE_TIME)
    session = {
        "id": plan.id,
        "source": plan.source,
        "user_id": plan.chat.user_id,
        "session_key": plan.chat.session_key,
        "chat_id": plan.chat.chat_id,
        "chat_type": plan.chat.chat_type,
        "thread_id": plan.chat.thread_id,
        "title": plan.title,
        "title_source": plan.title_source,
        "model": plan.model,
        "model_config": json.dumps(
            {"temperature": 0.7, "max_tokens": 8192, "provider": plan.model.split("/")[0]}
        ),
        "system_prompt": f"{_system_prompt(seed, plan.prompt_variant)}\nPlatform: {plan.source}."
        f" Started {time.strftime('%Y-%m-%d', time.gmtime(plan.started_at))}.",
        "parent_session_id": plan.parent_id,
        "started_at": plan.started_at,
        "ended_at": ended_at,
        "end_reason": plan.end_reason,
        "last_active_at": last,
        "message_count": len(rows),
        "input_tokens": transcript.input_tokens,
        "output_tokens": transcript.output_tokens,
    }
    return session, rows


def iter_corpus(
    *, sessions: int, messages: int, seed: int = 1
) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Every session of the corpus with its messages, in plan order."""
    for plan in plan_corpus(sessions=sessions, messages=messages, seed=seed):
        yield generate_session(plan, seed)


# --- the bulk loader ------------------------------------------------------------------------

_Chunk = tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], ChunkStats]


def _generate_chunk(plans: Sequence[SessionPlan], seed: int) -> _Chunk:
    """Rows for a run of sessions, messages interleaved by time as a live fleet writes them."""
    session_rows: list[tuple[Any, ...]] = []
    message_rows: list[dict[str, Any]] = []
    stats = ChunkStats()
    for plan in plans:
        session, rows = generate_session(plan, seed)
        session_rows.append(tuple(session[c] for c in SESSION_COLUMNS))
        message_rows.extend(rows)
        stats.by_source[plan.source] += len(rows)
    message_rows.sort(key=lambda row: row["timestamp"])
    tuples = []
    for row in message_rows:
        content, calls = row["content"], row["tool_calls"]
        stats.content_bytes += len(content.encode("utf-8")) if content else 0
        stats.content_bytes += len(calls.encode("utf-8")) if calls else 0
        stats.cjk_messages += _has_cjk(content)
        stats.by_role[row["role"]] += 1
        tuples.append(tuple(row[c] for c in MESSAGE_COLUMNS))
    return session_rows, tuples, stats


def _chunks(plans: Sequence[SessionPlan], seed: int, workers: int) -> Iterator[_Chunk]:
    slices = [plans[i : i + CHUNK_SESSIONS] for i in range(0, len(plans), CHUNK_SESSIONS)]
    if workers <= 0:
        for part in slices:
            yield _generate_chunk(part, seed)
        return
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        pending: list[Future[_Chunk]] = []
        ahead = 2 * workers + 1
        for part in slices:
            pending.append(pool.submit(_generate_chunk, part, seed))
            if len(pending) > ahead:
                yield pending.pop(0).result()
        for future in pending:
            yield future.result()


def ledger_calls(
    session_rows: Sequence[tuple[Any, ...]],
    message_rows: Sequence[tuple[Any, ...]],
    *,
    until: float,
    seed: int,
) -> dict[str, tuple[str, list[Any]]]:
    """One ledger call per assistant message of a chunk: session id → (source, calls)."""
    from shared.usage import REPLY, TOOL_ROUND, ModelCall, ToolUse

    meta = {
        row[SESSION_COLUMNS.index("id")]: (
            row[SESSION_COLUMNS.index("source")],
            row[SESSION_COLUMNS.index("model")],
        )
        for row in session_rows
    }
    column = {name: i for i, name in enumerate(MESSAGE_COLUMNS)}
    rng = random.Random(f"hermes-ledger:{seed}:{message_rows[0][column['timestamp']]!r}")
    context: dict[str, int] = {}
    calls: dict[str, tuple[str, list[Any]]] = {}
    start = BASE_TIME - SPAN_SECONDS
    for row in message_rows:
        session_id = row[column["session_id"]]
        tokens = int(row[column["token_count"]] or 0)
        seen = context.get(session_id, 0)
        context[session_id] = min(seen + tokens, 120_000)
        if row[column["role"]] != "assistant":
            continue
        source, model = meta[session_id]
        at = until - 365 * 86_400 + (row[column["timestamp"]] - start) / SPAN_SECONDS * 365 * 86_400
        raw_calls = row[column["tool_calls"]]
        tools = tuple(
            ToolUse(call["function"]["name"], rng.random() < 0.04)
            for call in (json.loads(raw_calls) if raw_calls else [])
        )
        big = seen > 2_000 and not model.startswith(("local/", "qwen/"))
        call = ModelCall(
            kind=TOOL_ROUND if tools else REPLY,
            model=model,
            at=min(at, until),
            input_tokens=seen + 200,
            output_tokens=tokens,
            latency_ms=rng.lognormvariate(7.0, 0.7),
            cached_tokens=int(seen * 0.6) if big else None,
            tools=tools,
        )
        calls.setdefault(session_id, (source, []))[1].append(call)
    return calls


def build_store(
    path: Path,
    *,
    sessions: int,
    messages: int,
    seed: int = 1,
    workers: int = 1,
    progress: Any = None,
    ledger_until: float | None = None,
) -> BuildStats:
    """Write the corpus into a new state.db at `path` through the real schema; return its stats.

    The file (and its -wal/-shm) must not exist. Tables, FTS5 index and counters come from
    `open_store` and the triggers it installs; rows go in with `executemany` in transactions of
    `CHUNK_SESSIONS` sessions. `workers` processes generate text while this one inserts
    (0: generate in-process). `progress(done_messages, total_messages)` is called per chunk.
    With `ledger_until`, the usage ledger is written too (`ledger_calls`).
    """
    from shared.pricing import Pricing
    from shared.store import usage
    from shared.store.engine import open_store  # the store is only needed to build one

    for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        if leftover.exists():
            raise FileExistsError(f"{leftover} exists; build_store writes a new store")
    started = time.perf_counter()
    plans = plan_corpus(sessions=sessions, messages=messages, seed=seed)
    stats = BuildStats(path=path, sessions=len(plans), messages=messages, seconds=0.0)
    insert_session = (
        f"INSERT INTO sessions ({', '.join(SESSION_COLUMNS)}) "
        f"VALUES ({', '.join('?' * len(SESSION_COLUMNS))})"
    )
    insert_message = (
        f"INSERT INTO messages ({', '.join(MESSAGE_COLUMNS)}) "
        f"VALUES ({', '.join('?' * len(MESSAGE_COLUMNS))})"
    )
    store = open_store(f"sqlite:///{path}")
    pricing = Pricing()
    try:
        done = 0
        for session_rows, message_rows, chunk_stats in _chunks(plans, seed, workers):
            with store.write() as conn:
                conn.exec_driver_sql(insert_session, session_rows)
                conn.exec_driver_sql(insert_message, message_rows)
                if ledger_until is not None:
                    found = ledger_calls(session_rows, message_rows, until=ledger_until, seed=seed)
                    for session_id, (source, calls) in found.items():
                        where = usage.Where(source, session_id)
                        usage.record(conn, calls, where, pricing)
            stats.add(chunk_stats)
            done += len(message_rows)
            if progress is not None:
                progress(done, messages)
    finally:
        store.close()
    stats.seconds = time.perf_counter() - started
    return stats
