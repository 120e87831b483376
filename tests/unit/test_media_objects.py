"""`media.*` settings and the object store they build: unset is the database; a URL that is not
`s3://bucket[/prefix]` is refused; boto3 missing is said plainly, naming the extra."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from shared.media_objects import MediaStorageError, from_settings, split_url
from shared.sections import MediaSettings
from shared.settings import load_settings


def test_unset_means_the_database() -> None:
    assert MediaSettings().url is None
    assert from_settings(MediaSettings()) is None
    assert MediaSettings.model_validate({"url": " "}).url is None  # HERMES_MEDIA__URL=


@pytest.mark.parametrize(
    ("url", "parts"),
    [
        ("s3://bucket", ("bucket", "")),
        ("s3://bucket/", ("bucket", "")),
        ("s3://bucket/fleet/media/", ("bucket", "fleet/media")),
    ],
)
def test_bucket_and_prefix(url: str, parts: tuple[str, str]) -> None:
    assert MediaSettings.model_validate({"url": url}).url == url
    assert split_url(url) == parts


@pytest.mark.parametrize("url", ["https://bucket.example.com/x", "s3://", "s3:///prefix", "bucket"])
def test_other_urls_are_refused(url: str) -> None:
    with pytest.raises(ValidationError, match=r"s3://bucket\[/prefix\]"):
        MediaSettings.model_validate({"url": url})


def test_the_secret_is_a_secret() -> None:
    media = MediaSettings.model_validate({"url": "s3://b", "secret_access_key": "hush"})
    assert "hush" not in repr(media) and "hush" not in str(media)


def test_boto3_missing_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)  # as if not installed
    with pytest.raises(MediaStorageError, match=r"boto3 is not installed.*hermes-fleet\[s3\]"):
        from_settings(MediaSettings.model_validate({"url": "s3://bucket/media"}))


def test_a_worker_without_boto3_refuses_to_start_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from workers.cli import worker

    monkeypatch.setitem(sys.modules, "boto3", None)  # as if not installed
    env = {"HERMES_HOME": str(tmp_path), "HERMES_MEDIA__URL": "s3://bucket/media"}
    settings = load_settings(env)
    result = CliRunner().invoke(
        worker, ["--skip-missing-sdks"], obj=SimpleNamespace(settings=settings)
    )
    assert result.exit_code == 1, result.output
    assert "boto3 is not installed" in result.output and "hermes-fleet[s3]" in result.output
