# Driver for Ruby's dalli (the JSON line protocol described in
# tests/clients/clientmatrix.py): one request per line on stdin, one reply
# per line on stdout.
#
#   ruby dalli_driver.rb HOST:PORT [timeout_ms=N]
#
# dalli 3.0 speaks memcached's binary protocol only.  Values are stored raw
# (raw: true, so not Marshal-serialized) and uncompressed (compress: false),
# so that other clients read the bytes.  timeout_ms replaces socket_timeout
# (default 1 s).
require 'dalli'
require 'json'

addr = ARGV[0]
opts = ARGV[1..].to_h { |a| a.split('=', 2) }
copts = { compress: false }
copts[:socket_timeout] = opts['timeout_ms'].to_f / 1000 if opts['timeout_ms']
Dalli.logger.level = Logger::FATAL
c = Dalli::Client.new(addr, copts)

def hexof(v)
  v.nil? ? nil : v.b.unpack1('H*')
end

run = lambda do |req|
  case req[0]
  when 'set' then !!c.set(req[1], [req[2]].pack('H*'), 0, raw: true)
  when 'get' then hexof(c.get(req[1]))
  when 'mget' then c.get_multi(req[1]).transform_values { |v| hexof(v) }
  when 'version' then c.version[addr] || raise('no version')
  when 'stats' then (c.stats[addr] || raise('no stats')).transform_values(&:to_s)
  else raise "unknown op #{req[0]}"
  end
end

$stdout.sync = true
$stdin.each_line do |line|
  out = begin
    { r: run.call(JSON.parse(line)) }
  rescue StandardError => e
    { err: "#{e.class}: #{e.message}" }
  end
  puts JSON.generate(out)
end
