"""The Epoxy structs and ``bond.comm.Error``: golden bytes, Fast Binary serialized and Compact marshalled."""

from __future__ import annotations

import pytest

from bridges.epoxy import (
    EpoxyConfig,
    EpoxyHeaders,
    EpoxyMessageType,
    Error,
    ErrorCode,
    ProtocolError,
    ProtocolErrorCode,
    bond,
)

FAST = bond.Protocol.FAST


def h(text: str) -> bytes:
    return bytes.fromhex(text)


def test_empty_config_is_one_stop_byte() -> None:
    assert bond.serialize(EpoxyConfig(), FAST) == h("00")
    assert bond.deserialize(EpoxyConfig, h("00"), FAST) == EpoxyConfig()
    # A config from a newer peer with fields we do not know still reads.
    assert bond.deserialize(EpoxyConfig, h("02 05 00 01 00"), FAST) == EpoxyConfig()


CALC_HEADERS = h(
    "06 00 00 03 00 00 00 00 00 00 00"  # 0: uint64 conversation_id = 3
    " 10 01 00 01 00 00 00"  # 1: required EpoxyMessageType (int32) = REQUEST
    " 09 02 00 12 65 78 61 6d 70 6c 65 73 2e 63 61 6c 63 2e 43 61 6c 63"  # 2: "examples.calc.Calc"
    " 09 03 00 09 43 61 6c 63 75 6c 61 74 65"  # 3: "Calculate"
    " 00"
)


def test_headers_of_the_spec_example() -> None:
    headers = EpoxyHeaders(
        conversation_id=3,
        message_type=EpoxyMessageType.REQUEST,
        service_name="examples.calc.Calc",
        method_name="Calculate",
    )
    assert bond.serialize(headers, FAST) == CALC_HEADERS
    assert bond.deserialize(EpoxyHeaders, CALC_HEADERS, FAST) == headers


def test_headers_omit_defaults_but_not_the_required_type() -> None:
    headers = EpoxyHeaders(message_type=EpoxyMessageType.RESPONSE)
    assert bond.serialize(headers, FAST) == h("10 01 00 02 00 00 00 00")
    with pytest.raises(bond.BondRequiredFieldError, match="message_type"):
        bond.deserialize(EpoxyHeaders, h("00"), FAST)


def test_protocol_error() -> None:
    assert bond.serialize(ProtocolError(), FAST) == h("00")  # GENERIC_ERROR is the default
    assert bond.serialize(ProtocolError(error_code=ProtocolErrorCode.CONNECTION_REJECTED), FAST) == h(
        "10 00 00 0b 00 00 00 00"
    )
    with_details = ProtocolError(
        error_code=ProtocolErrorCode.PROTOCOL_VIOLATED, details=bond.Bonded(Error(error_code=5, message="no"))
    )
    assert bond.serialize(with_details, FAST) == h(
        "10 00 00 03 00 00 00"
        " 0b 01 00 0a 01"  # 1: nullable<bonded<Error>>: a list of one struct
        " 10 00 00 05 00 00 00  09 01 00 02 6e 6f  00"  # the Error, inline, in Fast Binary
        " 00"
    )
    decoded = bond.deserialize(ProtocolError, bond.serialize(with_details, FAST), FAST)
    assert decoded.details is not None and decoded.details.value == Error(error_code=5, message="no")
    assert ProtocolErrorCode.ERROR_IN_ERROR == 0xFFFF


def test_error_codes_are_int32_on_the_wire() -> None:
    assert ErrorCode.METHOD_NOT_FOUND == ErrorCode.from_hex(0xA0BD0001) == 0xA0BD0001 - 2**32
    assert ErrorCode.INTERNAL_SERVER_ERROR == 0xA0BD0000 - 2**32
    error = Error(error_code=ErrorCode.METHOD_NOT_FOUND, message="Calculate?")
    wire = bond.marshal(error)
    assert wire[:4] == h("43 42 01 00")
    # 0: int32 (16) zigzag(-1598226431) = 3196452861 = 0xbe85fffd = varint fd ff 97 f4 0b; then field 1
    assert wire[4:11] == h("10 fd ff 97 f4 0b 29")
    assert bond.unmarshal(Error, wire) == error


def test_error_nests_through_bonded() -> None:
    inner = Error(error_code=1, message="inner")
    outer = Error(error_code=2, inner_error=bond.Bonded(inner))
    for protocol in bond.Protocol:
        decoded = bond.unmarshal(Error, bond.marshal(outer, protocol))
        assert decoded.inner_error is not None and decoded.inner_error.value == inner
