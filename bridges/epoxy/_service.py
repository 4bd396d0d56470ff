"""Python services over Epoxy: a class whose async methods are Bond methods.

::

    @service("examples.calc.Calc")
    class Calc:
        @method
        async def Calculate(self, params: Params) -> Result:
            return Result(z=params.x * params.y)

        @event
        async def Reset(self, request: Empty) -> None:
            ...

The request and response structs are read from the annotations (or given
with ``@method(request=..., response=...)``); the method's Bond name is the
Python name unless ``name=`` says otherwise. :func:`serve_services` answers
a connection's requests and events with such objects, and
:class:`ServiceProxy` calls them from the other end
(``await proxy.Calculate(Params(...))``).

What the peer gets, as Bond's C# ``ServiceHost`` does:

* a request for a service or method nobody serves: an error response
  ``METHOD_NOT_FOUND``; a request for an event method: ``INVALID_INVOCATION``;
* a request whose payload does not decode as the method's request struct,
  a method that raises, or one that returns something that is not its
  response struct: ``INTERNAL_SERVER_ERROR`` with the text in ``message``;
* a method that raises :class:`ServiceError`: that error's code and message;
* an event nobody serves, or that does not decode: nothing (events have no
  response, not even an error); it is logged and dropped.

Requests run concurrently, at most ``max_concurrency`` per connection: the
next request is read only when a slot is free (the kit's
:class:`~bridges.kit.RequestSlots`), so a client that floods requests is
held back by TCP. Events run one after the other, in order: the next event
is read only once the previous one was handled, so a slow event method
paces its sender. An event method declared ``@event(batch=True)`` takes a
list: each run of its events that one read brought, in one call (``async
def Name(self, requests: list[Req]) -> None``), for a sender that sends
many at once; the peer still sends them one event each.
"""

from __future__ import annotations

import enum
import inspect
import logging
import typing
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from itertools import groupby
from operator import attrgetter
from typing import Any, TypeVar

import trio

from ..kit import MemoryBudget, PeerWarnings, RequestSlots, set_peer_warnings, warn_about_peer
from . import bond
from ._errors import EpoxyError
from ._events import Event, Request
from ._structs import Error, ErrorCode
from ._trio import EpoxyConnection

__all__ = [
    "service",
    "method",
    "event",
    "MethodKind",
    "MethodInfo",
    "ServiceInfo",
    "ServiceError",
    "ServiceTable",
    "service_info",
    "serve_services",
    "dispatch_request",
    "dispatch_event",
    "dispatch_events",
    "hold_for_response",
    "ServiceProxy",
    "DEFAULT_MAX_CONCURRENCY",
]

logger = logging.getLogger("rstreams.epoxy")

#: Requests answered at once per connection.
DEFAULT_MAX_CONCURRENCY = 16
#: Events taken, and run, in one step at most (those one read brought).
MAX_EVENTS_AT_ONCE = 256
#: The longest ``message`` we put in an error response made from an exception.
MAX_ERROR_MESSAGE = 4096

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])
_METHOD_ATTRIBUTE = "__epoxy_method__"
_SERVICE_ATTRIBUTE = "__epoxy_service__"


class MethodKind(enum.Enum):
    """Bond's two messaging patterns."""

    REQUEST_RESPONSE = "request-response"
    EVENT = "event"


@dataclass(frozen=True, slots=True)
class MethodInfo:
    """One method of a service.

    Attributes:
        name: the Bond method name (``Calculate``).
        kind: request-response or event.
        request_class: the request struct.
        response_class: the response struct (None for an event).
        attribute: the Python attribute that implements it.
        batch: an event method that takes a list of requests (a run of its
            events at a time); on the wire, still one event each.
        request_limits: what a request's payload may be (its size, its
            containers, what it makes the reader skip); one that breaks
            them is not decoded past the break: an error response
            ``INTERNAL_SERVER_ERROR``, or for an event a dropped event.
    """

    name: str
    kind: MethodKind
    request_class: type[bond.Struct]
    response_class: type[bond.Struct] | None
    attribute: str
    batch: bool = False
    request_limits: bond.BondLimits = bond.DEFAULT_LIMITS


