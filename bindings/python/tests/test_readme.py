"""The README's "Use" example, run as a user pastes it, against a real daemon."""

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def use_block() -> str:
    text = README.read_text()
    section = text[text.index("\n## Use\n") :]
    m = re.search(r"\n```python\n(.*?)\n```", section, re.S)
    assert m, "no python block in the README's Use section"
    return m.group(1)


def test_use_example_runs(daemon, tmp_path):
    """Every name the example uses is defined in it (it once used an
    undefined ``array``), and it runs to the end: in a fresh directory
    holding the two files it names, with its standard input a pipe."""
    (tmp_path / "run1.log").write_bytes(b"a log line\n")
    (tmp_path / "input.bin").write_bytes(os.urandom(1 << 16))
    env = {**os.environ, "OMST_SOCKET": daemon.sock, "OMST_HOME": ""}
    p = subprocess.run(
        [sys.executable, "-c", use_block()],
        cwd=tmp_path,
        env=env,
        input=b"from a pipe\n",
        capture_output=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    assert (tmp_path / "copy.bin").read_bytes() == (tmp_path / "input.bin").read_bytes()
    assert p.stdout == (tmp_path / "input.bin").read_bytes()  # get_to_fd to standard output


def test_use_example_gives_time_unit():
    """The example says what ``Info.time`` counts."""
    block = use_block()
    assert "nanoseconds since the Unix epoch" in block
