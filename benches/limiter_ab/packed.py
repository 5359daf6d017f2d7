"""The packed protocol of limiter.lua (one numbers argument a batch, a flat
reply), beside the unpacked one it replaced (`current`'s and
`one_by_one.lua`'s): the encoder, and the old replies as the new script
gives them, for `diff.py`."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = open(os.path.join(HERE, "../../gateway/src/limits/limiter.lua")).read()

G, N, TTL = 1, 61, 600000
RPM, TPM, PAR = 1_000_000, 100_000_000, 10_000
RESERVED, USED = 120, 60


def is_packed(script):
    """Whether `script` takes the packed protocol."""
    return "local TTL_ARG = ARGV[3]" in script


def encode_ops(ops):
    """ops as diff.py makes them: ('a', keys, kinds, rid, numbers, amounts)
    with numbers [g, n, ttl, expire_at, (limit, amount, need)...], or ('f',
    keys, kinds, rid, tick, numbers) with numbers [g, n, used,
    reserved...]."""
    keys, argv, letters = [], [], b""
    nums = None
    for op in ops:
        if op[0] == "a":
            _, ks, kinds, rid, n, amounts = op
            if nums is None:
                nums = list(n[:3])
            nums += n[3:]
            letters += b"a"
            argv += [kinds, rid] + amounts
        else:
            _, ks, kinds, rid, tick, n = op
            if nums is None:
                nums = list(n[:2]) + [TTL]
            nums += n[2:]
            letters += b"f"
            argv += [kinds, rid, b"%d" % tick]
        keys += ks
    enc = lambda x: x.encode() if isinstance(x, str) else x
    return ([b"%d" % len(keys)] + [enc(k) for k in keys]
            + [letters, struct.pack("<%dd" % len(nums), *nums), b"%d" % nums[2]]
            + [enc(x) for x in argv])


def flatten(reply, nops):
    """The unpacked protocol's reply (one reply, or one per operation) as
    the packed one's flat array."""
    replies = [reply] if nops == 1 else reply
    out = []
    for r in replies:
        out += r if isinstance(r, list) else [r]
    return out


def keys_of(k):
    return ["{key:%d}:rpm" % k, "{key:%d}:tpm" % k, "{key:%d}:par" % k]


def encode(ops):
    """ab.py's and cg.py's ops (see ab.py) in the packed protocol."""
    out = []
    for op, k, rid, tick, held in ops:
        r, t, p = keys_of(k)
        if op == "a":
            out.append(("a", [r, t, p], b"rtp", rid.encode(),
                        [G, N, TTL, 0, RPM, 1, 1, TPM, RESERVED, RESERVED, PAR, 1, 1],
                        [b"1", b"%d" % RESERVED, b"1"]))
        else:
            # The slot's number: the slots its set held when taken, plus one.
            out.append(("f", [t, p], b"tp", rid.encode(), tick, [G, N, USED, RESERVED, held + 1]))
    return encode_ops(out)
