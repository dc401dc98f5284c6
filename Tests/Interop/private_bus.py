"""A private D-Bus session bus for the keyring tests: Debian's dbus-daemon on a socket in the test's own
folder, with no service activation (so a stopped keyring stays stopped and nothing on the machine's own session
bus is ever reached)."""
import os
import subprocess


def start(root):
    """Starts the bus under `root`; returns (process, address, environment for the bus's clients)."""
    home = os.path.join(root, "home")
    runtime = os.path.join(root, "run")
    for folder in (os.path.join(home, ".cache"), os.path.join(home, ".local", "share"), runtime):
        os.makedirs(folder, exist_ok=True)
    os.chmod(runtime, 0o700)
    config = os.path.join(root, "session.conf")
    with open(config, "w") as file:
        file.write(f"""<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={runtime}/bus</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
""")
    bus = subprocess.Popen(["dbus-daemon", "--config-file", config, "--nofork", "--print-address=1"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    address = bus.stdout.readline().decode().strip()
    environment = dict(os.environ, HOME=home, XDG_DATA_HOME=os.path.join(home, ".local", "share"),
                       XDG_RUNTIME_DIR=runtime, DBUS_SESSION_BUS_ADDRESS=address)
    return bus, address, environment
