#!/usr/bin/env python3
"""A real SMTP server for the mail tests (aiosmtpd), keeping every message it accepts.

Usage: smtp_sink.py [--tls-cert CERT --tls-key KEY] [--reject CODE]
Prints "smtp sink listening on PORT" once listening, then "accepted" for each message once it is on file;
serves until stdin closes. Each accepted message is
parsed by Python's email package and appended, as one JSON line, to the file named by $SMTP_SINK_FILE:
{"mail_from", "rcpt_tos", "from", "to", "subject", "date", "message_id", "content_type", "text", "html",
"tls"}.
  --tls-cert/--tls-key  offer STARTTLS with this certificate and refuse mail before it (530)
  --reject CODE         answer every message with CODE (e.g. 550) instead of accepting it
"""
import argparse
import asyncio
import email
import email.policy
import json
import os
import ssl
import sys
import threading

import socket

from aiosmtpd.smtp import SMTP


class Sink:
    def __init__(self, path, reject):
        self.path = path
        self.reject = reject
        self.lock = threading.Lock()

    async def handle_DATA(self, server, session, envelope):
        if self.reject:
            return f"{self.reject} refused by the test"
        message = email.message_from_bytes(envelope.original_content or envelope.content, policy=email.policy.default)
        parts = {}
        for part in message.walk():
            if part.get_content_maintype() == "text":
                parts[part.get_content_subtype()] = part.get_content()
        record = {
            "mail_from": envelope.mail_from, "rcpt_tos": envelope.rcpt_tos, "from": str(message["From"]),
            "to": str(message["To"]), "subject": str(message["Subject"]), "date": str(message["Date"]),
            "message_id": str(message["Message-ID"]), "content_type": message.get_content_type(),
            "text": parts.get("plain"), "html": parts.get("html"), "tls": session.ssl is not None,
        }
        with self.lock:
            with open(self.path, "a") as out:
                out.write(json.dumps(record) + "\n")
            # One line per message kept, after it is on file: the tests wait on these, not on a clock.
            print("accepted", flush=True)
        return "250 OK"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    parser.add_argument("--reject")
    args = parser.parse_args()
    context = None
    if args.tls_cert:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.tls_cert, args.tls_key)
    handler = Sink(os.environ["SMTP_SINK_FILE"], args.reject)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(loop.create_server(
        lambda: SMTP(handler, hostname="localhost", tls_context=context, require_starttls=context is not None),
        sock=listener))
    threading.Thread(target=loop.run_forever, daemon=True).start()
    print(f"smtp sink listening on {listener.getsockname()[1]}", flush=True)
    sys.stdin.read()
    loop.call_soon_threadsafe(server.close)

if __name__ == "__main__":
    main()
