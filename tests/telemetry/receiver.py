"""Real OTLP/HTTP, OTLP/gRPC and webhook receivers on 127.0.0.1 for tests.

Decodes `ExportTraceServiceRequest` / `ExportLogsServiceRequest` protobufs with
opentelemetry-proto; other POSTs are kept as JSON. `delay` makes it slow (the handler waits
on an Event, so closing the receiver releases it at once); `status` makes it fail.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span


class Receiver:
    def __init__(self) -> None:
        self.traces: list[ExportTraceServiceRequest] = []
        self.logs: list[ExportLogsServiceRequest] = []
        self.posts: list[Any] = []
        self.requests = 0
        self.delay = 0.0
        self.status = 200
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.url = ""

    def spans(self) -> list[Span]:
        return [s for r in self.traces for rs in r.resource_spans for ss in rs.scope_spans
                for s in ss.spans]

    def log_records(self) -> list[LogRecord]:
        return [lr for r in self.logs for rl in r.resource_logs for sl in rl.scope_logs
                for lr in sl.log_records]


def _handler(rx: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with rx.lock:
                rx.requests += 1
            if rx.delay:
                rx.release.wait(rx.delay)
            if rx.status != 200:
                try:
                    self.send_response(rx.status)
                    self.end_headers()
                except OSError:
                    pass
                return
            with rx.lock:
                if self.path == "/v1/traces":
                    rx.traces.append(ExportTraceServiceRequest.FromString(body))
                elif self.path == "/v1/logs":
                    rx.logs.append(ExportLogsServiceRequest.FromString(body))
                else:
                    rx.posts.append(json.loads(body))
            payload = ExportTraceServiceResponse().SerializeToString()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except OSError:  # the client gave up (a timed-out exporter): expected here
                return

    return Handler


@contextmanager
def run_receiver() -> Iterator[Receiver]:
    rx = Receiver()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(rx))
    server.daemon_threads = True
    rx.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(
        target=server.serve_forever, args=(0.05,), name="otlp-receiver", daemon=True
    )
    thread.start()
    try:
        yield rx
    finally:
        rx.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class _GrpcTraces(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, rx: Receiver) -> None:
        self.rx = rx

    def Export(self, request: ExportTraceServiceRequest, context: Any) -> Any:
        with self.rx.lock:
            self.rx.requests += 1
            self.rx.traces.append(request)
        return ExportTraceServiceResponse()


class _GrpcLogs(logs_service_pb2_grpc.LogsServiceServicer):
    def __init__(self, rx: Receiver) -> None:
        self.rx = rx

    def Export(self, request: ExportLogsServiceRequest, context: Any) -> Any:
        with self.rx.lock:
            self.rx.requests += 1
            self.rx.logs.append(request)
        return ExportLogsServiceResponse()


@contextmanager
def run_grpc_receiver() -> Iterator[Receiver]:
    rx = Receiver()
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_GrpcTraces(rx), server)
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(_GrpcLogs(rx), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    rx.url = f"http://127.0.0.1:{port}"
    try:
        yield rx
    finally:
        server.stop(grace=None).wait(timeout=5)
