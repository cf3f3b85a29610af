-- wrk script: 16 pipelined requests per write (wrk -s bench/pipeline.lua URL).
-- The path comes from the URL; `depth` can be changed with wrk's `--` arguments.
local depth = 16

function init(args)
  if args[1] then
    depth = tonumber(args[1])
  end
  local one = wrk.format(nil, wrk.path)
  req = string.rep(one, depth)
end

function request()
  return req
end
