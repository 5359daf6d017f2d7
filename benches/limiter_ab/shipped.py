"""Measurement only: limiter.lua as it shipped before the packed protocol
(main 9d90c03, `shipped_unpacked.lua`), with its encoding, for A/B against
`current`."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = open(os.path.join(HERE, "shipped_unpacked.lua")).read()

G, N, TTL = 1, 61, 600000
RPM, TPM, PAR = 1_000_000, 100_000_000, 10_000
RESERVED, USED = 120, 60


def keys_of(k):
    return ["{key:%d}:rpm" % k, "{key:%d}:tpm" % k, "{key:%d}:par" % k]


def encode(ops):
    keys, argv, letters = [], [], b""
    for op, k, rid, tick, *_ in ops:
        r, t, p = keys_of(k)
        if op == "a":
            keys += [r, t, p]
            letters += b"a"
            nums = [G, N, TTL, 0, RPM, 1, 1, TPM, RESERVED, RESERVED, PAR, 1, 1]
            argv += [rid.encode(), b"%d" % TTL, b"rtp", struct.pack("<%dd" % len(nums), *nums),
                     b"1", b"%d" % RESERVED, b"1"]
        else:
            keys += [t, p]
            letters += b"f"
            nums = [G, N, USED, RESERVED, 1]
            argv += [rid.encode(), b"%d" % tick, b"tp", struct.pack("<%dd" % len(nums), *nums)]
    return [b"%d" % len(keys)] + [k.encode() for k in keys] + [letters] + argv