@dataclass(frozen=True, slots=True)
class ServiceInfo:
    """A service: its fully qualified Bond name and its methods by Bond name."""

    name: str
    methods: dict[str, MethodInfo]


@dataclass(frozen=True, slots=True)
class _Mark:
    # What @method / @event leave on a function until @service reads it.
    kind: MethodKind
    name: str | None
    request: type[bond.Struct] | None
    response: type[bond.Struct] | None
    batch: bool = False
    request_limits: bond.BondLimits = bond.DEFAULT_LIMITS


def _mark(
    kind: MethodKind,
    function: F | None,
    name: str | None,
    request: Any,
    response: Any,
    batch: bool = False,
    request_limits: bond.BondLimits = bond.DEFAULT_LIMITS,
) -> Any:
    if not isinstance(request_limits, bond.BondLimits):
        raise TypeError(f"request_limits must be a bond.BondLimits, not {request_limits!r}")

    def decorate(target: F) -> F:
        if not inspect.iscoroutinefunction(target):
            raise TypeError(f"{target.__qualname__}: an Epoxy method must be an async function")
        setattr(target, _METHOD_ATTRIBUTE, _Mark(kind, name, request, response, batch, request_limits))
        return target

    return decorate(function) if function is not None else decorate


@typing.overload
def method(function: F, /) -> F: ...
@typing.overload
def method(
    *,
    name: str | None = None,
    request: type[bond.Struct] | None = None,
    response: type[bond.Struct] | None = None,
    request_limits: bond.BondLimits = bond.DEFAULT_LIMITS,
) -> Callable[[F], F]: ...
def method(
    function: F | None = None,
    /,
    *,
    name: str | None = None,
    request: type[bond.Struct] | None = None,
    response: type[bond.Struct] | None = None,
    request_limits: bond.BondLimits = bond.DEFAULT_LIMITS,
) -> Any:
    """Declare a request-response method: ``async def Name(self, request: Req) -> Resp``.

    Args:
        name: the Bond method name (default: the function's name).
        request, response: the structs (default: from the annotations).
        request_limits: what a request's payload may be (``max_size`` for
            a method whose request is small: it is refused unread past it).
    """
    return _mark(MethodKind.REQUEST_RESPONSE, function, name, request, response, request_limits=request_limits)


@typing.overload
def event(function: F, /) -> F: ...
@typing.overload
def event(
    *,
    name: str | None = None,
    request: type[bond.Struct] | None = None,
    batch: bool = False,
    request_limits: bond.BondLimits = bond.DEFAULT_LIMITS,
) -> Callable[[F], F]: ...
def event(
    function: F | None = None,
    /,
    *,
    name: str | None = None,
    request: type[bond.Struct] | None = None,
    batch: bool = False,
    request_limits: bond.BondLimits = bond.DEFAULT_LIMITS,
) -> Any:
    """Declare an event method (one-way): ``async def Name(self, request: Req) -> None``.

    With ``batch``, ``async def Name(self, requests: list[Req]) -> None``:
    called with each run of its events that one read brought (those that
    do not decode dropped and logged), in order with the other events.
    ``request_limits`` as for :func:`method` (an event past them is dropped).
    """
    return _mark(MethodKind.EVENT, function, name, request, None, batch, request_limits)


def _struct_class(value: object, what: str) -> type[bond.Struct]:
    if not (isinstance(value, type) and issubclass(value, bond.Struct)):
        raise TypeError(f"{what} must be a bond.Struct subclass, not {value!r}")
    return value


def _method_info(attribute: str, function: Callable[..., Any], mark: _Mark) -> MethodInfo:
    where = function.__qualname__
    request, response = mark.request, mark.response
    if request is None or (response is None and mark.kind is MethodKind.REQUEST_RESPONSE):
        hints = typing.get_type_hints(function)
        parameters = [p for p in inspect.signature(function).parameters.values() if p.name != "self"]
        if len(parameters) != 1:
            raise TypeError(f"{where} must take exactly one argument, the request struct")
        if request is None:
            request = hints.get(parameters[0].name)
            if mark.batch and typing.get_origin(request) is list:
                (request,) = typing.get_args(request)
        if response is None and mark.kind is MethodKind.REQUEST_RESPONSE:
            response = hints.get("return")
    request_class = _struct_class(request, f"{where}'s request")
    response_class = None
    if mark.kind is MethodKind.REQUEST_RESPONSE:
        response_class = _struct_class(response, f"{where}'s response")
    return MethodInfo(
        mark.name or attribute, mark.kind, request_class, response_class, attribute, mark.batch, mark.request_limits
    )


