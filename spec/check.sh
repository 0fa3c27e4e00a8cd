#!/usr/bin/env bash
# Model-check the KV transfer protocol (spec/transfer.pml) with SPIN.
#
#   bash spec/check.sh            the CI set: safety, liveness, negative controls
#   FULL=1 bash spec/check.sh     adds slow checks (minutes, GBs): liveness of two
#                                 concurrent requests, liveness under weak fairness,
#                                 one request under a fault budget of four, and the
#                                 window-of-2 checks at larger budgets
#   JOBS=n                        checks run n at a time (default 2)
#   ONLY=regex                    only the checks whose name matches (e.g. ONLY=control)
#
# The real model must pass every safety and liveness check with zero errors; every
# negative control (a deliberately broken variant of the same file) must make SPIN
# report the violation it is there for. Exit status: 0 only if all of that holds.
# Builds go to a temporary directory; nothing is installed and the repo is not touched.
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
model="$here/transfer.pml"

for tool in spin gcc; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "spec/check.sh: '$tool' not found; install it (Debian: apt-get install -y spin gcc)" >&2
    exit 2
  fi
done

work="$(mktemp -d "${TMPDIR:-/tmp}/bulkhead-spin.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# -O0: pan.c is large and gcc -O2 spends longer compiling it than pan spends running.
CFLAGS_PAN="${CFLAGS_PAN:--O0}"
# Checks run this many at a time (each is one single-threaded pan).
JOBS="${JOBS:-2}"
names=()

# run_check NAME KIND SPIN_DEFINES PAN_ARGS [EXPECT_REGEX]
#   KIND: safety | liveness | control (must fail) | witness (must be reached)
#   For a control, EXPECT_REGEX must match the assertion SPIN reports, so that a
#   control can only "pass" by failing for the reason it exists.
run_check() {
  local name="$1" kind="$2" defs="$3" panargs="$4" expect="${5:-}"
  local dir="$work/$name" cflags="-DCOLLAPSE" out rc states secs errors verdict why=""
  mkdir -p "$dir"
  exec >"$dir/report" 2>&1
  if [ "$kind" != liveness ]; then cflags="$cflags -DSAFETY -DNOCLAIM"; fi
  local t0; t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  if ! (cd "$dir" && spin $defs -a "$model" >spin.log 2>&1); then
    echo "FAIL  $name: spin -a failed:"; sed 's/^/      /' "$dir/spin.log" | head -20
    echo FAIL >"$dir/verdict"; return
  fi
  # shellcheck disable=SC2086
  if ! (cd "$dir" && gcc $CFLAGS_PAN $cflags -o pan pan.c >gcc.log 2>&1); then
    echo "FAIL  $name: gcc failed:"; sed 's/^/      /' "$dir/gcc.log" | head -20
    echo FAIL >"$dir/verdict"; return
  fi
  # shellcheck disable=SC2086
  (cd "$dir" && ./pan -m20000 $panargs >pan.log 2>&1)
  rc=$?
  out="$dir/pan.log"
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$out" | tail -1)
  states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' "$out" | tail -1)
  if [ -z "$errors" ]; then
    verdict=FAIL; why="pan did not finish (exit $rc)"
  elif grep -q "max search depth too small" "$out"; then
    verdict=FAIL; why="search depth too small: raise -m"
  elif [ "$kind" = control ] || [ "$kind" = witness ]; then
    if [ "$errors" -gt 0 ] && grep -Eq "$expect" "$out"; then
      verdict=ok; why="found, as it must be: $(grep -m1 -E '^pan:1: ' "$out" | cut -c1-110)"
    elif [ "$errors" -gt 0 ]; then
      verdict=FAIL; why="failed, but not on the property it targets: $(grep -m1 -E '^pan:1: ' "$out" | cut -c1-110)"
    else
      verdict=FAIL; why="no error found: the variant PASSED (a control must fail, a witness must be reached)"
    fi
  else
    if [ "$errors" -eq 0 ]; then
      verdict=ok
    else
      verdict=FAIL; why="$(grep -m1 -E '^pan:1: ' "$out" | cut -c1-110)"
    fi
  fi
  printf '%-4s  %-27s %-8s states=%-9s errors=%-3s %6ss  %s\n' \
    "$verdict" "$name" "$kind" "${states:-?}" "${errors:-?}" "$secs" "$why"
  echo "$verdict" >"$dir/verdict"
  if [ "$verdict" != ok ]; then
    if { [ "$kind" != control ] && [ "$kind" != witness ]; } || [ "$errors" = 0 ]; then
      sed 's/^/      /' "$out" | grep -v '^      	' | head -25
    fi
    if [ -f "$dir/transfer.pml.trail" ]; then
      echo "      replay (with KEEP=1): cd $dir && spin $defs -t -k transfer.pml.trail -r -s $model"
    fi
  fi
}

