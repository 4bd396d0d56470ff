"""Places under max_connections (rstreams._admission), driven by any sequence of events.

The properties: at most ``limit`` connections hold a place at once, those
closed to make room aside (each admit closes at most one, and only one that
has not finished its handshake, the oldest); a newcomer is refused only
when every place is held by a connection past its handshake.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rstreams.support import Admission, Admissions

EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("admit")),
        st.tuples(st.just("handshake"), st.integers(0, 30)),
        st.tuples(st.just("leave"), st.integers(0, 30)),
        st.tuples(st.just("check_later"), st.integers(0, 30)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(1, 5), events=EVENTS)
def test_places_follow_their_rules(limit: int, events: list[tuple]) -> None:
    admissions = Admissions()
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
            elif in_handshake:
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
    admissions = Admissions()
    first, second = admissions.admit(2), admissions.admit(2)
    assert first is not None and second is not None
    third = admissions.admit(2)
    assert third is not None and first.evicted is not None
    admissions.leave(second)
    fourth = admissions.admit(2)
    assert fourth is not None and third.evicted is None
    admissions.leave(first)  # (its task ends now: nothing more is freed)
    assert admissions.count == 2
