"""nginx in front of local service processes, configured from the deploy config."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx

NGINX_CONF = Path(__file__).resolve().parents[2] / "deploy" / "nginx.conf"
STARTUP_TIMEOUT_S = 60


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Nginx:
    """nginx in the foreground on 127.0.0.1, proxying to local backends with the deploy config."""

    def __init__(self, folder: Path, backend_ports: list[int]) -> None:
        binary = shutil.which("nginx") or "/usr/sbin/nginx"
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.folder = folder
        config = NGINX_CONF.read_text()
        upstream = next(line for line in config.splitlines() if "rlguard:upstreams" in line)
        servers = "\n".join(
            upstream.replace("backend:8000", f"127.0.0.1:{p}") for p in backend_ports
        )
        listen = next(line for line in config.splitlines() if "rlguard:listen" in line)
        config = config.replace(upstream, servers).replace(
            listen, listen.replace("listen 8000", f"listen 127.0.0.1:{self.port}")
        )
        temp = "".join(
            f"    {kind}_temp_path {folder / kind};\n"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        config = "user root;\n" + config.replace("http {\n", "http {\n" + temp, 1)
        (folder / "nginx.conf").write_text(config)
        self.command = [binary, "-p", str(folder), "-c", str(folder / "nginx.conf"), "-e"]
        self.command += ["stderr", "-g", f"daemon off; pid {folder / 'nginx.pid'};"]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = STARTUP_TIMEOUT_S) -> Nginx:
        self.proc = subprocess.Popen(self.command, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while not self._answers():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"nginx did not proxy {self.url}/api/v1/health")
            time.sleep(0.05)
        return self

    def _answers(self) -> bool:
        try:
            return httpx.get(f"{self.url}/api/v1/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
