"""Model processes on one machine share its cores: real processes register, each one's torch
threads follow how many are alive and computing, a waiting one takes no share, dead or
reused pids are not counted, a fixed count wins."""

import os
import subprocess
import sys
import textwrap

import pytest

from generators.llm.cores import CoreShare, available_cores, live_processes, start_time

CHILD = textwrap.dedent("""
    import sys, threading, torch
    from generators.llm.cores import CoreShare
    if "compute" in sys.argv:       # uses a core, as a process running a model does
        threading.Thread(target=lambda: [None for _ in iter(int, 1)], daemon=True).start()
    share = CoreShare.claim()
    print(torch.get_num_threads(), flush=True)
    for line in sys.stdin:          # each line asks for a refresh; EOF ends the process
        print(share.refresh(), torch.get_num_threads(), flush=True)
""")


def child(env, *args):
    p = subprocess.Popen([sys.executable, "-c", CHILD, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=env, cwd=os.getcwd())
    return p, int(p.stdout.readline())


def ask(p) -> tuple[int, int]:
    p.stdin.write("refresh\n")
    p.stdin.flush()
    share, torch_threads = map(int, p.stdout.readline().split())
    return share, torch_threads


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("FORGEPLAY_RUNTIME_DIR", str(tmp_path / "reg"))
    monkeypatch.delenv("FORGEPLAY_THREADS", raising=False)
    return {**os.environ, "PYTHONPATH": os.getcwd()}


def test_threads_follow_the_live_model_processes(env, tmp_path):
    cores = available_cores()
    a, first = child(env, "compute")
    b = c = None
    try:
        assert first == cores  # alone
        b, b_first = child(env, "compute")
        assert b_first == max(1, cores // 2)
        assert ask(a) == (max(1, cores // 2),) * 2  # a gives threads up to b
        assert len(live_processes(tmp_path / "reg")) == 2
        b.stdin.close()
        assert b.wait(timeout=60) == 0
        assert ask(a) == (cores, cores)  # and takes them back when b is gone
        assert live_processes(tmp_path / "reg") == [a.pid]
        c, c_first = child(env)  # registered, but waiting: counted by nobody
        assert c_first == max(1, cores // 2)  # a computes
        assert ask(a) == (cores, cores)
        assert len(live_processes(tmp_path / "reg")) == 2
    finally:
        for p in (a, b, c):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def test_dead_and_reused_pids_are_not_counted(env, tmp_path):
    reg = tmp_path / "reg"
    reg.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (reg / f"{gone.pid}.pid").write_text("123")  # a process that ended without leaving
    (reg / f"{os.getppid()}.pid").write_text("1")  # a live pid, but started at another time: reused
    (reg / "notes.txt").write_text("not a registration")
    assert live_processes(reg) == []
    assert sorted(f.name for f in reg.iterdir()) == ["notes.txt"]
    (reg / f"{os.getppid()}.pid").write_text(start_time(os.getppid()))
    assert live_processes(reg) == [os.getppid()]


def test_a_fixed_count_wins_and_bad_ones_are_refused(env, monkeypatch):
    a, first = child({**env, "FORGEPLAY_THREADS": "1"})
    try:
        assert first == 1 and ask(a) == (1, 1)
    finally:
        a.stdin.close()
        a.wait(timeout=60)
    monkeypatch.setenv("FORGEPLAY_THREADS", "two")
    with pytest.raises(ValueError, match="FORGEPLAY_THREADS"):
        CoreShare.claim()
    with pytest.raises(ValueError, match="threads must be >= 1"):
        CoreShare.claim(0)
