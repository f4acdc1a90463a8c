"""The socket of this node's daemon of this Slurm job (``omst slurm up``).

The same rule as the CLI's (cmd/omst/slurmsock.go) and the C library's
(bindings/c/src/slurm.c), used only when neither $OMST_SOCKET nor $OMST_HOME
is set:

- JOB is $SLURM_JOB_ID (set, and usable as a path element);
- NODE is $SLURMD_NODENAME, else the host name up to its first dot;
- BASE is $TMPDIR if set, else /tmp;
- if BASE/omst-slurm-JOB is a directory owned by this (effective) user and
  BASE/omst-slurm-JOB/NODE/omst.sock exists, that socket.

Otherwise the default applies (~/.omst/omst.sock).
"""

from __future__ import annotations

import os
import socket
import stat
from typing import Optional


def _component(s: Optional[str]) -> bool:
    return bool(s) and s not in (".", "..") and "/" not in s and "\0" not in s  # type: ignore[operator]


def slurm_socket() -> Optional[str]:
    """This node's daemon of this Slurm job's socket, or None (see the module's rule)."""
    job = os.environ.get("SLURM_JOB_ID")
    if not _component(job):
        return None
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".", 1)[0]
    if not _component(node):
        return None
    base = os.environ.get("TMPDIR") or "/tmp"
    d = os.path.join(base, "omst-slurm-" + str(job))
    try:
        st = os.stat(d)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        return None
    s = os.path.join(d, str(node), "omst.sock")
    return s if os.path.exists(s) else None
