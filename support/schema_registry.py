"""A Schema Registry for tests: the part of Confluent Schema Registry's REST API that Kafka
clients use (subjects, versions, ids, lookups, registration), served over HTTP from a thread.

No Schema Registry server installs from this machine's registries (Confluent's and Apicurio's
are Java downloads; Karapace is not on PyPI), so the tests run this one; the product talks to it
with confluent-kafka's own ``SchemaRegistryClient``, as it would to a real registry.  Ids are
global and a schema text registered twice keeps its id, as Confluent's registry does.  A
Protobuf schema (``schema_type="PROTOBUF"``) is registered in its serialized form (a base64
``FileDescriptorProto``, what confluent-kafka's ``ProtobufSerializer`` sends) with its
``references`` (``{"name", "subject", "version"}`` each), and answered as registered, with or
without ``?format=serialized``; a ``.proto`` text is compiled for ``format=serialized`` when
``grpc_tools`` is installed (Confluent's registry would answer the ``.proto`` text without the
format; this one cannot print one).  With
``user``/``password`` every request needs HTTP basic auth; :meth:`SchemaRegistry.fail_next`
answers the next requests with HTTP 500, a subject in :attr:`incompatible` refuses a new
schema as incompatible (HTTP 409), and :meth:`stop` takes it away.

    with SchemaRegistry() as registry:
        registry.url                    # http://127.0.0.1:<port>
        registry.register("events-value", schema_text)   # -> id
"""

from __future__ import annotations

import base64
import binascii
import json
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["SchemaRegistry"]


