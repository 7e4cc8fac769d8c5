#!/bin/sh
# run.sh [SECONDS]: builds the protocol fuzzer (text, meta and binary
# request codecs) with libFuzzer and AddressSanitizer +
# UndefinedBehaviorSanitizer into build-fuzz/fuzz-proto, seeds
# build-fuzz/corpus with valid request lines and binary frames, and fuzzes
# for SECONDS (default 20).  Exits non-zero if the build fails or the fuzzer
# finds a crash, a sanitizer report or a broken invariant (the reproducer
# is left in build-fuzz/ as crash-*, leak-* or timeout-*).
set -eu

secs=${1:-20}
case $secs in
''|*[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;;
esac

cd "$(dirname "$0")/../.."
out=build-fuzz
corpus=$out/corpus
mkdir -p "$corpus"

CC=${FUZZ_CC:-clang}
$CC -std=gnu11 -g -O1 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wvla \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	-fno-omit-frame-pointer \
	-o "$out/fuzz-proto" tests/fuzz/fuzz_proto.c protocol/proto.c protocol/meta.c \
	protocol/binary.c lib/tern.c

# Seed corpus: one valid request per file (plus a pipelined batch), named
# by content so re-running does not duplicate them.
i=0
while IFS= read -r line; do
	i=$((i + 1))
	printf '%s\r\n' "$line" > "$corpus/seed-$i"
done <<'SEEDS'
set jobs 0 0 5
set k 16 0 2 
set orders+audit 4294967295 2592000 1024 noreply
set orders/delay=95 0 0 5
add jobs/delay=30s 1 0 2 noreply
get jobs
gets a b/open c/t=500/peek
get jobs/peek=20 other/t=5/peek=1000
get jobs/t=1000/close/open
get jobs/abort
gets {jobs}/close=42/reserve/t=100
get {jobs}/abort=7
delete {jobs}/9 noreply
delete jobs noreply
delete noreply 0
delete jobs 0
flush jobs
flush_all 10 noreply
flush_expired jobs
flush_all_expired
stats
status
status READONLY
status queue jobs
status queue jobs quiescent
version
version foo noreply
verbosity 1 noreply
verbosity debug
verbosity noreply
stats settings
stats noreply
quit
shutdown
reload
monitor jobs 10 100
confirm jobs 3 noreply
add lock 0 60 1 noreply
cas q 0 0 5 99 noreply
replace q 0 0 5
incr q 1
gat 0 q
mg jobs/open/t=500 v k c f s t Oabc q
mg am9icw== b v k
ms jobs 5 F7 T60 c k O1 MS q
ms jobs 5 ME
ms jobs 5 MA
md jobs q k O2
mn
me jobs
ma jobs D1
SEEDS
printf 'set q 0 0 5\r\nhello\r\nget q/open\r\nget q/close\r\nstats\r\n' > "$corpus/seed-batch"
# Binary frames: SET q (flags 7) "hello", GETK q/open, GETQ q/t=5, NOOP,
# STAT q, ADDQ q, an unknown opcode with a body, VERSION.
# (octal escapes: sh's printf has no \x)
bin() { printf "$1" >> "$corpus/seed-binary"; }
: > "$corpus/seed-binary"
bin '\200\001\000\001\010\000\000\000\000\000\000\016\000\000\000\001\000\000\000\000\000\000\000\000'
bin '\000\000\000\007\000\000\000\000qhello'
bin '\200\014\000\006\000\000\000\000\000\000\000\006\000\000\000\002\000\000\000\000\000\000\000\000q/open'
bin '\200\011\000\007\000\000\000\000\000\000\000\007\000\000\000\003\000\000\000\000\000\000\000\000q/t=500'
bin '\200\012\000\000\000\000\000\000\000\000\000\000\000\000\000\004\000\000\000\000\000\000\000\000'
bin '\200\020\000\001\000\000\000\000\000\000\000\001\000\000\000\005\000\000\000\000\000\000\000\000q'
bin '\200\022\000\001\010\000\000\000\000\000\000\012\000\000\000\006\000\000\000\000\000\000\000\000'
bin '\000\000\000\000\000\000\000\000qx'
bin '\200\125\000\000\000\000\000\000\000\000\000\003\000\000\000\007\000\000\000\000\000\000\000\000abc'
bin '\200\013\000\000\000\000\000\000\000\000\000\000\000\000\000\010\000\000\000\000\000\000\000\000'

# Dictionary of the protocol's words, so mutations reach deep branches fast.
dict=$out/proto.dict
{
	for w in get gets set delete flush flush_all flush_expired flush_all_expired \
		stats version verbosity quit shutdown reload monitor confirm noreply \
		/open /close /abort /peek /peek= /t= /close= /abort= /reserve /delay= ms { } .. + \
		settings error warn info debug \
		4294967295 4294967296 2592000000 \
		9223372036854775807 4611686018427387904 86400000 86400 \
		add replace append prepend cas incr decr touch gat gats \
		mg ms md mn me ma MS ME MA O T F b= ==; do
		printf '"%s"\n' "$w"
	done
	printf '"\\x09"\n"\\x0d\\x0a"\n'
	# binary: magic, opcodes, an empty header tail
	printf '"\\x80"\n"\\x80\\x00"\n"\\x80\\x01"\n"\\x80\\x0c"\n"\\x80\\x0a"\n"\\x80\\x10"\n'
	printf '"\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00"\n"\\xff\\xff\\xff\\xff"\n'
} > "$dict"

echo "fuzzing the text, meta and binary parsers for ${secs}s (corpus $corpus)"
"$out/fuzz-proto" -max_total_time="$secs" -max_len=4096 -timeout=10 \
	-dict="$dict" -artifact_prefix="$out/" -print_final_stats=1 "$corpus"
