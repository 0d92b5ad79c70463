"""A Schema Registry for tests: the part of Confluent Schema Registry's REST API that Kafka
clients use (subjects, versions, ids, lookups, registration), served over HTTP from a thread.

No Schema Registry server installs from this machine's registries (Confluent's and Apicurio's
are Java downloads; Karapace is not on PyPI), so the tests run this one; the product talks to it
with confluent-kafka's own ``SchemaRegistryClient``, as it would to a real registry.  Ids are
global and a schema text registered twice keeps its id, as Confluent's registry does.  With
``user``/``password`` every request needs HTTP basic auth; :meth:`SchemaRegistry.fail_next`
answers the next requests with HTTP 500, a subject in :attr:`incompatible` refuses a new
schema as incompatible (HTTP 409), and :meth:`stop` takes it away.

    with SchemaRegistry() as registry:
        registry.url                    # http://127.0.0.1:<port>
        registry.register("events-value", schema_text)   # -> id
"""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

__all__ = ["SchemaRegistry"]


class SchemaRegistry:
    """An in-process registry (see the module docstring)."""

    def __init__(self, user: str | None = None, password: str | None = None) -> None:
        self.schemas: dict[int, tuple[str, str]] = {}  # id -> (type, text)
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

    def register(self, subject: str, text: str, kind: str = "AVRO") -> int:
        """Register ``text`` under ``subject``; its id."""
        with self._lock:
            found = next((i for i, s in self.schemas.items() if s == (kind, text)), None)
            sid = found if found is not None else max(self.schemas, default=0) + 1
            self.schemas[sid] = (kind, text)
            versions = self.subjects.setdefault(subject, [])
            if sid not in versions:
                versions.append(sid)
            return sid

    def _version(self, subject: str, version: int) -> dict[str, Any]:
        sid = self.subjects[subject][version - 1]
        kind, text = self.schemas[sid]
        return {"subject": subject, "version": version, "id": sid, "schema": text,
                "schemaType": kind}

    def answer(self, method: str, path: str, body: dict[str, Any] | None
               ) -> tuple[int, Any]:
        """The status and JSON body for one request."""
        parts = [unquote(p) for p in urlsplit(path).path.strip("/").split("/")]
        missing = (404, {"error_code": 40403, "message": "Schema not found"})
        if parts[:2] == ["schemas", "ids"] and len(parts) == 3 and method == "GET":
            found = self.schemas.get(int(parts[2]))
            if found is None:
                return missing
            return 200, {"schema": found[1], "schemaType": found[0]}
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
            sid = self.register(subject, body["schema"], body.get("schemaType") or "AVRO")
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
            return 200, self._version(subject, version)
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
