#!/usr/bin/python3
"""A KV-aware router for a fleet of kvtierd nodes, written from the vLLM KV-events protocol as
docs/KV_EVENTS.md describes it (independent of kvtierd's C++ publisher).

It subscribes (SUB) to each node's PUB endpoint and keeps, per node, the 64-bit block hashes that
node holds and in which media: BlockStored adds a medium to its blocks, BlockRemoved takes one
away (a block still held in another medium stays), AllBlocksCleared empties the node. Batches are
applied in sequence order; a gap in the sequence numbers (a batch the SUB socket missed, e.g.
before its subscription reached the publisher) is filled from the node's replay endpoint
(ROUTER; this side a DEALER): the request names the next expected sequence number and the answer
ends with sequence -1. At start every node is replayed from 0 (a late join). Both event encodings
(map and array) are read.

Queries, one line each on stdin, one answer line each on stdout:

  route <hex64> <hex64> ...   the prompt's full-page hashes, in order
      -> <node> <pages>       the node whose consecutive prefix of present hashes is longest,
                              and that prefix's length; ties (no match anywhere included) go to
                              the tied node given the fewest sessions so far. Every message
                              already queued on the sockets is applied first (they are polled
                              until quiet for --quiet-ms).
  stats  -> batches=B events=E replayed=R gaps=G lost=L blocks=N0,N1,...
  quit   (or end of input)

Usage: kv_router.py --node PUB[,REPLAY] --node PUB[,REPLAY] ...   (node i is the i-th --node)
       [--quiet-ms 2] [--ignore-events]
With --ignore-events it reads the streams but applies no event (every route is a tie, so sessions
go round the nodes): the control that shows a test tells a router that uses the events from one
that does not.

Debian's python3, python3-zmq and python3-msgpack.
"""
import argparse
import struct
import sys

import msgpack
import zmq

END_SEQ = -1
STORED_FIELDS = ["block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                 "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind",
                 "kv_cache_spec_sliding_window"]
REMOVED_FIELDS = ["block_hashes", "medium", "group_idx"]
FIELDS = {"BlockStored": STORED_FIELDS, "BlockRemoved": REMOVED_FIELDS, "AllBlocksCleared": []}
REPLAY_WAIT_MS = 2000  # at most this long for a replay's terminator before a query is answered


def decode_event(raw):
    """(tag, fields) of one event in either encoding; None for an event this router ignores."""
    if isinstance(raw, dict):
        tag = raw.get("type")
        fields = {k: v for k, v in raw.items() if k != "type"}
    elif isinstance(raw, list) and raw and isinstance(raw[0], str):
        tag = raw[0]
        fields = dict(zip(FIELDS.get(tag, []), raw[1:]))
    else:
        return None
    if tag not in FIELDS:
        return None
    return tag, fields


class Node:
    """One kvtierd: its sockets, its sequence state and the blocks it holds."""

    def __init__(self, ctx, index, pub, replay):
        self.index = index
        self.sub = ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.connect(pub)
        self.replay = None
        if replay:
            self.replay = ctx.socket(zmq.DEALER)
            self.replay.setsockopt(zmq.LINGER, 0)
            self.replay.connect(replay)
        self.ignore_events = False
        self.next_seq = 0
        self.pending = {}  # seq -> payload, batches that arrived ahead of a gap
        self.replaying = False
        self.live = False  # a batch came on the SUB socket: the subscription is through
        self.blocks = {}  # hash -> set of media
        self.sessions = 0
        self.batches = self.events = self.replayed = self.gaps = self.lost = 0

    def request_replay(self, gap=True):
        if self.replay is None or self.replaying:
            return
        self.replay.send_multipart([b"", struct.pack(">Q", self.next_seq)])
        self.replaying = True
        self.gaps += gap

    def on_batch(self, seq, payload, replayed):
        if seq < self.next_seq or seq in self.pending:
            return  # already applied (a replay overlapping the live stream)
        if replayed:
            self.replayed += 1
        self.pending[seq] = payload
        while self.next_seq in self.pending:
            self.apply(self.pending.pop(self.next_seq))
            self.next_seq += 1
        if self.pending:
            if self.replay is None:
                self.skip_gap()
            else:
                self.request_replay()

    def on_replay_end(self):
        self.replaying = False
        if self.pending:
            self.skip_gap()  # the replay buffer no longer holds the missing batches

    def skip_gap(self):
        first = min(self.pending)
        self.lost += first - self.next_seq
        self.next_seq = first
        while self.next_seq in self.pending:
            self.apply(self.pending.pop(self.next_seq))
            self.next_seq += 1

    def apply(self, payload):
        batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        self.batches += 1
        if self.ignore_events:
            return
        if not isinstance(batch, list) or len(batch) < 2 or not isinstance(batch[1], list):
            return
        for raw in batch[1]:
            event = decode_event(raw)
            if event is None:
                continue
            self.events += 1
            tag, f = event
            if tag == "AllBlocksCleared":
                self.blocks.clear()
                continue
            medium = f.get("medium")
            for h in f.get("block_hashes") or []:
                if tag == "BlockStored":
                    self.blocks.setdefault(h, set()).add(medium)
                else:
                    media = self.blocks.get(h)
                    if media is not None:
                        media.discard(medium)
                        if not media:
                            del self.blocks[h]

    def prefix(self, hashes):
        n = 0
        for h in hashes:
            if h not in self.blocks:
                break
            n += 1
        return n


