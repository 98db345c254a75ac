"""The NUL rule (``protocol.nul``) for every gRPC call, Permify's and SpiceDB's: one server
interceptor reads each request message (each message of a client stream too) before its
handler does and ends the call with INVALID_ARGUMENT naming the field whose string holds a
NUL, so no filter, id, cursor, metadata or schema text carrying one reaches SQL.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

from watch_service.protocol import nul


def nul_field(msg: Message, path: str = "request") -> str | None:
    """The path of the first string field of ``msg`` (nested messages, repeated fields, map
    keys and values, an ``Any``'s packed message) holding a NUL; None when none does."""
    if msg.DESCRIPTOR.full_name == "google.protobuf.Any":
        try:
            doc = json_format.MessageToDict(msg, preserving_proto_field_name=True)
        except (json_format.Error, TypeError):
            return None  # a type this server does not know: its handler refuses it
        return nul.find_nul(doc, path)
    for fd, value in msg.ListFields():
        name = f"{path}.{fd.name}"
        entry = fd.message_type
        if entry is not None and entry.GetOptions().map_entry:
            nested = entry.fields_by_name["value"].message_type is not None
            for k, v in value.items():
                found = nul.find_nul(k, name) or (
                    nul_field(v, f"{name}.{k}") if nested else nul.find_nul(v, f"{name}.{k}")
                )
                if found:
                    return found
        elif entry is not None:
            items = enumerate(value) if fd.is_repeated else [(None, value)]
            for i, item in items:
                found = nul_field(item, name if i is None else f"{name}[{i}]")
                if found:
                    return found
        elif fd.type == fd.TYPE_STRING:
            found = nul.find_nul(list(value) if fd.is_repeated else value, name)
            if found:
                return found
    return None


async def _check(request: Any, context: grpc.aio.ServicerContext) -> None:
    found = nul_field(request) if isinstance(request, Message) else None
    if found is not None:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, nul.message(found))


def _unary_in(behavior: Callable) -> Callable:
    async def run(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await _check(request, context)
        return await behavior(request, context)

    return run


def _unary_in_stream_out(behavior: Callable) -> Callable:
    async def run(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        await _check(request, context)
        result = behavior(request, context)
        if inspect.isasyncgen(result):
            async for item in result:
                yield item
        else:
            await result

    return run


async def _checked(
    requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
) -> AsyncIterator[Any]:
    async for request in requests:
        await _check(request, context)
        yield request


def _stream_in(behavior: Callable) -> Callable:
    """grpc.aio tells a unary answer from a stream by the kind of function: keep it."""
    if inspect.isasyncgenfunction(behavior):

        async def stream(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
            async for item in behavior(_checked(requests, context), context):
                yield item

        return stream

    async def unary(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
        return await behavior(_checked(requests, context), context)

    return unary


class RefuseNul(grpc.aio.ServerInterceptor):
    """Wraps every method handler of a server with the NUL check of its request(s)."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        h = await continuation(handler_call_details)
        if h is None:
            return h
        des, ser = h.request_deserializer, h.response_serializer
        if h.unary_unary:
            return grpc.unary_unary_rpc_method_handler(_unary_in(h.unary_unary), des, ser)
        if h.unary_stream:
            behavior = _unary_in_stream_out(h.unary_stream)
            return grpc.unary_stream_rpc_method_handler(behavior, des, ser)
        if h.stream_unary:
            return grpc.stream_unary_rpc_method_handler(_stream_in(h.stream_unary), des, ser)
        return grpc.stream_stream_rpc_method_handler(_stream_in(h.stream_stream), des, ser)