def service(name: str) -> Callable[[type[T]], type[T]]:
    """Declare a class as the Bond service ``name`` (fully qualified: ``examples.calc.Calc``).

    Every attribute decorated with :func:`method` or :func:`event`
    (inherited ones included) becomes one of its methods.

    Raises:
        TypeError: a method's structs cannot be found, or two methods share a Bond name.
    """
    if not isinstance(name, str) or not name:
        raise TypeError("a service name is a non-empty string")

    def decorate(cls: type[T]) -> type[T]:
        methods: dict[str, MethodInfo] = {}
        for klass in reversed(cls.__mro__):
            for attribute, value in vars(klass).items():
                mark = getattr(value, _METHOD_ATTRIBUTE, None)
                if isinstance(mark, _Mark):
                    info = _method_info(attribute, value, mark)
                    previous = methods.get(info.name)
                    if previous is not None and previous.attribute != attribute:
                        raise TypeError(f"{cls.__qualname__}: two methods named {info.name!r}")
                    methods[info.name] = info
        setattr(cls, _SERVICE_ATTRIBUTE, ServiceInfo(name, methods))
        return cls

    return decorate


def service_info(service_or_class: object) -> ServiceInfo:
    """The :class:`ServiceInfo` of a ``@service`` class or instance.

    Raises:
        TypeError: it is not one.
    """
    info = getattr(service_or_class, _SERVICE_ATTRIBUTE, None)
    if not isinstance(info, ServiceInfo):
        raise TypeError(f"{service_or_class!r} is not an Epoxy service (decorate its class with @service)")
    return info


class ServiceError(Exception):
    """Raise it in a method to answer with this error (``ErrorData``) rather than ``INTERNAL_SERVER_ERROR``.

    Attributes:
        error_code: a ``bond.comm.ErrorCode`` (or any int32).
        message: the text for the peer.
    """

    def __init__(self, error_code: int, message: str = "") -> None:
        super().__init__(message or f"error {error_code}")
        self.error_code = error_code
        self.message = message

    def to_error(self) -> Error:
        """The ``bond.comm.Error`` that goes on the wire (``message`` cut at :data:`MAX_ERROR_MESSAGE`)."""
        return _error(self.error_code, self.message)


Bound = Callable[[Any], Awaitable[Any]]


class ServiceTable:
    """Service objects by (service name, method name): what a connection is served with.

    Raises:
        TypeError: an object is not a ``@service``, or two serve the same name.
    """

    def __init__(self, services: Iterable[object]) -> None:
        self._methods: dict[tuple[str, str], tuple[MethodInfo, Bound]] = {}
        self._services: set[str] = set()
        for instance in services:
            info = service_info(instance)
            if isinstance(instance, type):
                raise TypeError(f"serve an instance of {instance.__qualname__}, not the class")
            if info.name in self._services:
                raise TypeError(f"two objects serve {info.name!r}")
            self._services.add(info.name)
            for name, method_info in info.methods.items():
                self._methods[info.name, name] = (method_info, getattr(instance, method_info.attribute))

    @property
    def services(self) -> frozenset[str]:
        """The service names served."""
        return frozenset(self._services)

    def find(self, service_name: str, method_name: str) -> tuple[MethodInfo, Bound] | None:
        """The method and its bound function, or None."""
        return self._methods.get((service_name, method_name))

    def not_found(self, service_name: str, method_name: str) -> Error:
        """The ``METHOD_NOT_FOUND`` error for a name nobody serves."""
        if service_name not in self._services:
            message = f"no such service: {service_name!r} (method {method_name!r})"
        else:
            message = f"no such method: {service_name}.{method_name}"
        return _error(ErrorCode.METHOD_NOT_FOUND, message)


