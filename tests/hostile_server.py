"""A real OpenAI-compatible server on 127.0.0.1 (an HTTP server, not mocked HTTP) that streams chosen replies: the
fake-server technique for trying the tool as an attacker would, with replies a model could write. Each completion
choice streams the next reply of the list (cycling), in small pieces, JSON-escaped as a server sends them (a lone
surrogate goes out as the valid JSON escape "\\ud800")."""

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PIECE = 7  # characters per streamed piece


class HostileServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, replies: list[str]):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.replies = itertools.cycle(replies)
        self.lock = threading.Lock()
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1"
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def next_reply(self) -> str:
        with self.lock:
            return next(self.replies)

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        self._send("application/json", json.dumps({"object": "list", "data": [{"id": "hostile"}]}))

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        n = body.get("n", 1)
        replies = [self.server.next_reply() for _ in range(n)]
        events = [{"choices": [{"index": index, "text": reply[start:start + PIECE], "finish_reason": None}]}
                  for index, reply in enumerate(replies) for start in range(0, len(reply), PIECE)]
        events += [{"choices": [{"index": index, "text": "", "finish_reason": "stop"}]} for index in range(n)]
        self._send("text/event-stream", "".join(f"data: {json.dumps(event)}\n\n" for event in events)
                   + "data: [DONE]\n\n")

    def _send(self, content_type: str, text: str):
        data = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
