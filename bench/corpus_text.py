"""The synthetic corpus's text: a Zipf vocabulary (English head, pseudo-word tail), CJK, prose,
code blocks, user turns, assistant replies, tool calls and results (bench/corpus.py uses it).

Everything is drawn from a seeded `random.Random` passed in: the same seed gives the same text.
"""

from __future__ import annotations

import json
import math
import random
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

BASE_TIME = 1_767_225_600.0  # 2026-01-01T00:00:00Z: the corpus's newest activity is before this


SPAN_SECONDS = 180 * 86_400  # sessions start over the 180 days before BASE_TIME


VOCAB_SIZE = 40_000


VOCAB_SEED = 20_240_917


CHARS_PER_WORD = 7.4  # mean word length plus its space and punctuation


TOOLS = ("terminal", "read_file", "web_search", "write_file", "patch", "session_search")


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
