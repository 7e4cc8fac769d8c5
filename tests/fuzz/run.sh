#!/bin/sh
# run.sh [SECONDS]: builds the protocol parser fuzzer with libFuzzer and
# AddressSanitizer + UndefinedBehaviorSanitizer into build-fuzz/fuzz-proto,
# seeds build-fuzz/corpus with a few valid request lines, and fuzzes for
# SECONDS (default 20).  Exits non-zero if the build fails or the fuzzer
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
	-o "$out/fuzz-proto" tests/fuzz/fuzz_proto.c protocol/proto.c lib/tern.c

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
get jobs
gets a b/open c/t=500/peek
get jobs/t=1000/close/open
get jobs/abort
delete jobs noreply
delete noreply 0
delete jobs 0
flush jobs
flush_all 10 noreply
flush_expired jobs
flush_all_expired
stats
version
verbosity 1 noreply
quit
shutdown
reload
monitor jobs 10 100
confirm jobs 3 noreply
SEEDS
printf 'set q 0 0 5\r\nhello\r\nget q/open\r\nget q/close\r\nstats\r\n' > "$corpus/seed-batch"

# Dictionary of the protocol's words, so mutations reach deep branches fast.
dict=$out/proto.dict
{
	for w in get gets set delete flush flush_all flush_expired flush_all_expired \
		stats version verbosity quit shutdown reload monitor confirm noreply \
		/open /close /abort /peek /t= .. + 4294967295 4294967296 \
		9223372036854775807 4611686018427387904 86400000 86400; do
		printf '"%s"\n' "$w"
	done
	printf '"\\x09"\n"\\x0d\\x0a"\n'
} > "$dict"

echo "fuzzing proto_parse for ${secs}s (corpus $corpus)"
"$out/fuzz-proto" -max_total_time="$secs" -max_len=4096 -timeout=10 \
	-dict="$dict" -artifact_prefix="$out/" -print_final_stats=1 "$corpus"
