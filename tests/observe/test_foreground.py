"""The process's count of calls under way: background work waits for a moment with none."""

from __future__ import annotations

import threading

import pytest

from memory_service.observe.foreground import Foreground


def test_wait_idle_waits_for_every_call_under_way_to_end():
    foreground = Foreground()
    with foreground.call():
        with foreground.call():
            assert foreground.under_way == 2
        assert not foreground.wait_idle(0.05)  # one call is still under way
    assert foreground.under_way == 0
    assert foreground.wait_idle(0)


def test_a_waiter_wakes_when_the_last_call_ends():
    foreground = Foreground()
    began, idle = threading.Event(), threading.Event()

    def waiter() -> None:
        began.set()
        if foreground.wait_idle(60):
            idle.set()

    with foreground.call():
        thread = threading.Thread(target=waiter)
        thread.start()
        assert began.wait(10)
        assert not idle.wait(0.1)  # still under way: the waiter waits
    thread.join(timeout=10)
    assert idle.is_set()


def test_a_call_that_fails_still_ends():
    foreground = Foreground()
    with pytest.raises(RuntimeError), foreground.call():
        raise RuntimeError("the call failed")
    assert foreground.wait_idle(0)
