"""Importing a directory of legacy transcripts (shared/legacy.py) and proving what is safe.

Each file whose session is not in the store yet goes through the store's import path
(portability.import_documents: the same checks and atomic writes as `sessions import`). Then
every file is verified against the store by message count: a file is safe to delete only when
its session is there with exactly the messages the file holds and no line of it was left out.
Nothing here deletes; `delete_verified` does, and only files verified in the same run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import tzinfo
from pathlib import Path

from shared.db.engine import Store
from shared.legacy import LegacyTranscript, read_transcript, session_id_of, transcript_files
from shared.store.portability import import_documents, stored_message_counts

IMPORTED = "imported"
PRESENT = "present"  # already in the store before this run
EMPTY = "empty"  # no message in the file: nothing to import
REFUSED = "refused"
REJECTED = "rejected"  # the store refused the session (the reason is in `problem`)
# state_meta: the newest pending transcript a chat has mentioned (ids sort by time), so the
# notice shows once per HERMES_HOME, and again only when a newer transcript turns up.
NOTICE_KEY = "legacy.noticed_up_to"


@dataclass
class FileOutcome:
    transcript: LegacyTranscript
    status: str
    stored: int | None = None  # messages the store holds for the session after the run
    problem: str | None = None

    @property
    def path(self) -> Path:
        return self.transcript.path

    @property
    def verified(self) -> bool:
        """Every message of the file is in the store and no line was left out."""
        if self.transcript.refused is not None or self.transcript.bad or self.problem:
            return False
        if self.status == EMPTY:
            return True
        return self.stored == self.transcript.messages


@dataclass
class LegacyReport:
    outcomes: list[FileOutcome] = field(default_factory=list)

    @property
    def safe_to_delete(self) -> list[Path]:
        return [outcome.path for outcome in self.outcomes if outcome.verified]

    @property
    def imported(self) -> list[FileOutcome]:
        return [outcome for outcome in self.outcomes if outcome.status == IMPORTED]

    @property
    def troubled(self) -> bool:
        """Some file or line could not be imported, or a count did not match."""
        return any(
            outcome.status in (REFUSED, REJECTED) or not outcome.verified
            for outcome in self.outcomes
        )


def import_legacy(store: Store, directory: Path, zone: tzinfo | None = None) -> LegacyReport:
    """Import `directory`'s transcripts whose session is new, then verify every file."""
    transcripts = [read_transcript(path, zone) for path in transcript_files(directory)]
    documents = [
        (number, transcript.document)
        for number, transcript in enumerate(transcripts)
        if transcript.document is not None
    ]
    done = import_documents(store, documents)
    rejected = dict(done.bad)
    written = set(done.written)
    with store.read() as conn:
        stored = stored_message_counts(
            conn, (t.session_id for t in transcripts if t.document is not None)
        )
    report = LegacyReport()
    for number, transcript in enumerate(transcripts):
        if transcript.refused is not None:
            status, problem = REFUSED, transcript.refused
        elif transcript.document is None:
            status, problem = EMPTY, None
        elif number in rejected:
            status, problem = REJECTED, rejected[number]
        else:
            status = IMPORTED if transcript.session_id in written else PRESENT
            problem = None
        outcome = FileOutcome(transcript, status, stored.get(transcript.session_id), problem)
        report.outcomes.append(outcome)
    return report


def pending_transcripts(store: Store, directory: Path) -> list[str]:
    """Session ids of `directory`'s transcripts that are not in the store (by file name only:
    cheap enough for every chat start)."""
    if not directory.is_dir():
        return []
    ids = [sid for path in transcript_files(directory) if (sid := session_id_of(path))]
    if not ids:
        return []
    with store.read() as conn:
        present = stored_message_counts(conn, ids)
    return [sid for sid in ids if sid not in present]


def delete_verified(paths: Iterable[Path]) -> list[tuple[Path, str]]:
    """Delete files a run verified; returns those that could not be deleted, with why."""
    failed: list[tuple[Path, str]] = []
    for path in paths:
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError as error:
            failed.append((path, error.strerror or str(error)))
    return failed
