#!/usr/bin/python3
"""An independent subscriber of the vLLM KV-events protocol, written from its description
(docs/KV_EVENTS.md, and the protocol facts in kvtier issue 24), for kvtierd_kv_events_test.

It subscribes to a ZeroMQ PUB endpoint (3-frame messages: topic, 8-byte big-endian sequence,
msgpack batch [timestamp, [events], data_parallel_rank]), checks every event's shape strictly for
the given encoding ("array": a list with the tag first; "map": a map with "type", nil fields left
out), and keeps a router's view: the set of block hashes per medium. The driving test talks to
it with one JSON object per line on stdin and stdout:

  -> {"ready": true}                           (stdout, once subscribed)
  <- {"expect": {"CPU": [..], "STORAGE": [..], "GPU": [..]}, "cleared": N}
  -> {"ok": true} | {"ok": false, "error": "..."}   (the view matched within the timeout, or not)
  <- {"settle": S}                             (polls S seconds; for a bound SUB, below)
  -> {"ok": true}
  <- {"replay_from": K}
  -> {"ok": ..., "seqs": [...]}                (replay of K..: payloads equal the live ones)
  <- {"finish": true}
  -> {"ok": ..., "batches": B, "events": E}    (live sequence numbers gap-free from 0), then exits

With --late it does not subscribe: it replays from 0 (what a subscriber that connects late does),
applies what it gets, and answers "expect" and "finish" against that view (its sequence numbers
consecutive from the oldest buffered one, which "first_seq" reports).

--block-size is every BlockStored's block_size. --tokens is a JSON object {"<hash>": [token ids]}:
a BlockStored of a listed block must carry its tokens (vLLM's form: the blocks' tokens
concatenated, so every block but a lone one a full page of block_size tokens), one of blocks not
listed none.
"""
import argparse
import json
import struct
import sys
import time

import msgpack
import zmq

MEDIA = ("GPU", "CPU", "STORAGE")
STORED_FIELDS = ["block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                 "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind",
                 "kv_cache_spec_sliding_window"]
REMOVED_FIELDS = ["block_hashes", "medium", "group_idx"]
END_SEQ = struct.pack(">q", -1)
TOKENS = {}  # --tokens: block hash -> its token ids


class ProtocolError(Exception):
    pass


def check(cond, what):
    if not cond:
        raise ProtocolError(what)


def decode_event(raw, encoding, block_size):
    """One event as (type, fields dict), after checking its shape for `encoding`."""
    if encoding == "array":
        check(isinstance(raw, list) and raw and isinstance(raw[0], str),
              f"array event is not a list with a tag first: {raw!r}")
        tag = raw[0]
        names = {"BlockStored": STORED_FIELDS, "BlockRemoved": REMOVED_FIELDS,
                 "AllBlocksCleared": []}.get(tag)
        check(names is not None, f"unknown tag {tag!r}")
        check(len(raw) == 1 + len(names), f"{tag} has {len(raw) - 1} fields, not {len(names)}")
        fields = dict(zip(names, raw[1:]))
    else:
        check(isinstance(raw, dict) and isinstance(raw.get("type"), str),
              f"map event without a type: {raw!r}")
        tag = raw["type"]
        names = {"BlockStored": STORED_FIELDS, "BlockRemoved": REMOVED_FIELDS,
                 "AllBlocksCleared": []}.get(tag)
        check(names is not None, f"unknown type {tag!r}")
        fields = {k: v for k, v in raw.items() if k != "type"}
        for k, v in fields.items():
            check(k in names, f"{tag} has an unknown field {k!r}")
            check(v is not None, f"{tag} writes nil for {k!r} (defaults are left out)")
        for k in names:
            fields.setdefault(k, None)
    if tag == "AllBlocksCleared":
        return tag, fields
    hashes = fields["block_hashes"]
    check(isinstance(hashes, list) and hashes, f"{tag} without block_hashes")
    for h in hashes:
        check(isinstance(h, int) and 0 <= h < 2**64, f"{tag} hash {h!r} is not a uint64")
    check(fields["medium"] in MEDIA, f"{tag} medium {fields['medium']!r}")
    check(fields["group_idx"] is None, f"{tag} group_idx {fields['group_idx']!r}")
    if tag == "BlockStored":
        check_tokens(hashes, fields["token_ids"], fields["block_size"])
        check(fields["block_size"] == block_size,
              f"block_size {fields['block_size']!r}, expected {block_size}")
        for k in ("parent_block_hash", "lora_id", "lora_name", "extra_keys", "kv_cache_spec_kind",
                  "kv_cache_spec_sliding_window"):
            check(fields[k] is None, f"BlockStored {k} is {fields[k]!r}, expected nil")
    return tag, fields


def check_tokens(hashes, token_ids, block_size):
    """A BlockStored's token_ids against --tokens."""
    listed = [h in TOKENS for h in hashes]
    check(all(listed) or not any(listed),
          f"BlockStored mixes blocks with and without tokens: {[hex(h) for h in hashes]}")
    if not any(listed):
        check(token_ids == [], f"token_ids {token_ids!r} for blocks sent without tokens")
        return
    want = [t for h in hashes for t in TOKENS[h]]
    check(token_ids == want,
          f"token_ids {token_ids!r} of {[hex(h) for h in hashes]}, expected {want}")
    if len(hashes) > 1:
        check(all(len(TOKENS[h]) == block_size for h in hashes),
              f"a partial page shares a BlockStored: {[hex(h) for h in hashes]}")


