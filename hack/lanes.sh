#!/usr/bin/env bash
# Runs commands concurrently, each in a lane of its own: lanes.sh NAME=COMMAND...
# Every line a lane prints is prefixed with its name, and its end with how long
# it took and the CPU time it used. When a lane fails, the others are
# stopped; the exit status is the first failed lane's, and the last lines
# are the failed lanes' failures again (go test's FAIL lines and messages,
# panics, make's errors), so that the tail of a long log names them.
# `make test` runs the plane's builds beside the images', and its checks
# beside the e2e suites (docs/testbed.md, "How make test uses the two cores").
set -uo pipefail

if [ $# -eq 0 ]; then
	echo "usage: lanes.sh NAME=COMMAND..." >&2
	exit 2
fi

for arg in "$@"; do
	name=${arg%%=*}
	if [ "$name" = "$arg" ] || [ -z "$name" ] || [ -z "${arg#*=}" ]; then
		echo "lanes: $arg: want NAME=COMMAND" >&2
		exit 2
	fi
done

timesdir=$(mktemp -d)
trap 'rm -rf "$timesdir"' EXIT

names=()
pids=()
for arg in "$@"; do
	name=${arg%%=*}
	cmd=${arg#*=}
	# A lane is a process group of its own (set -m), so stopping it stops
	# what its command started.
	set -m
	(
		set +m
		start=$SECONDS
		# A copy of the lane's lines for the failures at the end (go test
		# without -v prints little).
		bash -c "$cmd" 2>&1 | sed -u "s/^/$name| /" | tee "$timesdir/$name.log"
		rc=$?
		# times' second line: the CPU time of what the lane ran (not in
		# $(...), whose subshell has no children yet).
		times >"$timesdir/$name"
		cpu=$(sed -n 2p "$timesdir/$name")
		echo "$name| lane finished in $((SECONDS - start))s (CPU: user ${cpu% *}, system ${cpu#* }), exit status $rc"
		exit "$rc"
	) &
	set +m
	names+=("$name")
	pids+=("$!")
done

stop() {
	for pid in "${pids[@]}"; do
		kill -TERM -- "-$pid" 2>/dev/null
	done
}
trap 'stop; exit 130' INT TERM

status=0
running=("${pids[@]}")
while [ ${#running[@]} -gt 0 ]; do
	wait -n -p done "${running[@]}"
	rc=$?
	left=()
	for pid in "${running[@]}"; do
		[ "$pid" = "$done" ] || left+=("$pid")
	done
	running=("${left[@]}")
	if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then
		for i in "${!pids[@]}"; do
			[ "${pids[$i]}" = "$done" ] && echo "lanes: ${names[$i]} failed (exit status $rc); stopping the others" >&2
		done
		status=$rc
		stop
	fi
done
if [ "$status" -ne 0 ]; then
	for name in "${names[@]}"; do
		# go test's FAIL lines and the messages of failed tests, panics,
		# make's errors.
		failures=$(grep -E "^$name\| ((--- FAIL|FAIL|panic:|fatal error:)|[[:space:]]+[^ ]+_test\.go:[0-9]+:|.*\*\*\* \[)" "$timesdir/$name.log" | tail -n 60)
		if [ -n "$failures" ]; then
			echo "lanes: what failed in $name (its last 60 such lines):" >&2
			echo "$failures" >&2
		fi
	done
fi
exit "$status"
