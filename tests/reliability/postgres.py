"""A private PostgreSQL cluster for one test: initdb into a temporary folder, served on a free
port with its unix socket in that folder, stopped and started at will. The shared server on
5432, which other tests and sessions use, is never touched."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.hook.hookutil import free_port

PG_TIMEOUT_S = 60


def _bin_dir() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: p.parts[-3])
    if not found:
        raise AssertionError("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
    return found[-1].parent


class PrivatePostgres:
    """``initdb`` + ``pg_ctl`` on a temporary cluster; as root, run as the ``postgres`` user
    (initdb refuses root)."""

    def __init__(self) -> None:
        self.bin = _bin_dir()
        self.folder = Path(tempfile.mkdtemp(prefix="rlguard-pg-"))
        self.data = self.folder / "data"
        self.port = free_port()
        self._user = None
        if os.geteuid() == 0:
            self._user = pwd.getpwnam("postgres")
            os.chown(self.folder, self._user.pw_uid, self._user.pw_gid)
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.url = self.dsn.replace("postgresql://", "postgresql+psycopg://", 1)

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bin / tool), *args]
        if self._user is not None:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=PG_TIMEOUT_S, check=False
        )
        assert result.returncode == 0, f"{tool} failed: {result.stdout}{result.stderr}"

    def init(self) -> PrivatePostgres:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync")
        return self

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1"
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.folder / "log"),
            "-w",
            "-t",
            str(PG_TIMEOUT_S),
            "start",
        )

    def stop(self, mode: str = "immediate") -> None:
        """Stop the cluster; ``immediate`` drops every connection at once, as a crash does."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def destroy(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)
