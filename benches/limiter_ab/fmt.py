"""Measurement only: the numbers() format built twice per call."""
from floor import encode  # noqa: F401
SCRIPT = """
local formats = {}
local function fmt(count)
  local f = formats[count]
  if f == nil then
    f = '<' .. string.rep('d', count)
    formats[count] = f
  end
  return f
end
local x = fmt(13)
local y = fmt(5)
return 1
"""