def _error(error_code: int, message: str) -> Error:
    # Every error we answer with goes through here: its text is cut (it
    # repeats the peer's names; a 600 KB service name came back whole).
    return Error(error_code=error_code, message=message[:MAX_ERROR_MESSAGE])


def _internal(message: str) -> Error:
    return _error(ErrorCode.INTERNAL_SERVER_ERROR, message)


def _is_end_of(connection: EpoxyConnection, exc: Exception) -> bool:
    # Whether ``exc`` is the connection's own end, re-raised in the method
    # (the kit raises a copy of it in every waiter: same type, same args),
    # and not a failure of the method's own that merely came late.
    end = connection.end_reason
    return end is not None and (exc is end or (type(exc) is type(end) and exc.args == end.args))


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return text if text else type(exc).__name__


async def dispatch_request(
    table: ServiceTable, request: Request, *, connection: EpoxyConnection | None = None
) -> bytes | Error:
    """Run the method ``request`` names; return the marshalled response, or the error to answer with.

    Every error's ``message`` is cut at :data:`MAX_ERROR_MESSAGE`
    characters: they repeat what the peer sent (a service name, a
    publisher), which may be as long as a framelet.

    Args:
        connection: the connection ``request`` came on. A method that fails
            because that connection ended (raising its end error, as the
            connection's budget and calls do once it has) has not failed:
            its answer could not go out anyway, so that error propagates as
            is, unlogged, for the caller to see the connection's end.

    Never raises for the method's failures (they become errors for the
    peer); cancellation propagates.
    """
    found = table.find(request.service_name, request.method_name)
    if found is None:
        return table.not_found(request.service_name, request.method_name)
    info, function = found
    full_name = f"{request.service_name}.{request.method_name}"
    if info.kind is MethodKind.EVENT:
        return _error(ErrorCode.INVALID_INVOCATION, f"{full_name} is an event: send it as an event, not a request")
    try:
        argument = request.decode(info.request_class, limits=info.request_limits)
    except bond.BondDecodeError as exc:
        return _internal(f"the request to {full_name} is not a valid {info.request_class.__name__}: {exc}")
    try:
        result = await function(argument)
    except ServiceError as exc:
        return exc.to_error()
    except Exception as exc:
        if connection is not None and _is_end_of(connection, exc):
            raise
        logger.exception("Epoxy method %s failed", full_name)
        return _internal(_describe(exc))
    assert info.response_class is not None
    if not isinstance(result, info.response_class):
        return _internal(f"{full_name} returned a {type(result).__name__}, not a {info.response_class.__name__}")
    try:
        return await _marshal_response(result)
    except bond.BondEncodeError as exc:
        return _internal(f"the response of {full_name} does not encode: {exc}")


async def _marshal_response(result: bond.Struct) -> bytes:
    # bond.marshal, a step of bond.MARSHAL_STEP_ITEMS list items at a time
    # with a checkpoint between: one response of up to max_response_bytes
    # of tiny elements (half a million of range?count=524288) was hundreds
    # of milliseconds of one step, every other connection waiting. A small
    # response is one step and no checkpoint (the caller's next await is
    # one).
    steps = bond.marshal_steps(result)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        await trio.lowlevel.checkpoint()


async def dispatch_event(table: ServiceTable, message: Event) -> None:
    """Run the event method ``message`` names; log and drop what cannot be run.

    Never raises for the method's failures; cancellation propagates.
    """
    found = _event_method(table, message)
    if found is None:
        return
    info, function = found
    request = _decoded(info, message)
    if request is not None:
        await _run_event_method(info, message, function, request)


async def dispatch_events(table: ServiceTable, messages: list[Event]) -> None:
    """Run ``messages`` in order: each run of events for one batch event
    method (``@event(batch=True)``) in one call with the list of its
    requests, every other event as :func:`dispatch_event` does.

    Never raises for the methods' failures; cancellation propagates.
    """
    for _, run in groupby(messages, attrgetter("service_name", "method_name")):
        events = list(run)
        found = table.find(events[0].service_name, events[0].method_name)
        if found is None or not found[0].batch:
            for message in events:
                await dispatch_event(table, message)
            continue
        info, function = found
        requests = [request for request in (_decoded(info, message) for message in events) if request is not None]
        if requests:
            await _run_event_method(info, events[0], function, requests)


