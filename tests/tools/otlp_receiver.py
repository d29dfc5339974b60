"""A local OTLP/HTTP metrics receiver for the tests: decodes each POST to /v1/metrics with
OpenTelemetry's own protobuf definitions (PyPI opentelemetry-proto, in the venv that
scripts/setup.sh --test-tools makes) and appends it to OUT as one JSON line
(google.protobuf.json_format, proto field names: 64-bit integers are strings there).

    otlp_receiver.py OUT [PORT]   prints the port it listens on (127.0.0.1; PORT, or one the
                                  kernel picks), then serves

Answers 200 with an empty ExportMetricsServiceResponse, as a Collector does. A body that does
not decode is answered 400 and recorded as {"undecodable": "<error>"}, so the test sees it.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

OUT = sys.argv[1]
PORT = int(sys.argv[2]) if len(sys.argv) > 2 else 0


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        record = {
            "path": self.path,
            "content_type": self.headers.get("Content-Type"),
            "headers": {k.lower(): v for k, v in self.headers.items()},
        }
        try:
            req = ExportMetricsServiceRequest()
            req.ParseFromString(body)
            record["request"] = MessageToDict(req, preserving_proto_field_name=True)
            status, reply = 200, ExportMetricsServiceResponse().SerializeToString()
        except Exception as e:  # noqa: BLE001 - any decode failure is the test's finding
            record["undecodable"] = str(e)
            status, reply = 400, b""
        with open(OUT, "a") as f:
            f.write(json.dumps(record) + "\n")
        self.send_response(status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