# check NAME ...: queue run_check in the background, at most JOBS at once.
# ONLY=regex runs only the checks whose name matches.
check() {
  if [ -n "${ONLY:-}" ] && ! [[ "$1" =~ $ONLY ]]; then return; fi
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
  names+=("$1")
  run_check "$@" &
}

echo "SPIN $(spin -V 2>/dev/null | sed -n 's/^Spin Version \([^ ]*\).*/\1/p'), model spec/transfer.pml"

# --- the real model: safety (assertions (a)-(e), channel bounds, invalid end states) ---
# (Biggest first: the checks run JOBS at a time.)
# seq: two requests back to back; a fault in either, so the second meets whatever the
#      first left behind (orphaned pages, tombstones, frames still in the network).
check safety-seq-f1       safety   "-DNREQ=2 -DSEQREQ -DFAULTS=1 -DRETRIES=1" ""
# conc: two concurrent requests competing for both pools; cancels, refusals and
#      late frames arriving for pages already reused; no network faults.
check safety-conc-f0      safety   "-DNREQ=2 -DFAULTS=0 -DRETRIES=0" ""
# one: a single request under the largest fault budget (losses, duplicates, reorders,
#      corruption, crashes, early lease expiry) and two retransmissions.
check safety-one-f3       safety   "-DNREQ=1 -DFAULTS=3 -DRETRIES=2" ""
# w2: a credit window of 2. With prompts of up to 2 tokens the whole prompt is in
#      flight, so frames are reordered within the window and accepted out of order
#      (unreachable at W=1); long3 allows 3-token prompts, so the window of 2 also
#      fills and holds the sender back. Property (f): decode's window check never
#      refuses an honest sender.
check safety-one-f3-w2    safety   "-DNREQ=1 -DFAULTS=3 -DRETRIES=2 -DW=2" ""
check safety-long3-f2-w2  safety   "-DLONG3 -DNREQ=1 -DFAULTS=2 -DRETRIES=1 -DW=2" ""

# --- the real model: liveness (ltl `live`: every admitted request ends, every page
# is freed), searched for acceptance cycles WITHOUT the weak-fairness restriction:
# fair runs are a subset of all runs, so this is the stronger check, and about three
# times cheaper than -f. Should a model change make it fail on an unfair cycle only,
# run with LIVENESS="-a -f" to check under weak fairness. ---
LIVENESS="${LIVENESS:--a}"
check liveness-one-f2     liveness "-DNREQ=1 -DFAULTS=2 -DRETRIES=1" "$LIVENESS -N live"
check liveness-seq-f0     liveness "-DNREQ=2 -DSEQREQ -DFAULTS=0 -DRETRIES=0" "$LIVENESS -N live"
check liveness-long3-f1-w2 liveness "-DLONG3 -DNREQ=1 -DFAULTS=1 -DRETRIES=1 -DW=2" "$LIVENESS -N live"

