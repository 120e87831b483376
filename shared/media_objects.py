"""Attachments' bytes in S3-compatible object storage (`media.url = s3://bucket/prefix`).

The rows of `media_blobs` (shared.store.media) keep each blob's metadata; its bytes live here
under `<prefix>/<sha256>`. Content addressing makes every write idempotent: a retried upload,
or two hosts uploading the same file at once, write the same bytes to the same key. An object
is written before its row commits and deleted after its row's deletion commits, so a failure
between the two leaves at worst an object no row names (an orphan the sweep removes), never a
row without its object.

boto3 is imported only when a store is built: the embedded default never needs it
(`pip install 'hermes-fleet[s3]'`). Credentials come from the settings when given, else from
boto3's own chain (AWS_ACCESS_KEY_ID…, ~/.aws, an instance role).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shared.sections import MediaSettings

log = logging.getLogger(__name__)

_DIGEST = re.compile(r"[0-9a-f]{64}")
_DELETE_BATCH = 1000  # DeleteObjects takes at most this many keys


class MediaStorageError(RuntimeError):
    """The object store could not be reached or refused a request; the message says which."""


@dataclass(frozen=True, slots=True)
class Listed:
    sha256: str
    modified: float  # seconds since the epoch


class MediaObjects:
    """One bucket and prefix, through one boto3 client (thread-safe; build one per process)."""

    def __init__(self, client: Any, bucket: str, prefix: str, url: str) -> None:
        self._client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = url

    def key(self, sha256: str) -> str:
        return f"{self.prefix}/{sha256}" if self.prefix else sha256

    def _failed(self, action: str, error: Exception) -> MediaStorageError:
        return MediaStorageError(f"media store {self.url}: could not {action}: {error}")

    def put(self, sha256: str, data: bytes, media_type: str) -> None:
        """Write the bytes of blob `sha256` (the same bytes again when it is already there)."""
        try:
            self._client.put_object(
                Bucket=self.bucket, Key=self.key(sha256), Body=data, ContentType=media_type
            )
        except Exception as error:
            raise self._failed(f"store blob {sha256[:12]}", error) from error

    def get(self, sha256: str) -> bytes:
        try:
            found = self._client.get_object(Bucket=self.bucket, Key=self.key(sha256))
            return bytes(found["Body"].read())
        except Exception as error:
            raise self._failed(f"read blob {sha256[:12]}", error) from error

    def delete(self, digests: Iterable[str]) -> list[str]:
        """Delete these blobs' objects; the digests whose deletion failed (left as orphans for
        the sweep), logged, never raised: the rows that named them are gone already."""
        wanted = list(dict.fromkeys(digests))
        failed: list[str] = []
        for start in range(0, len(wanted), _DELETE_BATCH):
            batch = wanted[start : start + _DELETE_BATCH]
            objects = [{"Key": self.key(sha)} for sha in batch]
            try:
                answer = self._client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True}
                )
            except Exception as error:
                log.warning(
                    "media store %s: could not delete %d objects: %s", self.url, len(batch), error
                )
                failed.extend(batch)
                continue
            for err in answer.get("Errors", []):
                failed.append(str(err.get("Key", "")).rsplit("/", 1)[-1])
        return failed

    def listed(self) -> Iterator[Listed]:
        """Every blob object under the prefix (keys that are not a sha256 are skipped)."""
        start = f"{self.prefix}/" if self.prefix else ""
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=start
            )
            for page in pages:
                for item in page.get("Contents", []):
                    name = str(item["Key"]).removeprefix(start)
                    if _DIGEST.fullmatch(name):
                        yield Listed(name, item["LastModified"].timestamp())
        except Exception as error:
            raise self._failed("list the bucket", error) from error


def split_url(url: str) -> tuple[str, str]:
    """`s3://bucket/some/prefix` → ("bucket", "some/prefix")."""
    rest = url.removeprefix("s3://")
    bucket, _, prefix = rest.partition("/")
    return bucket, prefix.strip("/")


def from_settings(media: MediaSettings) -> MediaObjects | None:
    """The object store `media.url` names, or None when the bytes stay in the database."""
    if media.url is None:
        return None
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise MediaStorageError(
            "media.url is set but boto3 is not installed: pip install 'hermes-fleet[s3]'"
        ) from None
    bucket, prefix = split_url(media.url)
    secret = media.secret_access_key.get_secret_value() if media.secret_access_key else None
    client = boto3.session.Session().client(
        "s3",
        endpoint_url=media.endpoint_url,
        region_name=media.region,
        aws_access_key_id=media.access_key_id,
        aws_secret_access_key=secret,
        # A bucket that does not answer fails the upload in seconds, not minutes.
        config=Config(connect_timeout=5, read_timeout=30, retries={"max_attempts": 3}),
    )
    return MediaObjects(client, bucket, prefix, media.url)
