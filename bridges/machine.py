"""What every bridge's sans-I/O protocol machine does the same way, written once.

Each bridge (EMP, Relink, MicroMsg2, Epoxy) has a machine that takes bytes
with ``receive_data``, returns events from ``events`` and queues bytes for
the peer. Two of its rules do not depend on the protocol, and each machine
had its own copy of them until they moved here:

* **Output.** Whatever the machine queues for the peer is appended to one
  ``bytearray`` (``_outbound``); ``data_to_send`` takes it all and leaves it
  empty. The trio adapter (``bridges.kit.BridgeConnection``) writes it.
* **Events before a violation.** When the peer breaks the protocol in the
  middle of what it sent, the events parsed before the offending frame are
  returned first, and the error is raised by the next call to ``events``.
  The application thus sees every message the peer sent validly before its
  violation (a request the peer made just before garbage is still counted,
  and failed or answered), and the error still ends the connection: the
  machine fails at once (its error frame, if its protocol has one, is
  queued then), so the only thing deferred is the raise.

This module is importable without trio (like ``bridges.errors``), so that a
bridge's sans-I/O modules can build on it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

__all__ = ["ProtocolMachine", "StateTable"]

EventT = TypeVar("EventT")
ErrorT = TypeVar("ErrorT", bound=Exception)
StateT = TypeVar("StateT", bound=enum.Enum)
InputT = TypeVar("InputT", bound=enum.Enum)


class StateTable(Generic[StateT, InputT]):
    """A machine's transitions, and how a step the table has no row for is refused.

    ``transitions`` maps ``(state, input)`` to the next state; it is kept,
    not copied, so the table stays the one place a rule is written (a test
    that removes a row changes every path). Each input's ``value`` is what
    it does, in words ("send a message"), for the errors below.

    The two lookups only answer the next state; the machine commits it
    (``self._state = ...``) once nothing else in its step can fail.
    """

    __slots__ = ("transitions", "_local_error", "_remote_error")

    def __init__(
        self,
        transitions: Mapping[tuple[StateT, InputT], StateT],
        *,
        local_error: Callable[[str], Exception],
        remote_error: Callable[[str], Exception],
    ) -> None:
        self.transitions = transitions
        self._local_error = local_error
        self._remote_error = remote_error

    def after_local(self, state: StateT, step: InputT) -> StateT:
        """The state after this program's own ``step``; its ``LocalProtocolError``
        (the application asked for what the protocol forbids) when there is none."""
        try:
            return self.transitions[state, step]
        except KeyError:
            raise self._local_error(f"cannot {step.value} in state {state.name}") from None

    def after_received(self, state: StateT, step: InputT, what: str) -> StateT:
        """The state after the peer's ``step`` (``what`` names the frame it sent);
        the protocol's remote error (the peer broke the protocol) when there is none."""
        try:
            return self.transitions[state, step]
        except KeyError:
            raise self._remote_error(f"unexpected {what} in state {state.name}") from None


class ProtocolMachine(Generic[EventT, ErrorT]):
    """The base of a bridge's sans-I/O machine: its output, and the order of its events and errors.

    A subclass passes its protocol's ``RemoteProtocolError`` class and
    implements two methods:

    * ``_parse(events)``: parse what was received, appending each event to
      ``events`` as it is made, and raise the protocol error at a violation
      (the events appended before it are kept);
    * ``_fail(error)``: the machine's own reaction to a violation (its error
      frame queued on ``_outbound``, its state ``ERROR``); called once, before
      any event is returned past the violation.

    Its public ``events`` documents what the protocol returns and calls
    :meth:`_take_events`. Its encoders append to ``_outbound`` directly (one
    ``+=`` a frame: the send path stays as cheap as it was).
    """

    def __init__(self, protocol_error: type[ErrorT], *, output: bytes = b"") -> None:
        self._protocol_error = protocol_error
        self._outbound = bytearray(output)
        self._deferred_error: ErrorT | None = None

    # ---- output ---------------------------------------------------------------

    @property
    def has_data_to_send(self) -> bool:
        """True while bytes wait to be written."""
        return bool(self._outbound)

    def data_to_send(self) -> bytes:
        """Take all the bytes queued for the peer."""
        data = bytes(self._outbound)
        self._outbound.clear()
        return data

    # ---- input ----------------------------------------------------------------

    def _take_events(self) -> list[EventT]:
        """The events parsed from what was received, or the violation they led to.

        A violation found after some events returns those events and raises
        at the next call; found with none before it, it raises now. Either
        way ``_fail`` has run once the violation was found.
        """
        if self._deferred_error is not None:
            error, self._deferred_error = self._deferred_error, None
            raise error
        events: list[EventT] = []
        try:
            self._parse(events)
        except self._protocol_error as exc:
            self._fail(exc)
            if events:
                self._deferred_error = exc
                return events
            raise
        return events

    def _parse(self, events: list[EventT]) -> None:
        raise NotImplementedError

    def _fail(self, error: ErrorT) -> None:
        raise NotImplementedError