def _event_method(table: ServiceTable, message: Event) -> tuple[MethodInfo, Bound] | None:
    # The event method ``message`` names; None (logged) if nobody serves one.
    found = table.find(message.service_name, message.method_name)
    if found is None or found[0].kind is not MethodKind.EVENT:
        full_name = f"{message.service_name}.{message.method_name}"
        warn_about_peer(logger, "dropped event %s (conversation %d): no such event method", full_name, message.conversation_id)
        return None
    return found


def _decoded(info: MethodInfo, message: Event) -> bond.Struct | None:
    # The event's request struct; None (logged) if its payload is not one.
    try:
        return message.decode(info.request_class, limits=info.request_limits)
    except bond.BondDecodeError as exc:
        full_name = f"{message.service_name}.{message.method_name}"
        warn_about_peer(logger, "dropped event %s: not a valid %s: %s", full_name, info.request_class.__name__, exc)
        return None


async def _run_event_method(info: MethodInfo, message: Event, function: Bound, argument: object) -> None:
    # The method itself; its failure is logged, never raised.
    try:
        await function(argument)
    except Exception:
        logger.exception("Epoxy event method %s.%s failed", message.service_name, info.name)


class _Held:
    # What the method answering one request holds of a memory budget for its response.
    __slots__ = ("budget", "size")

    def __init__(self) -> None:
        self.budget: MemoryBudget | None = None
        self.size = 0

    def take(self, budget: MemoryBudget) -> int:
        # The bytes held of ``budget``, now the caller's to hand over or give
        # back; bytes held of another budget are given back to it here.
        held, size, self.budget, self.size = self.budget, self.size, None, 0
        if held is None or held is budget:
            return size
        held.give_back(size)
        return 0


#: Set by serve_services in each task that answers a request.
_held_for_response: ContextVar[_Held | None] = ContextVar("_held_for_response", default=None)


def hold_for_response(budget: MemoryBudget, size: int) -> bool:
    """Hand ``size`` bytes of ``budget`` that the running method holds over to its response.

    For a request-response method run by :func:`serve_services` whose
    response is built from bytes it took from the connection's memory
    budget (``Publishers.Subscribe``'s elements): call it just before
    returning. The bytes are given back exactly once: when the marshalled
    response is queued, counted as queued output by then
    (:meth:`EpoxyConnection.respond_nowait`'s ``prepaid``), or when the
    request is answered otherwise (an error response, the connection's end,
    cancellation). Bytes of a budget other than the connection's are given
    back to it as soon as the method has returned, before the response is
    queued (only the connection's own budget counts the response).

    Returns:
        False if the method was not called by :func:`serve_services` (or
        holds bytes of another budget already): nothing was handed over,
        and the caller gives the bytes back itself.
    """
    held = _held_for_response.get()
    if held is None or (held.budget is not None and held.budget is not budget):
        return False
    held.budget = budget
    held.size += size
    return True


