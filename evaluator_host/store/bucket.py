"""An S3-compatible bucket (``EVALUATOR_HOST_BLOB_URL=s3://bucket/prefix``), through boto3.

Contract:

* :class:`Bucket` is the few object operations the service needs — put a file or bytes, get an object whole
  or a byte range of it, ask whether one exists, list and delete under a prefix — each under the URL's
  prefix (``key`` arguments are relative to it).
* Every failure to reach the bucket, a refusal (bad credentials, access denied, no such bucket) or an answer
  that is not S3's raises :class:`~evaluator_host.errors.StorageUnavailable` (503, retryable) naming the
  bucket and what it answered — never the credentials, never a traceback in the answer. A missing object is
  not an error (``None`` / ``False``).
* Settings: ``blob_endpoint_url`` (an S3-compatible server: path-style addressing), ``blob_region``,
  ``blob_access_key_id`` / ``blob_secret_access_key``; unset ones fall back to boto3's own chain (``AWS_*``
  variables, a role). Connections time out after 5 s and a request is tried 3 times, so an unreachable bucket
  answers within seconds, not minutes.
* The client is thread-safe (boto3's clients are); call from a thread: every method blocks.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import IO, Any
from urllib.parse import urlsplit

import boto3
from boto3.exceptions import S3UploadFailedError
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from evaluator_host.errors import StorageUnavailable
from evaluator_host.settings import Settings

__all__ = ["Bucket"]

_MISSING = {"404", "NoSuchKey", "NotFound"}


class Bucket:
    """The bucket and prefix of an ``s3://bucket/prefix`` URL (module docstring)."""

    def __init__(self, url: str, client: Any) -> None:
        parts = urlsplit(url)
        self.url = url
        self.name = parts.netloc
        self.prefix = parts.path.strip("/")
        self.client = client

    @classmethod
    def from_settings(cls, settings: Settings) -> Bucket:
        """The bucket of ``settings.blob_url``, with the endpoint, region and credentials settings."""
        assert settings.blob_url is not None
        config = Config(
            connect_timeout=5,
            read_timeout=60,
            retries={"mode": "standard", "total_max_attempts": 3},
            s3={"addressing_style": "path"} if settings.blob_endpoint_url else {},
        )
        client = boto3.session.Session().client(
            "s3",
            endpoint_url=settings.blob_endpoint_url or None,
            region_name=settings.blob_region or None,
            aws_access_key_id=settings.blob_access_key_id or None,
            aws_secret_access_key=settings.blob_secret_access_key or None,
            config=config,
        )
        return cls(settings.blob_url, client)

    def key(self, name: str) -> str:
        """The object key of ``name`` under the prefix."""
        return f"{self.prefix}/{name}" if self.prefix else name

    def _failed(self, doing: str, exc: Exception) -> StorageUnavailable:
        if isinstance(exc, ClientError):
            error = exc.response.get("Error", {})
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            said = f"{error.get('Code') or status}: {error.get('Message') or 'no message'}"
        else:  # EndpointConnectionError, ConnectTimeoutError, NoCredentialsError, ...
            said = f"{type(exc).__name__}: {exc}"
        return StorageUnavailable(
            f"the datasets' bucket {self.url} did not answer while {doing} ({said[:300]}); nothing was kept: "
            "check EVALUATOR_HOST_BLOB_URL, the endpoint and the credentials, then retry"
        )

    def _call(self, doing: str, method: str, **kwargs: Any) -> Any:
        try:
            return getattr(self.client, method)(Bucket=self.name, **kwargs)
        except ClientError as exc:
            raise self._failed(doing, exc) from exc
        except BotoCoreError as exc:
            raise self._failed(doing, exc) from exc

    def check(self) -> None:
        """Raise :class:`StorageUnavailable` unless the bucket answers and lets these credentials in."""
        self._call("checking the bucket", "head_bucket")

    def put_file(self, name: str, src: IO[bytes], doing: str) -> None:
        """Store ``src`` (from its current position) as object ``name`` (multipart past 8 MiB)."""
        try:
            self.client.upload_fileobj(src, self.name, self.key(name))
        except (ClientError, BotoCoreError, S3UploadFailedError) as exc:
            raise self._failed(doing, exc) from exc

    def put_bytes(self, name: str, data: bytes, doing: str) -> None:
        """Store ``data`` as object ``name``."""
        self._call(doing, "put_object", Key=self.key(name), Body=data)

    def get_bytes(self, name: str, doing: str) -> bytes | None:
        """Object ``name`` whole; None when there is none."""
        try:
            answer = self.client.get_object(Bucket=self.name, Key=self.key(name))
            return bytes(answer["Body"].read())
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _MISSING:
                return None
            raise self._failed(doing, exc) from exc
        except BotoCoreError as exc:
            raise self._failed(doing, exc) from exc

    def get_range(self, name: str, start: int, end: int, doing: str) -> bytes:
        """Bytes ``start`` to ``end`` (exclusive) of object ``name``."""
        try:
            answer = self.client.get_object(Bucket=self.name, Key=self.key(name), Range=f"bytes={start}-{end - 1}")
            return bytes(answer["Body"].read())
        except (ClientError, BotoCoreError) as exc:
            raise self._failed(doing, exc) from exc

    def exists(self, name: str, doing: str) -> bool:
        """Whether object ``name`` exists."""
        try:
            self.client.head_object(Bucket=self.name, Key=self.key(name))
            return True
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _MISSING:
                return False
            raise self._failed(doing, exc) from exc
        except BotoCoreError as exc:
            raise self._failed(doing, exc) from exc

    def listing(self, under: str, doing: str) -> Iterator[tuple[str, datetime]]:
        """(name relative to the prefix, last modified) of every object whose name starts with ``under``."""
        start = self.key(under)
        cut = len(self.key(""))
        token: dict[str, Any] = {}
        while True:
            page = self._call(doing, "list_objects_v2", Prefix=start, **token)
            for item in page.get("Contents", []):
                yield item["Key"][cut:], item["LastModified"]
            if not page.get("IsTruncated"):
                return
            token = {"ContinuationToken": page["NextContinuationToken"]}

    def delete(self, names: list[str], doing: str) -> None:
        """Remove objects ``names`` (missing ones are fine), up to 1,000 a request."""
        for at in range(0, len(names), 1000):
            batch = [{"Key": self.key(name)} for name in names[at : at + 1000]]
            answer = self._call(doing, "delete_objects", Delete={"Objects": batch, "Quiet": True})
            if errors := answer.get("Errors"):
                raise StorageUnavailable(
                    f"the datasets' bucket {self.url} refused to delete {len(errors)} object(s) while {doing} "
                    f"({errors[0].get('Code')}: {errors[0].get('Message')})"
                )