class SchemaRegistry:
    """An in-process registry (see the module docstring)."""

    def __init__(self, user: str | None = None, password: str | None = None) -> None:
        self.schemas: dict[int, tuple[str, str]] = {}  # id -> (type, text)
        self.references: dict[int, list[dict[str, Any]]] = {}  # id -> its references
        self.subjects: dict[str, list[int]] = {}  # subject -> ids by version
        self.requests: list[str] = []  # "GET /schemas/ids/1", ...
        self.auth = (base64.b64encode(f"{user}:{password}".encode()).decode()
                     if user is not None else None)
        self._failures = 0
        self.incompatible: set[str] = set()  # subjects that refuse a new schema
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def __enter__(self) -> SchemaRegistry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop serving (a client then cannot reach it)."""
        self._server.shutdown()
        self._server.server_close()

    def fail_next(self, count: int) -> None:
        """Answer the next ``count`` requests with HTTP 500."""
        self._failures = count

    def register(self, subject: str, text: str, schema_type: str = "AVRO",
                 references: list[dict[str, Any]] | None = None) -> int:
        """Register ``text`` (of ``schema_type``, importing ``references``) under ``subject``;
        its id."""
        refs = [dict(r) for r in references or []]
        with self._lock:
            found = next((i for i, s in self.schemas.items() if s == (schema_type, text)
                          and self.references.get(i, []) == refs), None)
            sid = found if found is not None else max(self.schemas, default=0) + 1
            self.schemas[sid] = (schema_type, text)
            self.references[sid] = refs
            versions = self.subjects.setdefault(subject, [])
            if sid not in versions:
                versions.append(sid)
            return sid

    def _schema(self, sid: int, fmt: str | None) -> dict[str, Any]:
        """Schema ``sid`` as the registry answers it (``fmt``: the ``format`` asked)."""
        kind, text = self.schemas[sid]
        if kind == "PROTOBUF" and fmt == "serialized":
            text = _serialized(text, {r["name"]: self.schemas[self.subjects[r["subject"]][
                int(r["version"]) - 1]][1] for r in self.references.get(sid, [])})
        out: dict[str, Any] = {"schema": text, "schemaType": kind}
        if self.references.get(sid):
            out["references"] = self.references[sid]
        return out

    def _version(self, subject: str, version: int, fmt: str | None = None) -> dict[str, Any]:
        sid = self.subjects[subject][version - 1]
        return {"subject": subject, "version": version, "id": sid, **self._schema(sid, fmt)}

    def answer(self, method: str, path: str, body: dict[str, Any] | None
               ) -> tuple[int, Any]:
        """The status and JSON body for one request."""
        url = urlsplit(path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        fmt = parse_qs(url.query).get("format", [None])[0]
        missing = (404, {"error_code": 40403, "message": "Schema not found"})
        if parts[:2] == ["schemas", "ids"] and len(parts) == 3 and method == "GET":
            if int(parts[2]) not in self.schemas:
                return missing
            return 200, self._schema(int(parts[2]), fmt)
        if parts == ["subjects"] and method == "GET":
            return 200, sorted(self.subjects)
        if not parts or parts[0] != "subjects" or len(parts) < 2:
            return 404, {"error_code": 404, "message": f"no such resource {path}"}
        subject = parts[1]
        if len(parts) == 3 and parts[2] == "versions" and method == "POST":
            assert body is not None
            known = [self.schemas[i][1] for i in self.subjects.get(subject, [])]
            if subject in self.incompatible and body["schema"] not in known:
                return 409, {"error_code": 409, "message": "Schema being registered is "
                             "incompatible with an earlier schema for subject "
                             f'"{subject}"'}
            sid = self.register(subject, body["schema"], body.get("schemaType") or "AVRO",
                                body.get("references"))
            return 200, {"id": sid}
        if len(parts) == 2 and method == "POST":  # lookup
            assert body is not None
            kind = body.get("schemaType") or "AVRO"
            for version, sid in enumerate(self.subjects.get(subject, []), 1):
                if self.schemas[sid] == (kind, body["schema"]):
                    return 200, self._version(subject, version)
            return missing
        if subject not in self.subjects:
            return 404, {"error_code": 40401, "message": f"Subject '{subject}' not found."}
        if len(parts) == 3 and parts[2] == "versions":
            return 200, list(range(1, len(self.subjects[subject]) + 1))
        if len(parts) == 4 and parts[2] == "versions":
            count = len(self.subjects[subject])
            version = count if parts[3] == "latest" else int(parts[3])
            if not 1 <= version <= count:
                return 404, {"error_code": 40402, "message": f"Version {version} not found."}
            return 200, self._version(subject, version, fmt)
        return 404, {"error_code": 404, "message": f"no such resource {path}"}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self, method: str) -> None:
                registry.requests.append(f"{method} {self.path}")
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                if registry.auth is not None and self.headers.get(
                        "Authorization") != f"Basic {registry.auth}":
                    status, out = 401, {"error_code": 401, "message": "Unauthorized"}
                elif registry._failures > 0:
                    registry._failures -= 1
                    status, out = 500, {"error_code": 50001, "message": "store failed"}
                else:
                    status, out = registry.answer(method, self.path, body)
                data = json.dumps(out).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

        return Handler


def _serialized(text: str, imports: dict[str, str]) -> str:
    """Protobuf schema ``text`` in its serialized form: as it is when it is one already (a
    base64 ``FileDescriptorProto``), else compiled (with ``imports``, name -> text) by
    ``grpc_tools.protoc`` where it is installed, else as it is."""
    try:
        base64.b64decode(text, validate=True)
        return text
    except (binascii.Error, ValueError):
        pass
    try:
        import grpc_tools  # noqa: F401
    except ImportError:
        return text
    from google.protobuf import descriptor_pb2

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        for name, body in {**imports, "schema.proto": text}.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(body)
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{root}",
                        f"--descriptor_set_out={root / 'out.desc'}", "schema.proto"],
                       check=True, capture_output=True)
        (file,) = descriptor_pb2.FileDescriptorSet.FromString(
            (root / "out.desc").read_bytes()).file
        return base64.b64encode(file.SerializeToString()).decode("ascii")