class Router:
    def __init__(self, specs, quiet_ms, ignore_events):
        self.ctx = zmq.Context()
        self.nodes = []
        for i, spec in enumerate(specs):
            pub, _, replay = spec.partition(",")
            self.nodes.append(Node(self.ctx, i, pub, replay))
            self.nodes[-1].ignore_events = ignore_events
        self.quiet_ms = quiet_ms
        self.poller = zmq.Poller()
        self.by_socket = {}
        for node in self.nodes:
            self.poller.register(node.sub, zmq.POLLIN)
            self.by_socket[node.sub] = (node, False)
            if node.replay is not None:
                self.poller.register(node.replay, zmq.POLLIN)
                self.by_socket[node.replay] = (node, True)
                node.request_replay(gap=False)  # a late join: whatever is still buffered

    def drain(self):
        """Applies every queued message; returns once the sockets were quiet for quiet_ms and no
        replay is outstanding (or REPLAY_WAIT_MS passed)."""
        waited = 0
        while True:
            ready = dict(self.poller.poll(self.quiet_ms))
            if not ready:
                if not any(n.replaying for n in self.nodes) or waited >= REPLAY_WAIT_MS:
                    return
                waited += self.quiet_ms
                continue
            for sock in ready:
                node, is_replay = self.by_socket[sock]
                while True:
                    try:
                        frames = sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    if is_replay:
                        self.on_replay(node, frames)
                    elif len(frames) == 3 and len(frames[1]) == 8:
                        node.live = True
                        node.on_batch(struct.unpack(">Q", frames[1])[0], frames[2], False)

    @staticmethod
    def on_replay(node, frames):
        if len(frames) != 3 or len(frames[1]) != 8:
            return
        seq = struct.unpack(">q", frames[1])[0]
        if seq == END_SEQ:
            node.on_replay_end()
        else:
            node.on_batch(seq, frames[2], True)

    def catch_up(self):
        """Until a node's SUB socket has delivered a batch, its subscription may not have reached
        the publisher yet (batches sent before are lost, and the next one, which would show the
        gap, may be long in coming): each query asks the replay endpoint first."""
        for node in self.nodes:
            if not node.live:
                node.request_replay(gap=False)
        self.drain()

    def route(self, hashes):
        self.catch_up()
        best = max(n.prefix(hashes) for n in self.nodes)
        tied = [n for n in self.nodes if n.prefix(hashes) == best]
        chosen = min(tied, key=lambda n: (n.sessions, n.index))
        chosen.sessions += 1
        return chosen.index, best

    def stats(self):
        self.catch_up()
        total = lambda attr: sum(getattr(n, attr) for n in self.nodes)
        return "batches=%d events=%d replayed=%d gaps=%d lost=%d blocks=%s" % (
            total("batches"), total("events"), total("replayed"), total("gaps"), total("lost"),
            ",".join(str(len(n.blocks)) for n in self.nodes))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--node", action="append", required=True,
                        help="PUB endpoint, optionally followed by ,REPLAY endpoint")
    parser.add_argument("--quiet-ms", type=int, default=2)
    parser.add_argument("--ignore-events", action="store_true")
    args = parser.parse_args()
    router = Router(args.node, args.quiet_ms, args.ignore_events)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "route":
            try:
                hashes = [int(w, 16) for w in words[1:]]
            except ValueError:
                print("error bad hash in route", flush=True)
                continue
            node, pages = router.route(hashes)
            print(node, pages, flush=True)
        elif words[0] == "stats":
            print(router.stats(), flush=True)
        elif words[0] == "quit":
            break
        else:
            print("error unknown request %r" % words[0], flush=True)


if __name__ == "__main__":
    main()
