#!/usr/bin/env python3
"""A desktop keyring for the tests: a private D-Bus session bus (Debian's dbus-daemon, no service activation)
with Debian's gnome-keyring-daemon on it, its "login" keyring created and unlocked with a password, and
Python `secretstorage` (jeepney underneath: code we did not write) as the independent reader.

Usage: keyring_session.py DIR
Prints "ready ADDRESS" (the bus's DBUS_SESSION_BUS_ADDRESS), then answers one line per command on stdin:
  items       JSON: every item of the default collection: [{label, attributes, secret}] (secret as text)
  lock        locks the default collection                  -> "ok"
  unlock      unlocks it with the password (gnome-keyring's own interface, as a desktop login does) -> "ok"
  pause       SIGSTOP the keyring daemon: it stops answering mid-call  -> "ok"
  resume      SIGCONT                                                   -> "ok"
  stop        kills the keyring daemon (nothing restarts it)            -> "ok"
  store JSON  stores {"label", "attributes", "secret"} in the default collection -> "ok"
Closing stdin ends everything it started.
"""
import json
import os
import signal
import subprocess
import sys

import private_bus
import secretstorage
from jeepney import DBusAddress, new_method_call
from jeepney.io.blocking import open_dbus_connection

PASSWORD = b"keyring-password"

root = os.path.abspath(sys.argv[1])
bus, address, environment = private_bus.start(root)
os.environ.update(environment)
daemon_log = open(os.path.join(root, "gnome-keyring.log"), "wb")
daemon = subprocess.Popen(["gnome-keyring-daemon", "--foreground", "--unlock", "--components=secrets"],
                          stdin=subprocess.PIPE, stdout=daemon_log, stderr=daemon_log, env=environment)
daemon.stdin.write(PASSWORD)
daemon.stdin.close()

connection = secretstorage.dbus_init()


def collection():
    return secretstorage.get_default_collection(connection)


# The daemon is ready when its default collection answers (a D-Bus round trip, not a clock).
while True:
    try:
        if not collection().is_locked():
            break
    except Exception:
        if daemon.poll() is not None:
            with open(os.path.join(root, "gnome-keyring.log"), errors="replace") as log:
                said = " | ".join(log.read().split("\n")[-5:])
            print(f"error: gnome-keyring-daemon exited ({daemon.returncode}): {said}", flush=True)
            sys.exit(1)

print("ready " + address, flush=True)


def unlock_with_password():
    # What a desktop login does: gnome-keyring's private unlock interface, the password in a plain session.
    raw = open_dbus_connection(bus=address)
    service = DBusAddress("/org/freedesktop/secrets", bus_name="org.freedesktop.secrets",
                          interface="org.freedesktop.Secret.Service")
    reply = raw.send_and_get_reply(new_method_call(service, "OpenSession", "sv", ("plain", ("s", ""))))
    session = reply.body[1]
    internal = DBusAddress("/org/freedesktop/secrets", bus_name="org.freedesktop.secrets",
                           interface="org.gnome.keyring.InternalUnsupportedGuiltRiddenInterface")
    path = collection().collection_path
    raw.send_and_get_reply(new_method_call(internal, "UnlockWithMasterPassword", "o(oayays)",
                                           (path, (session, b"", PASSWORD, "text/plain"))))
    raw.close()


for line in sys.stdin:
    command, _, argument = line.strip().partition(" ")
    try:
        if command == "items":
            answer = json.dumps([{"label": item.get_label(), "attributes": item.get_attributes(),
                                  "secret": item.get_secret().decode()}
                                 for item in collection().get_all_items()])
        elif command == "lock":
            collection().lock()
            answer = "ok"
        elif command == "unlock":
            unlock_with_password()
            answer = "ok" if not collection().is_locked() else "error: still locked"
        elif command == "pause":
            daemon.send_signal(signal.SIGSTOP)
            answer = "ok"
        elif command == "resume":
            daemon.send_signal(signal.SIGCONT)
            answer = "ok"
        elif command == "stop":
            daemon.kill()
            daemon.wait()
            answer = "ok"
        elif command == "store":
            fields = json.loads(argument)
            collection().create_item(fields["label"], fields["attributes"], fields["secret"].encode(),
                                     replace=True)
            answer = "ok"
        else:
            answer = "error: unknown command " + command
    except Exception as error:  # the test sees the reason
        answer = "error: " + repr(error)
    print(answer, flush=True)

for process in (daemon, bus):
    if process.poll() is None:
        process.send_signal(signal.SIGCONT) if process is daemon else None
        process.kill()
        process.wait()
