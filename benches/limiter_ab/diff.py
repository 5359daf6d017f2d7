#!/usr/bin/env python3
"""Differential check of two limiter scripts: the same random batches
(admissions of rpm, tpm and parallel on a few keys, leases, settlements of
earlier and of same-batch admissions, refunds to old buckets, deadlines
passed, small limits so refusals happen) run through both on one private
redis-server (database 0 and 1), with Redis's clock replaced by a fake one
the harness moves (so buckets roll over and windows move on); after each
batch the replies and every key (fields, members, scores, TTL within
300 ms) must be equal. Slots are padded from 3 held instead of 32, so
padded forms and their settlements are reached.

  python3 benches/limiter_ab/diff.py [[REFERENCE.lua] CANDIDATE.lua] SEED KEYS BATCHES

(defaults: one_by_one.lua against the shipped limiter.lua). CANDIDATE may be
two scripts, `X.lua+Y.lua`, run by turns on the same counters (batch 1 by X,
batch 2 by Y, ...): replicas of two versions during a rolling upgrade. Each
script is sent its own protocol (packed.py tells which).
"""
import os
import random
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from ab import Conn, private_redis  # noqa: E402
import packed  # noqa: E402

FAKE = "local t = redis.call('HMGET', 'faketime', 's', 'us')"
PAD = b"|" + b"~" * 64


def load(name):
    s = open(name).read()
    assert "local t = redis.call('TIME')" in s
    # Slots padded from 3 held, not 32 (limiter.lua's BIG): the batches here
    # hold a few slots a key, and the padded forms must be reached.
    return s.replace("local t = redis.call('TIME')", FAKE).replace("local BIG = 32", "local BIG = 3")


argv = sys.argv[1:]
ref = argv.pop(0) if len(argv) > 4 else os.path.join(HERE, "one_by_one.lua")
cand = argv.pop(0) if len(argv) > 3 else os.path.join(HERE, "../../gateway/src/limits/limiter.lua")
A = load(ref)
Bs = [load(x) for x in cand.split("+")]
sys.argv = [sys.argv[0], cand] + argv
proc, port = private_redis()
c = Conn(port)
sa = c.call("SCRIPT", "LOAD", A); sbs = [c.call("SCRIPT", "LOAD", B) for B in Bs]
def snapshot(db):
    c.call("SELECT", db)
    out = {}
    for k in sorted(c.call("KEYS", "*")):
        if k == b'faketime': continue
        t = c.call("TYPE", k)
        if t == 'hash':
            kv = c.call("HGETALL", k); out[k] = ('h', sorted(zip(kv[::2], kv[1::2])))
        else:
            # A slot taken in a big set is its request id padded (limiter.lua's
            # PAD): compared as the id.
            zs = c.call("ZRANGE", k, 0, -1, "WITHSCORES")
            pairs = sorted((float(zs[j + 1]), zs[j].removesuffix(PAD)) for j in range(0, len(zs), 2))
            out[k] = ('z', pairs)
        ttl = c.call("PTTL", k)
        out[k] += (ttl,)
    return out
def enc_for(script):
    """The encoder of `script`'s protocol (packed or the one before)."""
    return packed.encode_ops if packed.is_packed(script) else enc
def flat(reply, script, nops):
    """`script`'s reply to a batch of `nops`, as a flat array."""
    return reply if packed.is_packed(script) else packed.flatten(reply, nops)
def enc(ops):
    keys, argv, letters = [], [], b""
    for op in ops:
        if op[0] == 'a':
            _, ks, kinds, rid, nums, amounts = op
            keys += ks; letters += b"a"
            argv += [rid, b"600000", kinds, struct.pack("<%dd" % len(nums), *nums)] + amounts
        else:
            _, ks, kinds, rid, tick, nums = op
            keys += ks; letters += b"f"
            argv += [rid, b"%d" % tick, kinds, struct.pack("<%dd" % len(nums), *nums)]
    return [b"%d" % len(keys)] + [k.encode() if isinstance(k, str) else k for k in keys] + [letters] + [x if isinstance(x, bytes) else x.encode() for x in argv]
rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
T0 = 1_700_000_000
now = [T0, 0]
inflight = []
nkeys = int(sys.argv[3]) if len(sys.argv) > 3 else 2
rseq = 0
mism = 0
for step in range(int(sys.argv[4]) if len(sys.argv) > 4 else 3000):
    if rng.random() < 0.3:
        # Whole seconds too: requests settle in later buckets (refunds to
        # older buckets, in the run path as well).
        now[1] += rng.choice([1000, 200000, 700000, 1000000, 2500000])
        if rng.random() < 0.05: now[0] += rng.choice([3, 30, 70])
        while now[1] >= 1000000: now[1] -= 1000000; now[0] += 1
    for db in (0, 1):
        c.call("SELECT", db); c.call("HSET", "faketime", "s", now[0], "us", now[1])
    ops = []
    for _ in range(rng.choice([1, 2, 4, 8, 16])):
        k = rng.randrange(nkeys)
        ks = ["{k%d}:rpm" % k, "{k%d}:tpm" % k, "{k%d}:par" % k]
        same = [o for o in ops if o[0] == 'a' and o[2] == b"rtp"]
        if same and rng.random() < 0.15:
            o = rng.choice(same)
            k2 = int(o[1][0].split('}')[0][2:])
            # Its admission's reply is not known yet: the slot's form is not
            # (0: both forms go).
            ops.append(('f', ["{k%d}:tpm" % k2, "{k%d}:par" % k2], b"tp", o[3], now[0], [1, 61, rng.choice([0, 5, 400]), o[4][8], 0]))
        elif inflight and rng.random() < 0.5:
            rid, k2, tick, reserved, lease, held = inflight.pop(rng.randrange(len(inflight)))
            ks2 = ["{k%d}:tpm" % k2, "{k%d}:par" % k2]
            used = rng.choice([0, reserved // 2, reserved, reserved + 50])
            if lease:
                ops.append(('f', ["{k%d}:tpm" % k2], b"l", rid, tick, [1, 61, used, reserved]))
            else:
                # The slot's form as its admission's reply told it (the slots
                # held then, plus one), or not known: an admission of this
                # batch, or as after a lost reply.
                seen = held + 1 if held is not None and rng.random() < 0.9 else 0
                ops.append(('f', ks2, b"tp", rid, tick, [1, 61, used, reserved, seen]))
        else:
            rseq += 1
            rid = b"r%d" % rseq
            res = rng.choice([10, 100, 300])
            lim = (rng.choice([5, 20, 1000]), rng.choice([500, 3000, 100000]), rng.choice([2, 5, 1000]))
            if rng.random() < 0.05:
                ops.append(('a', ["{k%d}:tpm" % k], b"l", rid, [1, 61, 600000, 0, lim[1], res, 1], [b"%d" % res]))
                inflight.append((rid, k, None, res, True, None))
            else:
                exp = 0 if rng.random() < 0.95 else (now[0]*1000 - 5)
                ops.append(('a', ks, b"rtp", rid, [1, 61, 600000, exp, lim[0], 1, 1, lim[1], res, res, lim[2], 1, 1], [b"1", b"%d" % res, b"1"]))
                inflight.append((rid, k, None, res, False, None))
    # admitted ticks come from replies; run A first to get replies
    replies = []
    B, sb = Bs[step % len(Bs)], sbs[step % len(Bs)]
    for db, sha, script in ((0, sa, A), (1, sb, B)):
        c.call("SELECT", db)
        # fill in admitted ticks
        fixed = []
        for op in ops:
            if op[0] == 'f' and op[4] is None:
                op = op[:4] + (now[0] - rng.choice([0]),) + op[5:]
            fixed.append(op)
        r = c.call("EVALSHA", sha, *enc_for(script)(fixed))
        replies.append(r)
    if flat(replies[0], A, len(ops)) != flat(replies[1], B, len(ops)):
        print("reply mismatch step", step, ops, replies); mism += 1; break
    # record admitted ticks for in-flight ones
    assert not packed.is_packed(A), "the reference speaks the unpacked protocol"
    rs = replies[0] if len(ops) > 1 else [replies[0]]
    for op, r in zip(ops, rs):
        if op[0] == 'a':
            for j, f in enumerate(inflight):
                if f[0] == op[3]:
                    if isinstance(r, list) and r[0] == 1:
                        inflight[j] = (f[0], f[1], r[1], f[3] if not f[4] else min(f[3], op[4][4] - r[2]), f[4],
                                       None if f[4] else r[4])
                    else:
                        inflight.pop(j)
                    break
    # settlements with None tick: use faked; patch inflight entries with tick None -> drop
    inflight = [f for f in inflight if f[2] is not None]
    sa_, sb_ = snapshot(0), snapshot(1)
    same = set(sa_) == set(sb_) and all(sa_[k][:2] == sb_[k][:2] and ((sa_[k][2] > 0) == (sb_[k][2] > 0)) and abs(sa_[k][2] - sb_[k][2]) <= 300 for k in sa_)
    if not same:
        print("state mismatch step", step, ops)
        for k in set(sa_) | set(sb_):
            if sa_.get(k) != sb_.get(k): print(k, sa_.get(k), sb_.get(k))
        mism += 1; break
print("done, mismatches", mism, "requests", rseq)
proc.kill()
sys.exit(1 if mism else 0)
