#!/bin/bash
# Runs every test suite of tern (called by `make test` after both builds).
# Each step runs even when an earlier one failed; the exit status is
# non-zero when any failed.  Steps whose directory does not exist yet are
# reported as skipped.
cd "$(dirname "$0")/.."
PY=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1
passed=0
failed=0
failed_steps=()

step() {
	local name="$1"
	shift
	echo
	echo "=== $name: $*"
	local t0=$SECONDS
	"$@" 2>&1 | tee "$bg_dir/$name.log"
	if [ "${PIPESTATUS[0]}" -eq 0 ]; then
		passed=$((passed + 1))
		echo "=== $name: ok ($((SECONDS - t0)) s)"
	else
		failed=$((failed + 1))
		failed_steps+=("$name")
		echo "=== $name: FAILED ($((SECONDS - t0)) s)"
	fi
}

# failures NAME: the lines of a step's output that name what failed
# (pytest's short summary, check's failing tests, sanitizer reports), so
# that the end of the run says which test failed, not only which step.
failures() {
	grep -aE '^(FAILED|ERROR) |^[^ :]+:[0-9]+:[EF]:|^SUMMARY: |^==[0-9]+==ERROR|^invariant failed|differs \(status' \
		"$bg_dir/$1.log" | head -20
}

# pytest_dir [VAR=VALUE...] DIR [pytest args]: runs one pytest directory
# with the given environment.
pytest_dir() {
	local envs=()
	while [[ "$1" == *=* ]]; do
		envs+=("$1")
		shift
	done
	local dir="$1"
	shift
	[ -d "$dir" ] || { echo "(no $dir)"; return 0; }
	env "${envs[@]}" $PY -m pytest -q -p no:cacheprovider "$@" "$dir"
}

# bg_start NAME CMD...: starts a long step in the background, its output
# kept in a file; bg_wait NAME reports it as a step of its own.  The soak
# run spends most of its time waiting on its kill timer and its servers'
# syncs, so it overlaps the other steps instead of adding its 3 minutes;
# the package's build overlaps them too.
bg_dir=$(mktemp -d)
trap 'rm -rf "$bg_dir"' EXIT
bg_start() {
	local name="$1"
	shift
	( t0=$SECONDS; "$@" > "$bg_dir/$name.out" 2>&1; echo "$? $((SECONDS - t0))" > "$bg_dir/$name.rc" ) &
	echo "$!" > "$bg_dir/$name.pid"
	echo "=== $name: started in the background: $*"
}
bg_wait() {
	local name="$1"
	wait "$(cat "$bg_dir/$name.pid")"
	echo
	echo "=== $name: (ran in the background)"
	cat "$bg_dir/$name.out"
	cp "$bg_dir/$name.out" "$bg_dir/$name.log"
	local rc secs
	read -r rc secs < "$bg_dir/$name.rc"
	if [ "$rc" -eq 0 ]; then
		passed=$((passed + 1))
		echo "=== $name: ok ($secs s)"
	else
		failed=$((failed + 1))
		failed_steps+=("$name")
		echo "=== $name: FAILED ($secs s)"
	fi
}

bg_start soak pytest_dir TERND=build/ternd tests/soak
step includes tools/include-graph -v
# Calls run one way between the files of each checked folder (nm of the
# objects both builds made above).
step calls tools/call-graph --obj build/obj
step unit build/test-unit
# Under ASan the tests run in one process (CK_FORK=no): in check's default
# fork mode LeakSanitizer checks every test's child at its exit, which made
# this step take 150-160 s against 29 s; a leak in any test still fails the
# run at exit (checked with a deliberate one).  The plain build above keeps
# fork mode, so each test is also run isolated.
step unit-asan env CK_FORK=no build-asan/test-unit
# The Debian package: built (everything compiled again, on 2 cores, at a
# lower priority), linted, installed, started, purged; mostly compiling,
# so it overlaps the steps below.  It starts after the unit tests, whose
# cases have timeouts.
bg_start package pytest_dir tests/package -s
step e2e pytest_dir TERND=build/ternd tests/e2e
step e2e-asan pytest_dir TERND=build-asan/ternd TERN_ASAN=1 tests/e2e
step clients env TERND=build/ternd tests/clients/run.sh
# The same real clients against the sanitized server: they drive the text
# and binary front ends with request shapes no hand-written test has.
step clients-asan env TERND=build-asan/ternd TERN_ASAN=1 tests/clients/run.sh
step load pytest_dir TERND=build/ternd TERN_LOAD=build/tern-load tests/load
step journal pytest_dir TERND=build/ternd TERN_JOURNAL=build/tern-journal TERN_LOAD=build/tern-load tests/journal
# Under ASan, the journal suite without its two load runs (20,000 queues
# and 10 s of churn at full speed): they measure the plain build's disk,
# descriptors and restart time, and the unit tests cover their code paths
# under ASan.
step journal-asan pytest_dir TERND=build-asan/ternd TERN_JOURNAL=build-asan/tern-journal TERN_LOAD=build/tern-load TERN_ASAN=1 tests/journal \
	-k "not twenty_thousand and not churn"
step crash pytest_dir TERND=build/ternd TERN_JOURNAL=build/tern-journal tests/crash
# Power cuts: pcfs, the file system that can lose power, on its own; the
# cuts aimed at what the journal got wrong; and a short power-cut run of
# every sync mode (tools/powercut).  Skipped, with the reason, only where
# /dev/fuse is absent.
step powercut pytest_dir TERND=build/ternd TERN_JOURNAL=build/tern-journal TERN_PCFS=build/pcfs \
	tests/powercut -rs
# The aimed cuts and the disk errors again under the sanitizers: they drive
# recovery over torn and damaged segments, and the failure paths.
step powercut-asan pytest_dir TERND=build-asan/ternd TERN_JOURNAL=build-asan/tern-journal \
	TERN_PCFS=build/pcfs TERN_ASAN=1 tests/powercut -rs -k "not test_power_cuts_short and not test_pcfs"
# Operations: logging, --dump-config, sd_notify, man pages, make install,
# metrics, the status page (also in headless chromium) and the probes.
step ops pytest_dir TERND=build/ternd TERN_LOAD=build/tern-load TERN_JOURNAL=build/tern-journal tests/ops
# (the browser loads the same page the plain step checks; the sanitized
# server renders it in test_status_page)
step ops-asan pytest_dir TERND=build-asan/ternd TERN_JOURNAL=build-asan/tern-journal TERN_ASAN=1 \
	tests/ops -k "not test_install and not test_man and not test_status_browser"
# Several ternd behind nutcracker (twemproxy), and tern-load's ketama hashing.
step cluster pytest_dir TERND=build/ternd TERN_LOAD=build/tern-load tests/cluster
step cluster-asan pytest_dir TERND=build-asan/ternd TERN_LOAD=build-asan/tern-load TERN_ASAN=1 \
	tests/cluster -k "not bench"
step sync-modes pytest_dir TERND=build/ternd TERN_LOAD=build/tern-load TERN_JOURNAL=build/tern-journal \
	TERN_PCFS=build/pcfs tests/sync
if [ -x tests/fuzz/run.sh ]; then
	step fuzz tests/fuzz/run.sh "${FUZZ_SECS:-30}"
fi

bg_wait soak
bg_wait package

echo
echo "steps: $passed passed, $failed failed"
if [ "$failed" -ne 0 ]; then
	echo "failed steps: ${failed_steps[*]}"
	for name in "${failed_steps[@]}"; do
		echo "--- $name:"
		failures "$name"
	done
	exit 1
fi
