"""NIP-77 interop: rust-nostr's nostr-sdk (Python bindings) syncs against hearth, and hearth syncs
against nostr-sdk's own relay, both ways. Run by tests/interop/run.sh with the hearth binary and
a temporary directory; exits non-zero with what differed.

1. nostr-sdk as the initiator: a client holding 20 events hearth lacks (and 30 both have) runs
   `Client.sync(direction=BOTH)` against hearth, which holds 25 the client lacks. After it, the
   client sent exactly the 20, received exactly the 25, and hearth serves all 75.
2. hearth as the initiator: `hearth sync <nostr-sdk LocalRelay> --local <hearth> --direction both` while hearth
   runs (the round goes through its admin API). After it both relays hold the same 85 ids.
"""

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import threading
from datetime import timedelta

from nostr_sdk import (
    Client, ClientBuilder, EventBuilder, Filter, Keys, Kind, LocalRelayBuilder, NostrLmdb, RelayUrl,
    ReqTarget, SyncDirection, SyncOptions, Timestamp, uniffi_set_event_loop,
)

TIMEOUT = timedelta(seconds=20)


def fail(why):
    print(f"interop: FAILED: {why}", file=sys.stderr)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def notes(keys, n, tag, start):
    return [
        EventBuilder(Kind(1), f"{tag} {i}").custom_created_at(Timestamp.from_secs(start + i)).finalize(keys)
        for i in range(n)
    ]


async def client_for(url, events=(), db=None):
    # The default database only tracks ids; a real one (LMDB) holds what sync sends.
    builder = ClientBuilder()
    if db is not None:
        builder = builder.database(await NostrLmdb.open(db))
    client = builder.build()
    await client.add_relay(RelayUrl.parse(url))
    await client.connect()
    for e in events:
        await client.database().save_event(e)
    return client


async def publish(url, events):
    client = await client_for(url)
    for e in events:
        out = await client.send_event(e)
        if out.failed:
            fail(f"publishing to {url}: {out.failed}")
    await client.shutdown()


async def ids_at(url):
    client = await client_for(url)
    events = await client.fetch_events(ReqTarget.auto([Filter().limit(5000)]), TIMEOUT)
    await client.shutdown()
    return sorted(e.id().to_hex() for e in events)


def hex_ids(events):
    return sorted(e.id().to_hex() for e in events)


async def main(binary, work):
    binary = os.path.abspath(binary)
    # The database is called back from nostr-sdk's threads: uniffi needs to know our loop.
    uniffi_set_event_loop(asyncio.get_running_loop())
    token = os.urandom(16).hex()
    env = dict(os.environ)
    env.update({
        "HEARTH_SERVER__BIND": "127.0.0.1:0",
        "HEARTH_STORAGE__DATA_DIR": os.path.join(work, "data"),
        "HEARTH_ADMIN__TOKEN": token,
        "HEARTH_LIMITS__ENABLED": "false",
        "RUST_LOG": "info",
    })
    env.pop("NO_COLOR", None)
    relay = subprocess.Popen([binary], cwd=work, env=env, stderr=subprocess.PIPE, text=True)
    try:
        addr = None
        for line in relay.stderr:
            m = re.search(r"listening on (127\.0\.0\.1:\d+)", line)
            if m:
                addr = m.group(1)
                break
        if addr is None:
            fail("hearth exited before listening")
        # The rest of its log is drained so that it never blocks on a full pipe.
        threading.Thread(target=lambda: [None for _ in relay.stderr], daemon=True).start()
        hearth = f"ws://{addr}"
        keys = Keys.generate()
        start = Timestamp.now().as_secs() - 10_000
        shared = notes(keys, 30, "shared", start)
        ours = notes(keys, 20, "ours", start + 100)
        theirs = notes(keys, 25, "theirs", start + 200)

        # 1. nostr-sdk's sync against hearth.
        await publish(hearth, shared + theirs)
        client = await client_for(hearth, shared + ours, db=os.path.join(work, "sdk-client-db"))
        opts = SyncOptions().direction(SyncDirection.BOTH).initial_timeout(TIMEOUT)
        output = await client.sync(Filter(), opts=opts)
        if output.failed:
            fail(f"nostr-sdk's sync failed: {output.failed}")
        sent, received = sorted(i.to_hex() for i in output.report.sent), sorted(i.to_hex() for i in output.report.received)
        if sent != hex_ids(ours):
            fail(f"nostr-sdk sent {len(sent)} events, not the 20 hearth lacked")
        if received != hex_ids(theirs):
            fail(f"nostr-sdk received {len(received)} events, not the 25 it lacked")
        await client.shutdown()
        if await ids_at(hearth) != hex_ids(shared + ours + theirs):
            fail("after nostr-sdk's sync hearth does not hold the 75 events")
        print("interop: nostr-sdk -> hearth: sent 20, received 25, hearth holds 75")

        # 2. hearth's sync against nostr-sdk's relay.
        port = free_port()
        local = LocalRelayBuilder().port(port).build()
        await local.run()
        sdk_url = f"ws://127.0.0.1:{port}"
        extra = notes(Keys.generate(), 10, "sdk relay", start + 300)
        await publish(sdk_url, shared + extra)
        done = subprocess.run([binary, "sync", sdk_url, "--local", hearth, "--direction", "both"], cwd=work, env=env,
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            fail(f"hearth sync exited {done.returncode}: {done.stdout} {done.stderr}")
        summary = json.loads(done.stdout)
        want = {"have": 45, "need": 10, "fetched": 10, "stored": 10, "published": 45, "refused": 0}
        got = {k: summary.get(k) for k in want}
        if got != want:
            fail(f"hearth sync summary {summary}, want {want}")
        everything = hex_ids(shared + ours + theirs + extra)
        if await ids_at(sdk_url) != everything:
            fail("after hearth sync the nostr-sdk relay does not hold the 85 events")
        if await ids_at(hearth) != everything:
            fail("after hearth sync hearth does not hold the 85 events")
        print(f"interop: hearth -> nostr-sdk relay: {json.dumps(summary)}; both hold 85")
        local.shutdown()
    finally:
        relay.terminate()
        relay.wait(timeout=30)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
