#!/usr/bin/env python3
"""A Secret Service of the tests' own, for what Debian's gnome-keyring cannot be made to do without a display:
answer `Unlock` with a prompt that a person (the test) accepts or dismisses when it chooses, and refuse writes.
It speaks the freedesktop Secret Service API (org.freedesktop.Secret.*) through jeepney on a private session bus
(private_bus.py), keeping items in memory.

Usage: fake_secret_service.py DIR
Prints "ready ADDRESS", then answers one line per command on stdin:
  items              JSON: every item: [{label, attributes, secret}] (secret as text)
  lock | unlock      locks or unlocks the collection (no prompt)                        -> "ok"
  prompts MODE       how the next prompts end: "accept" (unlocks), "dismiss", or "hold" (until `complete`) -> "ok"
  wait-prompt        answers "ok" once a client has called Prompt on a held prompt (an error after 45 s)
  complete MODE      ends the held prompts: "accept" or "dismiss"                       -> "ok"
  fail-writes ON|OFF CreateItem answers org.freedesktop.DBus.Error.Failed while on      -> "ok"
  calls              JSON: the Secret Service methods called so far, in order
Closing stdin ends everything it started.
"""
import json
import os
import sys
import threading

import private_bus
from jeepney import DBusAddress, HeaderFields, MessageType, new_error, new_method_return, new_signal
from jeepney.io.blocking import open_dbus_connection
from jeepney.bus_messages import message_bus

COLLECTION = "/org/freedesktop/secrets/collection/login"
SESSION = "/org/freedesktop/secrets/session/s1"

root = os.path.abspath(sys.argv[1])
bus, address, _ = private_bus.start(root)
connection = open_dbus_connection(bus=address)

state = threading.Condition()
locked = False
prompt_mode = "accept"
held = []  # prompts a client has called Prompt on, waiting for `complete`
prompts = 0
fail_writes = False
items = {}  # path -> {"label", "attributes", "secret"}
next_item = 0
calls = []


def completed(prompt, dismissed):
    """The prompt's Completed signal (b dismissed, v result: the unlocked objects)."""
    global locked
    if not dismissed:
        locked = False
    emitter = DBusAddress(prompt, interface="org.freedesktop.Secret.Prompt")
    connection.send(new_signal(emitter, "Completed", "bv", (dismissed, ("ao", [] if dismissed else [COLLECTION]))))