def decode_batch(payload, encoding, block_size):
    batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    check(isinstance(batch, list) and len(batch) == 3, f"batch is not [ts, events, rank]: {batch!r}")
    ts, events, rank = batch
    check(isinstance(ts, float) and abs(ts - time.time()) < 600, f"timestamp {ts!r}")
    check(isinstance(events, list) and events, "batch without events")
    check(rank is None, f"data_parallel_rank {rank!r}")
    return [decode_event(e, encoding, block_size) for e in events]


class View:
    """What a router knows: hashes per medium."""

    def __init__(self, strict=True):
        self.strict = strict  # a BlockRemoved must name a stored block
        self.media = {m: set() for m in MEDIA}
        self.cleared = 0
        self.events = 0

    def apply(self, events):
        for tag, f in events:
            self.events += 1
            if tag == "BlockStored":
                self.media[f["medium"]].update(f["block_hashes"])
            elif tag == "BlockRemoved":
                for h in f["block_hashes"]:
                    check(not self.strict or h in self.media[f["medium"]],
                          f"BlockRemoved of {h:#x} from {f['medium']}, which was not stored there")
                    self.media[f["medium"]].discard(h)
            else:
                self.cleared += 1
                for m in MEDIA:
                    self.media[m].clear()

    def matches(self, expect, cleared):
        return self.cleared == cleared and all(
            self.media[m] == set(expect.get(m, [])) for m in MEDIA)

    def describe(self):
        return {m: sorted(hex(h) for h in s) for m, s in self.media.items()} | {
            "cleared": self.cleared}


def replay(ctx, endpoint, start, timeout_ms=10000):
    """[(seq, payload)] the replay socket returns from `start`, up to its terminator."""
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(endpoint)
    dealer.send_multipart([b"", struct.pack(">Q", start)])
    out = []
    while True:
        if not dealer.poll(timeout_ms):
            raise ProtocolError(f"replay from {start}: no terminator within {timeout_ms} ms")
        frames = dealer.recv_multipart()
        check(len(frames) == 3 and frames[0] == b"" and len(frames[1]) == 8,
              f"replay reply frames {[len(f) for f in frames]}")
        if frames[1] == END_SEQ:
            check(frames[2] == b"", "terminator with a payload")
            break
        out.append((struct.unpack(">Q", frames[1])[0], frames[2]))
    dealer.close()
    return out


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--replay", required=True)
    ap.add_argument("--topic", default="")
    ap.add_argument("--encoding", choices=["array", "map"], required=True)
    ap.add_argument("--block-size", type=int, default=0)
    ap.add_argument("--tokens", default="{}")
    ap.add_argument("--late", action="store_true")
    ap.add_argument("--bind", action="store_true", help="bind the SUB socket (kvtierd connects)")
    args = ap.parse_args()
    TOKENS.update({int(h): ids for h, ids in json.loads(args.tokens).items()})
    ctx = zmq.Context()
    view = View(strict=not args.late)
    live = []  # (seq, payload) in arrival order
    sub = None
    if args.late:
        for seq, payload in replay(ctx, args.replay, 0):
            live.append((seq, payload))
            view.apply(decode_batch(payload, args.encoding, args.block_size))
    else:
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, args.topic.encode())
        (sub.bind if args.bind else sub.connect)(args.endpoint)
        time.sleep(0.5)  # ZeroMQ's slow joiner: let the subscription reach the publisher
    say({"ready": True})

    def pump(timeout_ms):
        if sub is None or not sub.poll(timeout_ms):
            return
        while True:
            try:
                frames = sub.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            check(len(frames) == 3, f"message of {len(frames)} frames")
            check(frames[0] == args.topic.encode(), f"topic {frames[0]!r}")
            check(len(frames[1]) == 8, "sequence frame is not 8 bytes")
            seq = struct.unpack(">Q", frames[1])[0]
            live.append((seq, frames[2]))
            view.apply(decode_batch(frames[2], args.encoding, args.block_size))

    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            if "expect" in cmd:
                deadline = time.time() + 20
                while not view.matches(cmd["expect"], cmd.get("cleared", 0)) and \
                        time.time() < deadline:
                    pump(100)
                if view.matches(cmd["expect"], cmd.get("cleared", 0)):
                    say({"ok": True})
                else:
                    say({"ok": False, "error": f"view {view.describe()} != expected {cmd}"})
            elif "settle" in cmd:
                # A bound SUB takes a connecting publisher's pipe (and sends it the subscription)
                # only while it polls (libzmq issue 2267): poll a while.
                deadline = time.time() + cmd["settle"]
                while time.time() < deadline:
                    pump(50)
                say({"ok": True})
            elif "replay_from" in cmd:
                start = cmd["replay_from"]
                got = replay(ctx, args.replay, start)
                want = [(s, p) for s, p in live if s >= start]
                check(got == want, f"replay from {start}: seqs {[s for s, _ in got]}, live had "
                                   f"{[s for s, _ in want]} (or payloads differ)")
                say({"ok": True, "seqs": [s for s, _ in got]})
            elif "finish" in cmd:
                seqs = [s for s, _ in live]
                first = 0 if not args.late or not seqs else seqs[0]
                check(seqs == list(range(first, first + len(seqs))),
                      f"sequence numbers {seqs} not {first}..{first + len(seqs) - 1}")
                say({"ok": True, "batches": len(seqs), "events": view.events,
                     "first_seq": seqs[0] if seqs else None})
                return
        except ProtocolError as e:
            say({"ok": False, "error": str(e)})
            return


if __name__ == "__main__":
    main()
