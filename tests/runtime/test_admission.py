"""Places under max_connections (rstreams._admission), driven by any sequence of events.

The properties: at most ``limit`` connections hold a place at once, those
closed to make room aside (each admit closes at most one: the oldest that
has not finished its handshake, and only once its grace is over); a
newcomer is refused only when no place is free and no such one is left.
"""

from __future__ import annotations

import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from rstreams.support import Admission, Admissions

GRACE = 1.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("admit")),
        st.tuples(st.just("handshake"), st.integers(0, 30)),
        st.tuples(st.just("leave"), st.integers(0, 30)),
        st.tuples(st.just("check_later"), st.integers(0, 30)),
        st.tuples(st.just("wait"), st.sampled_from([0.25, 0.5, 1.0, 2.0])),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(1, 5), events=EVENTS)
def test_places_follow_their_rules(limit: int, events: list[tuple]) -> None:
    clock = Clock()
    admissions = Admissions(grace=GRACE, clock=clock)
    held: list[Admission] = []  # holding a place, oldest first
    closed: list[Admission] = []  # closed to make room, their tasks not yet ended
    done: set[Admission] = set()  # those past their handshake (held: no id is reused)
    for event in events:
        if event[0] == "admit":
            in_handshake = [a for a in held if a not in done]
            admission = admissions.admit(limit)
            evicted = [a for a in held if a.evicted is not None]
            if len(held) < limit:
                assert admission is not None and evicted == []
            elif in_handshake and clock.now - in_handshake[0].admitted_at >= GRACE:
                # The oldest still in its handshake made room, and no other.
                assert admission is not None and evicted == [in_handshake[0]]
                assert in_handshake[0].scope.cancel_called
            else:
                assert admission is None and evicted == []
            for gone in evicted:
                held.remove(gone)
                closed.append(gone)
            if admission is not None:
                held.append(admission)
        elif event[0] == "wait":
            clock.now += event[1]
        elif event[0] == "leave" and closed and event[1] % 2:
            admissions.leave(closed.pop())  # (a closed one's task ends: nothing more is freed)
        elif held:
            admission = held[event[1] % len(held)]
            if event[0] == "handshake":
                admission.handshake_done()
                done.add(admission)
            elif event[0] == "check_later":
                admission.handshake_done_when(lambda: True)
                done.add(admission)
            else:
                admissions.leave(admission)
                admissions.leave(admission)  # (twice: once is what counts)
                held.remove(admission)
        assert admissions.count == len(held) <= limit


def test_no_limit_admits_every_connection() -> None:
    admissions = Admissions()
    assert all(admissions.admit(None) is not None for _ in range(100))
    assert admissions.count == 100


def test_a_connection_closed_to_make_room_holds_no_place_while_it_ends() -> None:
    # Closed for a newcomer, it ends at its next checkpoint; meanwhile a
    # place freed by another must not make a second one close.
    clock = Clock()
    admissions = Admissions(grace=GRACE, clock=clock)
    first, second = admissions.admit(2), admissions.admit(2)
    assert first is not None and second is not None
    clock.now += GRACE
    third = admissions.admit(2)
    assert third is not None and first.evicted is not None
    admissions.leave(second)
    fourth = admissions.admit(2)
    assert fourth is not None and third.evicted is None
    admissions.leave(first)  # (its task ends now: nothing more is freed)
    assert admissions.count == 2


def test_a_connection_within_its_grace_is_not_closed_for_a_newcomer() -> None:
    # In a burst of real clients the earlier ones' hellos may not have been
    # read yet: the newcomer is refused ("server busy"), nobody is cut.
    clock = Clock()
    admissions = Admissions(grace=GRACE, clock=clock)
    first = admissions.admit(1)
    assert first is not None
    clock.now += GRACE / 2
    assert admissions.admit(1) is None and first.evicted is None
    clock.now += GRACE / 2
    assert admissions.admit(1) is not None and first.evicted is not None


def test_a_connection_that_can_say_why_is_closed_its_own_way_then_cut_after_a_grace() -> None:
    from rstreams.support import CLOSING_GRACE

    mock = trio.testing.MockClock()

    async def main() -> None:  # (a cancel scope's deadline is trio's time)
        admissions = Admissions(grace=GRACE)
        first = admissions.admit(1)
        assert first is not None
        said: list[str] = []
        first.close_with(said.append)
        mock.jump(GRACE)
        assert admissions.admit(1) is not None
        assert said == ["server busy: no handshake yet, closed for a new connection (1 open)"] == [first.evicted]
        assert not first.scope.cancel_called and first.scope.deadline == trio.current_time() + CLOSING_GRACE

    trio.run(main, clock=mock)
