"""An S3-compatible server for tests and benchmarks: moto's server mode (``moto_server``, a dev dependency),
started on a loopback port as a stand-in for a cloud bucket this machine cannot reach; stopped at the end.

``S3Server(auth=True)`` enforces credentials from its first request (moto's ``INITIAL_NO_AUTH_ACTION_COUNT=0``):
no key is known to it, so every request is refused (``InvalidAccessKeyId``, 403) — a bucket that denies access.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import httpx

from tests.support.processes import stop_process
from tests.support.wait import wait_until

__all__ = ["S3Server"]

KEY_ID, SECRET = "evh-test-key", "evh-test-secret"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class S3Server:
    """One running ``moto_server`` on 127.0.0.1; :attr:`endpoint` is its URL."""

    def __init__(self, *, auth: bool = False) -> None:
        self.port = _free_port()
        self.auth = auth
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start the server (again on the same port: an empty store, as moto keeps nothing)."""
        env = {**os.environ, **({"INITIAL_NO_AUTH_ACTION_COUNT": "0"} if self.auth else {})}
        moto = Path(sys.executable).with_name("moto_server")
        self.proc = subprocess.Popen(
            [str(moto), "-H", "127.0.0.1", "-p", str(self.port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

        def answers() -> bool:
            assert self.proc is not None and self.proc.poll() is None, "moto_server exited"
            return httpx.get(self.endpoint + "/moto-api/", timeout=2).status_code < 500

        wait_until(answers, 60, 0.1, what="moto_server to answer", ignoring=(httpx.TransportError,))

    def stop(self) -> None:
        stop_process(self.proc)

    def client(self) -> Any:
        return boto3.client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET,
            region_name="us-east-1",
        )  # fmt: skip

    def bucket(self, name: str) -> str:
        """Create bucket ``name``; its name."""
        self.client().create_bucket(Bucket=name)
        return name

    def settings(self, url: str) -> dict[str, Any]:
        """The service settings that point at ``url`` (``s3://bucket/prefix``) on this server."""
        return {
            "blob_url": url,
            "blob_endpoint_url": self.endpoint,
            "blob_region": "us-east-1",
            "blob_access_key_id": KEY_ID,
            "blob_secret_access_key": SECRET,
        }

    def objects(self, bucket: str, prefix: str = "") -> dict[str, bytes]:
        """Every object of ``bucket`` under ``prefix``, by key."""
        client = self.client()
        keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]
        return {key: client.get_object(Bucket=bucket, Key=key)["Body"].read() for key in keys}
