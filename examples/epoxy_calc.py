"""The Bond Epoxy spec's Calc example, served and called from Python.

Run it from the repository root::

    python -m examples.epoxy_calc                    # a server and a client in one process
    python -m examples.epoxy_calc serve 127.0.0.1:25188
    python -m examples.epoxy_calc call 127.0.0.1:25188 67 Mul 87

The service, in Bond's IDL (``specs/bond-epoxy.md``)::

    namespace examples.calc
    enum Operation { Add, Div, Sub, Mul };
    struct Params { 1: int32 x; 2: int32 y; 3: Operation operation = Add; };
    struct Result { 1: int32 z; };
    service Calc { Result Calculate(Params); };

Policy choices: a division by zero is answered with an error response
(``INVALID_INVOCATION``, a ``ServiceError``) rather than left to become
``INTERNAL_SERVER_ERROR``; results wrap around to int32 as Bond's C# would,
rather than failing to encode.
"""

from __future__ import annotations

import enum
import sys
from functools import partial

import trio

from bridges.epoxy import (
    ErrorCode,
    ErrorResponse,
    ServiceError,
    ServiceProxy,
    bond,
    method,
    open_epoxy_connection,
    serve_epoxy,
    service,
)
from rstreams.support import listener_port

__all__ = ["Operation", "Params", "Result", "Calc", "main"]


class Operation(enum.IntEnum):
    Add = 0
    Div = 1
    Sub = 2
    Mul = 3


class Params(bond.Struct):
    x: int = bond.field(1, bond.INT32)
    y: int = bond.field(2, bond.INT32)
    operation: Operation = bond.field(3, Operation, default=Operation.Add)


class Result(bond.Struct):
    z: int = bond.field(1, bond.INT32)


def _int32(value: int) -> int:
    return (value + 2**31) % 2**32 - 2**31


@service("examples.calc.Calc")
class Calc:
    @method
    async def Calculate(self, params: Params) -> Result:  # noqa: N802 - the spec's method name
        x, y = params.x, params.y
        if params.operation == Operation.Add:
            z = x + y
        elif params.operation == Operation.Sub:
            z = x - y
        elif params.operation == Operation.Mul:
            z = x * y
        elif params.operation == Operation.Div:
            if y == 0:
                raise ServiceError(ErrorCode.INVALID_INVOCATION, "division by zero")
            z = int(x / y)  # truncated toward zero, as C# does
        else:
            raise ServiceError(ErrorCode.INVALID_INVOCATION, f"unknown operation {int(params.operation)}")
        return Result(z=_int32(z))


async def call(host: str, port: int, x: int, operation: Operation, y: int) -> int:
    """Connect, call ``Calculate`` once through a proxy, return ``z``."""
    async with open_epoxy_connection(host, port) as connection:
        calc = ServiceProxy(connection, Calc)
        result: Result = await calc.Calculate(Params(x=x, y=y, operation=operation))
        return result.z


async def demo() -> None:
    """A server on a free port and one client: the spec's 67 * 87."""
    async with trio.open_nursery() as nursery:
        [listener] = await nursery.start(partial(serve_epoxy, "127.0.0.1", 0, services=[Calc()]))
        port = listener_port(listener)
        z = await call("127.0.0.1", port, 67, Operation.Mul, 87)
        print(f"67 Mul 87 = {z}")
        try:
            await call("127.0.0.1", port, 1, Operation.Div, 0)
        except ErrorResponse as exc:
            print(f"1 Div 0: {exc}")
        nursery.cancel_scope.cancel()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


def main(argv: list[str]) -> int:
    if not argv:
        trio.run(demo)
    elif argv[0] == "serve" and len(argv) == 2:
        host, port = _address(argv[1])
        print(f"serving examples.calc.Calc on epoxy://{host}:{port}", flush=True)
        trio.run(partial(serve_epoxy, host, port, services=[Calc()]))
    elif argv[0] == "call" and len(argv) == 5:
        host, port = _address(argv[1])
        z = trio.run(call, host, port, int(argv[2]), Operation[argv[3]], int(argv[4]))
        print(z)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except* KeyboardInterrupt:
        sys.exit(130)  # Ctrl-C: stop quietly, with the status shells expect
