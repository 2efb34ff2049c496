"""A warehouse on object storage through the S3 API (``s3://bucket/prefix``, or Spark's
``s3a://``): its settings, the listing of its folders, and a check that fails at once.

The settings come from the environment, the variables delta-rs (the engine's commits) and
every AWS client read: ``AWS_ENDPOINT_URL`` (an S3-compatible server; unset: AWS),
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``
(else ``AWS_DEFAULT_REGION``) and ``AWS_ALLOW_HTTP`` (``true`` for an ``http://``
endpoint). delta-rs takes them from the environment itself; this module reads the same
variables, once, for the listings (pyarrow's S3 file system), so both see one store.

Commits need no lock: delta-rs writes a commit file with a conditional put
(``If-None-Match: *``), which the store refuses when the version exists, so two writers
never both commit one version. ``AWS_S3_ALLOW_UNSAFE_RENAME`` is never needed (and unsafe).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from lakestate.errors import StreamsException

if TYPE_CHECKING:
    from pyarrow.fs import S3FileSystem

__all__ = [
    "S3_SCHEMES",
    "ObjectStoreError",
    "S3Settings",
    "bucket_key",
    "check",
    "is_s3",
    "list_folders",
    "table_exists",
]

#: The URI schemes of a warehouse on the S3 API (``s3a``: what Spark's connector calls it).
S3_SCHEMES = ("s3", "s3a")

#: How long the check waits for the store to accept a connection, in seconds.
CONNECT_TIMEOUT_S = 5.0


class ObjectStoreError(StreamsException):
    """The warehouse's object store cannot be used: unreachable, no such bucket, or the
    credentials refused. The message names the setting to fix."""


@dataclass(frozen=True)
class S3Settings:
    """Where the S3 API is and who calls it (from ``from_env``)."""

    endpoint: str | None  # AWS_ENDPOINT_URL, e.g. http://127.0.0.1:9000; None: AWS itself
    region: str | None
    access_key: str | None
    secret_key: str | None
    session_token: str | None
    allow_http: bool

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> S3Settings:
        """The settings in ``env`` (default ``os.environ``)."""
        env = os.environ if env is None else env
        return cls(
            endpoint=env.get("AWS_ENDPOINT_URL") or env.get("AWS_ENDPOINT") or None,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
            access_key=env.get("AWS_ACCESS_KEY_ID") or None,
            secret_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
            session_token=env.get("AWS_SESSION_TOKEN") or None,
            allow_http=(env.get("AWS_ALLOW_HTTP") or "").lower() in ("1", "true", "yes"),
        )

    def where(self) -> str:
        """The endpoint as a person sets it."""
        return f"AWS_ENDPOINT_URL={self.endpoint}" if self.endpoint else "AWS (no AWS_ENDPOINT_URL)"


def is_s3(uri: str) -> bool:
    """Whether ``uri`` is on the S3 API (``s3://`` or ``s3a://``)."""
    return urlsplit(uri).scheme in S3_SCHEMES


def bucket_key(uri: str) -> str:
    """``bucket/key`` of an ``s3://bucket/key`` URI: how pyarrow's S3 file system names it."""
    parts = urlsplit(uri)
    return f"{parts.netloc}{parts.path}".rstrip("/")


@lru_cache(maxsize=8)
def _filesystem(settings: S3Settings, attempts: int) -> S3FileSystem:
    from pyarrow import fs

    scheme, endpoint = "https", None
    if settings.endpoint:
        parts = urlsplit(settings.endpoint)
        scheme = parts.scheme or "https"
        endpoint = parts.netloc or parts.path
    return fs.S3FileSystem(
        access_key=settings.access_key,
        secret_key=settings.secret_key,
        session_token=settings.session_token,
        region=settings.region,
        scheme=scheme,
        endpoint_override=endpoint,
        connect_timeout=CONNECT_TIMEOUT_S,
        retry_strategy=fs.AwsStandardS3RetryStrategy(max_attempts=attempts),
    )


def filesystem(attempts: int = 3) -> S3FileSystem:
    """pyarrow's S3 file system for the environment's settings (one per settings)."""
    return _filesystem(S3Settings.from_env(), attempts)


def list_folders(uri: str) -> list[str]:
    """The names of the folders (common prefixes) right under ``uri``, sorted; none when
    there is no such folder."""
    from pyarrow import fs

    selector = fs.FileSelector(bucket_key(uri), allow_not_found=True, recursive=False)
    infos = filesystem().get_file_info(selector)
    return sorted(i.base_name for i in infos if i.type == fs.FileType.Directory)


def table_exists(uri: str) -> bool:
    """Whether a Delta table is at ``uri`` (it has a ``_delta_log`` folder)."""
    from pyarrow import fs

    info = filesystem().get_file_info(f"{bucket_key(uri)}/_delta_log")
    return info.type == fs.FileType.Directory


def check(uri: str, settings: S3Settings | None = None) -> None:
    """Fail at once, with one line naming the setting, unless the bucket of ``uri`` exists
    and the environment's credentials may read it: ``ObjectStoreError`` for an endpoint
    that does not answer, a missing bucket or refused credentials (one request, no retry)."""
    from pyarrow import fs

    settings = settings or S3Settings.from_env()
    bucket = urlsplit(uri).netloc
    if not bucket:
        raise ObjectStoreError(f"warehouse {uri} names no bucket: use s3://BUCKET/PREFIX")
    if settings.endpoint and settings.endpoint.startswith("http://") and not settings.allow_http:
        raise ObjectStoreError(
            f"{settings.where()} is plain http, which delta-rs refuses unless "
            "AWS_ALLOW_HTTP=true: set it (or use an https endpoint)"
        )
    try:
        info = _filesystem(settings, 1).get_file_info(bucket)
    except OSError as exc:
        raise ObjectStoreError(_explain(exc, uri, bucket, settings)) from exc
    if info.type == fs.FileType.NotFound:
        raise ObjectStoreError(
            f"bucket {bucket!r} of warehouse {uri} does not exist at {settings.where()}: "
            "create it, or fix --warehouse / LAKESTATE_WAREHOUSE"
        )


def _explain(exc: OSError, uri: str, bucket: str, settings: S3Settings) -> str:
    """One line for a failed check: which setting is wrong, and what the store said."""
    text = " ".join(str(exc).split())
    said = text.split(": ", 1)[-1]
    lowered = text.lower()
    if any(w in lowered for w in ("access_denied", "access denied", "forbidden", "signature")):
        return (
            f"the object store at {settings.where()} refused the credentials "
            f"AWS_ACCESS_KEY_ID={settings.access_key or '(unset)'} for bucket {bucket!r} "
            f"({said}): check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        )
    if any(w in lowered for w in ("invalid_access_key", "invalidaccesskeyid", "credentials")):
        return (
            f"the object store at {settings.where()} does not know "
            f"AWS_ACCESS_KEY_ID={settings.access_key or '(unset)'} ({said}): "
            "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        )
    if any(w in lowered for w in ("connect", "network", "resolve", "timed out", "timeout")):
        return (
            f"cannot reach the object store of warehouse {uri} at {settings.where()} "
            f"({said}): set AWS_ENDPOINT_URL to the S3 server's address"
        )
    return f"the object store of warehouse {uri} at {settings.where()} failed: {said}"
