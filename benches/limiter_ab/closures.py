"""Measurement only: nine local functions defined per call, then nothing."""
from floor import encode  # noqa: F401
SCRIPT = """
local a = 1
local function f1() return a end
local function f2() return a end
local function f3() return a end
local function f4() return a end
local function f5() return a end
local function f6() return a end
local function f7() return a end
local function f8() return a end
local function f9() return a end
local formats = {}
return 1
"""