async def serve_services(
    connection: EpoxyConnection,
    services: Iterable[object] | ServiceTable,
    *,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
) -> None:
    """Answer the peer's requests and run its events with ``services`` until the connection ends.

    Args:
        services: ``@service`` instances (or a :class:`ServiceTable`); none
            at all answers every request with ``METHOD_NOT_FOUND``.
        max_concurrency: requests being answered at once; the next request
            is read from the socket only when one finishes.

    Returns when the connection ends normally (the peer closed its side and
    was answered, or we closed) and the events read before the end have
    run. Methods still running when it ends are cancelled: their answers
    could not be sent; requests read before the end and not yet started are
    dropped unrun, and a method that fails with the connection's own end is
    not logged (see :func:`dispatch_request`). Events dropped (no such
    method, a payload that does not decode, or what the service itself
    warns about through the same log) are logged for the first
    ``MAX_PEER_WARNINGS`` of the connection, then only counted, the count
    logged once at the end.

    Raises:
        PeerProtocolError, RemoteProtocolError, EpoxyConnectionLost: it
            ended otherwise (after the requests in flight were done).
    """
    table = services if isinstance(services, ServiceTable) else ServiceTable(services)
    slots = RequestSlots(max_concurrency)
    ends: list[EpoxyError] = []
    warnings = PeerWarnings(logger)  # the dropped events logged, at most MAX_PEER_WARNINGS

    async def answer(request: Request) -> None:
        held = _Held()  # what the method hands over to its response (hold_for_response)
        _held_for_response.set(held)
        try:
            outcome = await dispatch_request(table, request, connection=connection)
            prepaid = held.take(connection.budget)
            if isinstance(outcome, Error):
                connection.budget.give_back(prepaid)  # the error is not built from them
                await connection.respond_error(request, outcome)
            else:
                # Queued (and counted against the connection's budget, taking
                # over from what the method held for it), then let go of: a
                # response waiting to be written is held once.
                connection.respond_nowait(request, outcome, prepaid=prepaid)
                del outcome
                await connection.wait_writable()
        except EpoxyError:
            pass  # the connection ended: the loop below sees why
        finally:
            connection.budget.give_back(held.take(connection.budget))  # cancelled before
            slots.release()

    async def run_events() -> None:
        set_peer_warnings(warnings)  # what the events' methods warn about counts for this connection
        while True:
            try:
                messages = await connection.receive_events(MAX_EVENTS_AT_ONCE)
            except trio.EndOfChannel:
                return
            except EpoxyError as exc:
                ends.append(exc)
                return
            # Out of the reader's queue, they still count in the
            # connection's budget until they have run.
            with connection.budget.holding(sum(len(message.payload) for message in messages)):
                await dispatch_events(table, messages)

    # The errors are kept and raised outside the nurseries, so the caller
    # gets the connection's end unwrapped.
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_events)
            async with trio.open_nursery() as handlers:
                while True:
                    try:
                        request = await slots.receive(connection.receive_request)
                    except trio.EndOfChannel:
                        break
                    except EpoxyError as exc:
                        ends.append(exc)
                        break
                    if connection.ended:
                        # Read before the end and still queued: it cannot be
                        # answered, so it is dropped, unrun (each such request
                        # used to run, fail on the closed budget and log a
                        # traceback: 11,688 of them after one reset). Taking
                        # the rest drains the queue to the end's error.
                        slots.release()
                        continue
                    handlers.start_soon(answer, request)
                # The connection has ended (a peer that closed its side ends it
                # only once answered): no answer can go out any more, so the
                # methods still running are cancelled, not awaited (a Subscribe
                # to an endless stream would never return). Events already read
                # still run: the loop above drains them.
                handlers.cancel_scope.cancel()
    finally:
        warnings.summarize(connection.info.peer)
    if ends:
        raise ends[0]


class ServiceProxy:
    """Calls a service's methods on the peer, as if they were local: ``await proxy.Calculate(params)``.

    Example::

        calc = ServiceProxy(connection, Calc)          # the @service class (or its instance)
        result = await calc.Calculate(Params(x=67, y=87, operation=Operation.Mul))

    A request-response method returns the response struct (or raises
    :class:`ErrorResponse`); an event method sends the event and returns
    its conversation id. Methods are looked up by their Python attribute
    name and by their Bond name.
    """

    def __init__(self, connection: EpoxyConnection, service_class: object) -> None:
        self._connection = connection
        self._info = service_info(service_class)
        self._by_name = {info.attribute: info for info in self._info.methods.values()}
        self._by_name.update(self._info.methods)

    @property
    def service_name(self) -> str:
        return self._info.name

    def __getattr__(self, name: str) -> Callable[[bond.Struct], Awaitable[Any]]:
        info = self._by_name.get(name)
        if info is None:
            raise AttributeError(f"service {self._info.name} has no method {name!r}")
        return self._caller(info)

    def _caller(self, info: MethodInfo) -> Callable[[bond.Struct], Awaitable[Any]]:
        connection, service_name = self._connection, self._info.name

        async def call(request: bond.Struct) -> Any:
            if not isinstance(request, info.request_class):
                raise TypeError(f"{service_name}.{info.name} takes a {info.request_class.__name__}")
            if info.kind is MethodKind.EVENT:
                return await connection.send_event(service_name, info.name, request)
            assert info.response_class is not None
            return await connection.call(service_name, info.name, request, info.response_class)

        call.__name__ = info.name
        return call