def answer(message):
    """The reply to one method call (with `state` held)."""
    global prompts, next_item
    header = message.header.fields
    member = header.get(HeaderFields.member)
    interface = header.get(HeaderFields.interface)
    path = header.get(HeaderFields.path)
    if path == "/org/freedesktop/secrets/aliases/default":
        path = COLLECTION
    calls.append(member)
    body = message.body
    if member == "OpenSession":
        if body[0] != "plain":
            return new_error(message, "org.freedesktop.DBus.Error.NotSupported", "s", (body[0],))
        return new_method_return(message, "vo", (("s", ""), SESSION))
    if member == "ReadAlias":
        return new_method_return(message, "o", (COLLECTION if body[0] == "default" else "/",))
    if interface == "org.freedesktop.DBus.Properties" and member == "Get":
        if path == COLLECTION and body[1] in ("Locked", "Label"):
            return new_method_return(message, "v", (("b", locked) if body[1] == "Locked" else ("s", "Login"),))
        if path in items and body[1] in ("Label", "Attributes", "Locked"):
            fields = items[path]
            value = {"Label": ("s", fields["label"]), "Attributes": ("a{ss}", fields["attributes"]),
                     "Locked": ("b", locked)}[body[1]]
            return new_method_return(message, "v", (value,))
    if member == "Unlock":
        if not locked:
            return new_method_return(message, "aoo", (list(body[0]), "/"))
        prompts += 1
        return new_method_return(message, "aoo", ([], f"/org/freedesktop/secrets/prompt/p{prompts}"))
    if member == "Prompt":
        reply = new_method_return(message)
        connection.send(reply)
        if prompt_mode == "hold":
            held.append(path)
            state.notify_all()
        else:
            completed(path, prompt_mode == "dismiss")
        return None
    if locked and member in ("SearchItems", "GetSecret", "CreateItem", "Delete"):
        return new_error(message, "org.freedesktop.Secret.Error.IsLocked", "s", ("the collection is locked",))
    if member == "SearchItems":
        wanted = dict(body[0])
        found = [item for item, fields in items.items() if fields["attributes"] == wanted]
        return new_method_return(message, "ao", (found,))
    if member == "GetSecret":
        if path not in items:
            return new_error(message, "org.freedesktop.Secret.Error.NoSuchObject", "s", (path,))
        return new_method_return(message, "(oayays)", ((SESSION, b"", items[path]["secret"], "text/plain"),))
    if member == "CreateItem":
        if fail_writes:
            return new_error(message, "org.freedesktop.DBus.Error.Failed", "s", ("the fake keyring refuses writes",))
        properties, secret, replace = body
        attributes = dict(properties["org.freedesktop.Secret.Item.Attributes"][1])
        label = properties["org.freedesktop.Secret.Item.Label"][1]
        existing = [item for item, fields in items.items() if fields["attributes"] == attributes]
        if existing and replace:
            item = existing[0]
        else:
            next_item += 1
            item = f"{COLLECTION}/i{next_item}"
        items[item] = {"label": label, "attributes": attributes, "secret": bytes(secret[2])}
        return new_method_return(message, "oo", (item, "/"))
    if member == "Delete":
        items.pop(path, None)
        return new_method_return(message, "o", ("/",))
    return new_error(message, "org.freedesktop.DBus.Error.UnknownMethod", "s", (f"{interface}.{member}",))


def serve():
    while True:
        try:
            message = connection.receive()
        except Exception:
            return
        if message.header.message_type != MessageType.method_call:
            continue
        with state:
            reply = answer(message)
            if reply is not None:
                connection.send(reply)


# The name first, then serving: a client that finds the name finds it answering. (Every send happens with
# `state` held, so replies and signals from the two threads never interleave on the socket.)
owned = connection.send_and_get_reply(message_bus.RequestName("org.freedesktop.secrets", 4)).body[0]
if owned != 1:
    print(f"error: could not own org.freedesktop.secrets ({owned})", flush=True)
    sys.exit(1)
threading.Thread(target=serve, daemon=True).start()

print("ready " + address, flush=True)

for line in sys.stdin:
    command, _, argument = line.strip().partition(" ")
    with state:
        if command == "items":
            reply = json.dumps([{"label": fields["label"], "attributes": fields["attributes"],
                                 "secret": fields["secret"].decode()} for fields in items.values()])
        elif command == "lock":
            locked = True
            reply = "ok"
        elif command == "unlock":
            locked = False
            reply = "ok"
        elif command == "prompts" and argument in ("accept", "dismiss", "hold"):
            prompt_mode = argument
            reply = "ok"
        elif command == "wait-prompt":
            # Bounded, so that a client that never prompts fails the test with what it called instead of
            # holding this loop (and its stdin's end) forever.
            if state.wait_for(lambda: held, timeout=45):
                reply = "ok"
            else:
                reply = "error: no client called Prompt within 45 s; calls: " + json.dumps(calls)
        elif command == "complete" and argument in ("accept", "dismiss"):
            for prompt in held:
                completed(prompt, argument == "dismiss")
            held.clear()
            reply = "ok"
        elif command == "fail-writes" and argument in ("on", "off"):
            fail_writes = argument == "on"
            reply = "ok"
        elif command == "calls":
            reply = json.dumps(calls)
        else:
            reply = "error: unknown command " + line.strip()
    print(reply, flush=True)

connection.close()
bus.kill()
bus.wait()
