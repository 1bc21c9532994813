"""A throwaway PostgreSQL server for the annotation store's tests (Debian's postgresql package).

initdb and postgres refuse to run as root, so under root (as in CI) the cluster is created and run as
the ``postgres`` system user (or ``nobody``) in a fresh folder under the system temp folder, which that
user can reach (pytest's own temp folders are private to root). It listens on a Unix socket in its folder
(trusted, for the tests' own connections) and on a free localhost port, where a password is required, so
the tests can check that a password given in the URL is used but never shown.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

USER, DATABASE = "r2med", "r2med"
#: The password of USER for TCP connections; the tests check it never reaches a message or the page.
PASSWORD = "s3cret-Pa55:w@rd"


def find_bin_dir() -> Path | None:
    """The newest installed PostgreSQL's bin folder (Debian keeps it off PATH), else one on PATH."""
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: p.parent.name, reverse=True):
        if (candidate / "initdb").is_file() and (candidate / "pg_ctl").is_file():
            return candidate
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb and shutil.which("pg_ctl") else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Cluster:
    """A running server; ``url(schema)`` names a database schema of it for one store."""

    bin_dir: Path
    root: Path
    port: int
    run_as: pwd.struct_passwd | None
    owns_root: bool

    @classmethod
    def start(cls, bin_dir: Path, pytest_tmp: Path) -> Cluster:
        run_as = None
        if os.geteuid() == 0:
            for name in ("postgres", "nobody"):
                try:
                    run_as = pwd.getpwnam(name)
                    break
                except KeyError:
                    continue
            if run_as is None:
                raise RuntimeError("running as root and no 'postgres' or 'nobody' user to run PostgreSQL as")
            root = Path(tempfile.mkdtemp(prefix="r2med-pg-"))
            os.chown(root, run_as.pw_uid, run_as.pw_gid)
        else:
            root = pytest_tmp
        cluster = cls(bin_dir, root, _free_port(), run_as, owns_root=run_as is not None)
        try:
            cluster._init_and_start()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _run(self, *args: str) -> None:
        kwargs: dict[str, object] = {}
        if self.run_as is not None:
            kwargs = {"user": self.run_as.pw_uid, "group": self.run_as.pw_gid, "extra_groups": []}
        env = {"PATH": os.environ.get("PATH", ""), "LC_ALL": "C.UTF-8", "HOME": str(self.root)}
        done = subprocess.run(
            args, cwd=self.root, env=env, capture_output=True, text=True, timeout=120, check=False, **kwargs
        )
        if done.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.is_file() else ""
            raise RuntimeError(f"{' '.join(args[:2])} failed ({done.returncode}): {done.stderr.strip()}\n{tail}")

    def _init_and_start(self) -> None:
        pwfile = self.root / "pwfile"
        pwfile.write_text(PASSWORD + "\n")
        if self.run_as is not None:
            os.chown(pwfile, self.run_as.pw_uid, self.run_as.pw_gid)
        self._run(
            str(self.bin_dir / "initdb"),
            "-D",
            str(self.root / "data"),
            "-U",
            USER,
            "--pwfile",
            str(pwfile),
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
        )
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories='{self.root}' "
            "-c max_connections=60 -c shared_buffers=16MB"
        )
        self._run(
            str(self.bin_dir / "pg_ctl"),
            "-D",
            str(self.root / "data"),
            "-l",
            str(self.root / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )
        self._run(
            str(self.bin_dir / "psql"), "-h", str(self.root), "-p", str(self.port), "-U", USER, "-d", "postgres",
            "-q", "-c", f"CREATE DATABASE {DATABASE} ENCODING 'UTF8'",
        )  # fmt: skip

    def stop(self) -> None:
        if (self.root / "data" / "postmaster.pid").is_file():
            try:
                self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.root / "data"), "-m", "fast", "-w", "stop")
            except RuntimeError:
                pass
        if self.owns_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def socket_url(self, schema: str | None = None, database: str = DATABASE) -> str:
        """A URL over the trusted Unix socket; with ``schema``, the store lives in that schema."""
        url = f"postgresql://{USER}@/{database}?host={quote(str(self.root), safe='/')}&port={self.port}"
        if schema is not None:
            url += "&options=" + quote(f"-csearch_path={schema}", safe="")
        return url

    def tcp_url(self, password: str = PASSWORD, schema: str | None = None) -> str:
        """A URL over localhost TCP, where the password is checked."""
        url = f"postgresql://{USER}:{quote(password, safe='')}@127.0.0.1:{self.port}/{DATABASE}"
        if schema is not None:
            url += "?options=" + quote(f"-csearch_path={schema}", safe="")
        return url
