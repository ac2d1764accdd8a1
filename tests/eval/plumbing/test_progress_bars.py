"""The one progress factory (eval.plumbing.progress): which form it picks, where it draws, and the
live statuses of long steps (shown on a hosting bar, throttled, nothing without a host)."""

from __future__ import annotations

import io
import sys
import threading
import types
import warnings

import pytest
from tqdm import tqdm

from eval.plumbing import progress


class FakeKernelShell:
    """What ipykernel's ZMQInteractiveShell has and a terminal shell lacks: its kernel."""

    kernel = object()


class FakeTerminalShell:
    pass


def fake_ipython(monkeypatch: pytest.MonkeyPatch, shell: object | None) -> None:
    module = types.ModuleType("IPython")
    module.get_ipython = lambda: shell  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "IPython", module)


def test_plain_tqdm_on_stderr_outside_a_kernel(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    assert not progress.in_kernel()
    assert progress.bar_class() is tqdm
    with progress.progress_bar(total=3, desc="things", unit="doc") as bar:
        bar.update(3)
    out, err = capsys.readouterr()
    assert out == ""
    assert "things: 100%" in err and "3/3" in err and "doc/s" in err


def test_progress_off_prints_nothing(capsys: pytest.CaptureFixture) -> None:
    for _ in progress.progress_bar(range(5), desc="quiet", disable=True):
        pass
    assert capsys.readouterr() == ("", "")


def test_ipython_without_a_kernel_is_no_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_ipython(monkeypatch, None)  # IPython importable, no shell running
    assert not progress.in_kernel()
    fake_ipython(monkeypatch, FakeTerminalShell())  # a terminal IPython
    assert not progress.in_kernel()
    assert progress.bar_class() is tqdm


def test_a_kernel_gets_the_notebook_form(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ipywidgets", reason="ipywidgets is in the test extra")
    from tqdm import notebook

    fake_ipython(monkeypatch, FakeKernelShell())
    assert progress.in_kernel()
    assert progress.bar_class() is notebook.tqdm


def test_a_kernel_without_ipywidgets_falls_back_quietly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from tqdm import notebook

    fake_ipython(monkeypatch, FakeKernelShell())
    monkeypatch.setattr(notebook, "IProgress", None)  # what tqdm sets without ipywidgets
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert progress.bar_class() is tqdm
        with progress.progress_bar(total=2, desc="fallback") as bar:
            bar.update(2)
    assert "fallback: 100%" in capsys.readouterr().err


def test_statuses_show_on_the_hosting_bar_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "INTERVAL", 0.0)
    with progress.status("nobody hosts this") as shown:  # no host: a no-op
        shown.update("still nothing")
    out = io.StringIO()
    bar = progress.progress_bar(total=2, desc="run", file=out)
    seen: list[str] = []

    def step(label: str) -> None:
        with progress.live(bar, label), progress.status("prompt 0/256 tok") as shown:
            shown.update("prompt 128/256 tok")
            seen.append(bar.postfix)

    worker = threading.Thread(target=step, args=("q01",))
    worker.start()
    worker.join()
    assert seen == ["q01 prompt 128/256 tok"]
    assert "q01 prompt 0/256 tok" in out.getvalue()
    assert "q01 prompt 128/256 tok" in out.getvalue()
    assert not bar.postfix  # an ended step leaves no status behind
    assert "nobody" not in out.getvalue()
    bar.close()


def test_two_steps_share_one_postfix() -> None:
    bar = progress.progress_bar(total=2, file=io.StringIO())
    with progress.live(bar, "q01"), progress.status("prompt 1,536/2,048 tok"):
        with progress.live(bar, "q02"), progress.status("120 generated"):
            assert bar.postfix == "q01 prompt 1,536/2,048 tok | q02 120 generated"
        assert bar.postfix == "q01 prompt 1,536/2,048 tok"
    bar.close()


def test_updates_are_throttled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "INTERVAL", 3600.0)
    bar = progress.progress_bar(total=1, file=io.StringIO())
    with progress.live(bar, "q01"), progress.status("first") as shown:
        for n in range(1000):
            shown.update(f"{n} generated")
        assert bar.postfix == "q01 first"  # within the interval, no redraw
    bar.close()


def test_a_disabled_bar_hosts_nothing() -> None:
    bar = progress.progress_bar(total=1, disable=True)
    with progress.live(bar, "q01"):
        assert not progress.hosted()


def test_a_transient_line_shows_only_where_it_can_be_taken_back(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    with progress.transient("loading a model ..."):  # captured stderr: a log keeps every line
        pass
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(progress, "interactive", lambda: True)  # a terminal
    with progress.transient("loading a model ..."):
        pass
    err = capsys.readouterr().err
    assert "loading a model ..." in err
    assert err.endswith("\r") and err.rstrip("\r").endswith(" ")  # overwritten when done
    with progress.transient("loading a model ...", shown=False):  # progress off
        pass
    assert capsys.readouterr().err == ""


def test_a_kernel_counts_as_interactive(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_ipython(monkeypatch, FakeKernelShell())
    assert progress.interactive()