# --- negative controls: each must be rejected, on the property it breaks ---
# (c): decode starts on 1 token for a prompt the client sent with 3.
check control-placeholder control "-DNREQ=1 -DFAULTS=1 -DPLACEHOLDER" "" \
  'assertion violated .*dcov\[.\]=='
# (b): a page freed while a write into it is in flight.
check control-free-no-drain control "-DNREQ=1 -DFAULTS=1 -DFREE_NO_DRAIN" "" \
  'assertion violated \((dp|pp)\[.\]\.wip==0\)'
# (c)/(a): decode starts with a token missing.
check control-nocount     control  "-DNREQ=1 -DFAULTS=1 -DNOCOUNT" "" \
  'assertion violated .*(dcov\[.\]==|\.data==)'
# (d): a failed transfer answered with 200.
check control-abort-200   control  "-DNREQ=1 -DFAULTS=1 -DABORT_200" "" \
  'assertion violated ddone\[id\]'
# (f): prefill sends past the credit window; a reordered frame arrives past it.
check control-window-overrun control "-DNREQ=1 -DFAULTS=1 -DSENDER_OVERRUN" "" \
  'assertion violated \(dcrashed\|\|\(y<\(k\+1\)\)\)'

# --- reachability witnesses: the scenarios the properties are about do happen ---
check reach-late-frame    witness  "-DNREQ=2 -DFAULTS=0 -DRETRIES=0 -DREACH_LATE_FRAME" "" \
  'assertion violated'
check reach-drain         witness  "-DNREQ=1 -DFAULTS=0 -DRETRIES=0 -DREACH_DRAIN" "" \
  'assertion violated'
check reach-orphan        witness  "-DNREQ=1 -DFAULTS=1 -DRETRIES=0 -DREACH_ORPHAN" "" \
  'assertion violated'
check reach-out-of-order  witness  "-DNREQ=1 -DFAULTS=1 -DRETRIES=0 -DW=2 -DREACH_OUT_OF_ORDER" "" \
  'assertion violated \(y==k\)'
check reach-window-full   witness  "-DLONG3 -DNREQ=1 -DFAULTS=0 -DRETRIES=0 -DW=2 -DREACH_WINDOW_FULL" "" \
  'assertion violated'

if [ "${FULL:-0}" = 1 ]; then
  check full-liveness-one-f2-fair liveness "-DNREQ=1 -DFAULTS=2 -DRETRIES=1" "-a -f -N live"
  check full-liveness-conc-f0 liveness "-DNREQ=2 -DFAULTS=0 -DRETRIES=0" "$LIVENESS -N live"
  check full-safety-one-f4    safety   "-DNREQ=1 -DFAULTS=4 -DRETRIES=2" ""
  check full-safety-seq-f1-w2   safety   "-DNREQ=2 -DSEQREQ -DFAULTS=1 -DRETRIES=1 -DW=2" ""
  check full-safety-conc-f0-w2  safety   "-DNREQ=2 -DFAULTS=0 -DRETRIES=0 -DW=2" ""
  check full-safety-long3-f3-w2 safety   "-DLONG3 -DNREQ=1 -DFAULTS=3 -DRETRIES=2 -DW=2" ""
  check full-liveness-one-f2-w2 liveness "-DNREQ=1 -DFAULTS=2 -DRETRIES=1 -DW=2" "$LIVENESS -N live"
  check full-liveness-long3-f2-w2 liveness "-DLONG3 -DNREQ=1 -DFAULTS=2 -DRETRIES=1 -DW=2" "$LIVENESS -N live"
fi

wait
passed=0
failed=0
for name in "${names[@]}"; do
  cat "$work/$name/report"
  if [ "$(cat "$work/$name/verdict" 2>/dev/null)" = ok ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed"
if [ "${KEEP:-0}" = 1 ]; then trap - EXIT; echo "build products kept in $work"; fi
[ "$failed" -eq 0 ]
